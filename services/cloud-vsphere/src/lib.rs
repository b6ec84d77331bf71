//! The vSphere provider (vCenter's APIs).
//!
//! Built so far: its configuration — `vsphere.conf` in the INI form
//! cloud-provider-vsphere reads, and what it needs, said before anything is contacted.
//! The vCenter client, volumes and instances come after the DVP, OpenStack and zVirt
//! issues (the YAML form of the file with them); until then the registry stops after
//! the configuration check, saying so.

pub mod addresses;
pub mod cns;
pub mod config;
pub mod credentials;
pub mod discovery;
pub mod disks;
pub mod guest_os;
pub mod instances;
pub mod inventory;
pub mod pbm;
pub mod provider;
pub mod session;
pub mod slug;
pub mod soap;
pub mod tags;
pub mod task;
pub mod vms;
pub mod xml;

pub use config::Config;
pub use provider::PROVIDER;
