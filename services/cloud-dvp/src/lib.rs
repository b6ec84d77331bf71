//! The DVP provider (Deckhouse Virtualization Platform: the nodes are VirtualMachines in
//! a namespace of a parent Kubernetes cluster).
//!
//! Built so far: its configuration — what it reads and what it needs, said before
//! anything is contacted. The disks, instances, load balancers and discovery on the
//! parent's `virtualization.deckhouse.io` API are issue 16; until they land the registry
//! stops after the configuration check, saying so.

pub mod config;

pub use config::Config;
