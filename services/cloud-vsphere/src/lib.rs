//! The vSphere provider: `vsphere.conf` as cloud-provider-vsphere reads it, vCenter's
//! SOAP API spoken directly (`session`, `soap`, `xml`: sessions, faults, the
//! PropertyCollector), tags over its REST API, CNS (`/vsanHealth`) and SPBM (`/pbm`) —
//! behind the CPI's instances, the CSI driver's disks and Deckhouse's discovery.

pub mod addresses;
pub mod cns;
pub mod config;
pub mod creates;
pub mod credentials;
pub mod discovery;
pub mod disks;
pub mod guest_os;
pub mod instances;
pub mod inventory;
pub mod pbm;
pub mod provider;
pub mod search;
pub mod session;
pub mod slug;
pub mod soap;
pub mod tags;
pub mod task;
pub mod vms;
pub mod vstorage;
pub mod xml;

pub use config::Config;
pub use provider::PROVIDER;
