//! The cloud abstraction: one set of traits, split by capability, that every Overcast
//! service reaches its cloud through. Providers live in crates of their own
//! (`services/cloud-<name>`), which depend on this one.
//!
//! A provider implements only the capabilities its cloud has; the services ask for the
//! capability they need and map the typed [`CloudError`] to their wire codes in one place.

pub mod cidr;
pub mod claims;
pub mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod discovery;
mod disks;
mod error;
pub mod instances;
pub mod load_balancers;
pub mod machines;
mod name;
pub mod publish;
pub mod routes;

use std::sync::Arc;

pub use claims::{Claim, NameClaims};
pub use config::ConfigError;
pub use discovery::{CloudCondition, ClusterDisk, Discovery, InstanceType};
pub use disks::{
    page_of, Attachment, Attachments, Disk, DiskCondition, DiskSource, DiskSpec, Disks, Snapshot,
    SnapshotSpec, Zone,
};
pub use error::{CloudError, Result};
pub use instances::{
    is_label_value, AddressType, Instance, InstanceIndex, InstanceKey, InstanceState, Instances,
    NodeAddress, NodeRef,
};
pub use load_balancers::{
    Backend, LbPort, LoadBalancerRef, LoadBalancerSpec, LoadBalancerStatus, LoadBalancers,
    Protocol, ServiceRef,
};
pub use machines::{Machines, Removal, Vm, VmPhase};
pub use name::CloudName;
pub use publish::{DiskOfVolume, PublishContext};
pub use routes::{Route, RouteTarget, Routes};

/// Whether `s` is a UUID in its dashed form (`8-4-4-4-12` hex digits, either case).
pub fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A cloud and the capabilities it has. Services start only the controllers whose
/// capability is present, and say which they skipped.
#[derive(Clone, Default)]
pub struct Cloud {
    pub name: &'static str,
    pub disks: Option<Arc<dyn Disks>>,
    pub instances: Option<Arc<dyn Instances>>,
    pub load_balancers: Option<Arc<dyn LoadBalancers>>,
    pub routes: Option<Arc<dyn Routes>>,
    pub discovery: Option<Arc<dyn Discovery>>,
}
