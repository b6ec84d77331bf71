//! The DVP provider (Deckhouse Virtualization Platform: the nodes are VirtualMachines in
//! a namespace of a parent Kubernetes cluster, spoken to through its Kubernetes API).
//!
//! Built: its configuration ([`config`]), the parent-cluster client ([`parent`]: deadlines,
//! per-request metrics, errors by what a retry would do), disks ([`disks`]: VirtualDisk +
//! VirtualMachineBlockDeviceAttachment), instances ([`instances`]) and load balancers
//! ([`lb`]: a Service of the parent selecting the backends' VMs) and discovery
//! ([`discovery`]), zones from the parent's Nodes ([`zones`]).

pub mod api;
pub mod config;
pub mod discovery;
pub mod disks;
pub mod instances;
pub mod lb;
pub mod machines;
pub mod parent;
pub mod provider;
pub mod quota;
pub mod zones;

pub use config::Config;
pub use discovery::DvpDiscovery;
pub use disks::{DvpDisks, Waits};
pub use instances::DvpInstances;
pub use lb::DvpLoadBalancers;
pub use machines::ParentVms;
pub use parent::Parent;
pub use provider::PROVIDER;
