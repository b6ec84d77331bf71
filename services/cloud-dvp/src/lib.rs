//! The DVP provider (Deckhouse Virtualization Platform: the nodes are VirtualMachines in
//! a namespace of a parent Kubernetes cluster, spoken to through its Kubernetes API).
//!
//! Built: its configuration ([`config`]), the parent-cluster client ([`parent`]: deadlines,
//! per-request metrics, errors by what a retry would do), disks ([`disks`]: VirtualDisk +
//! VirtualMachineBlockDeviceAttachment) and instances ([`instances`]). Not yet: load
//! balancers, discovery, and the zone topology of volumes (issue 16, continued).

pub mod api;
pub mod config;
pub mod disks;
pub mod instances;
pub mod parent;
pub mod quota;

pub use config::Config;
pub use disks::{DvpDisks, Waits};
pub use instances::DvpInstances;
pub use parent::Parent;
