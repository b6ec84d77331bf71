//! The zVirt provider (oVirt REST API v4, `/ovirt-engine/api`).
//!
//! Built: its configuration ([`config`]: the file or upstream's `ZVIRT_*` variables),
//! the engine client ([`client`]: SSO token, JSON, faults and HTML answers typed), disks
//! for the CSI controller ([`disks`]; zones are the oVirt clusters), VMs as the ccm's
//! instances ([`instances`]), discovery for Deckhouse ([`discovery`]), VMs made and
//! removed for the Cluster API provider ([`vms`]).

pub mod client;
pub mod config;
pub mod discovery;
pub mod disks;
pub mod instances;
pub mod provider;
pub mod vms;

use std::sync::Arc;

pub use client::Engine;
pub use config::Config;
pub use discovery::EngineDiscovery;
pub use disks::{EngineDisks, Waits};
pub use instances::EngineInstances;
pub use provider::PROVIDER;
pub use vms::{EngineVms, VmSpec};

use overcast_cloud::Result;
use overcast_cloud_http::{ApiMetrics, HttpClient, HttpSettings};

/// The engine `config` names: TLS as it says (its CA bundle, or `insecure`). Contacts
/// nothing yet.
pub fn connect(config: &Config, metrics: Option<Arc<ApiMetrics>>) -> Result<Arc<Engine>> {
    connect_with(config, HttpSettings::new("zvirt"), metrics)
}

/// [`connect`] with the HTTP client's deadlines and retries given (tests shorten them).
pub fn connect_with(
    config: &Config,
    mut settings: HttpSettings,
    metrics: Option<Arc<ApiMetrics>>,
) -> Result<Arc<Engine>> {
    settings.insecure = config.insecure;
    settings.ca_pem = config.ca_bundle.clone();
    let http = HttpClient::new(settings, metrics)?;
    Ok(Arc::new(Engine::new(http, config)?))
}
