//! The OpenStack provider (Keystone, Nova, Cinder, Neutron, Octavia).
//!
//! Built so far: its configuration — OCCM's `cloud.conf`, read unchanged, and what it
//! needs, said before anything is contacted. The Keystone client, Cinder volumes and
//! discovery are issue 17 (`clouds.yaml` + `OS_CLOUD` come with it); until they land the
//! registry stops after the configuration check, saying so.

pub mod config;

pub use config::Config;
