//! The zVirt provider (oVirt REST API v4, `/ovirt-engine/api`).
//!
//! Built so far: its configuration — what it reads and what it needs, said before
//! anything is contacted. The engine client, disks, instances and discovery are issue
//! 18; until they land the registry stops after the configuration check, saying so.

pub mod config;

pub use config::Config;
