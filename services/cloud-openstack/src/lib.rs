//! The OpenStack provider (Keystone, Nova, Cinder, Neutron, Octavia).
//!
//! Its configuration — OCCM's `cloud.conf` (or `clouds.yaml`), read unchanged
//! ([`config`]); the Keystone session (password and application-credential tokens,
//! cached and renewed, endpoints from the catalog: [`keystone`]); calls to the services
//! with microversions negotiated ([`client`]); Cinder volumes attached through Nova
//! ([`volumes`]); discovery ([`discovery`]); the ccm's nodes from Nova ([`instances`])
//! load balancers on Octavia ([`octavia`]) and routes on a Neutron router ([`routes`]).

pub mod client;
pub mod config;
pub mod discovery;
pub mod instances;
pub mod keystone;
pub mod octavia;
pub mod provider;
pub mod routes;
pub mod volumes;

use std::sync::Arc;

pub use client::{OpenStack, Service};
pub use config::Config;
pub use discovery::OpenStackDiscovery;
pub use instances::NovaInstances;
pub use octavia::OctaviaLoadBalancers;
pub use provider::PROVIDER;
pub use routes::NeutronRoutes;
pub use volumes::{CinderDisks, Waits};

use overcast_cloud::{CloudError, Result};
use overcast_cloud_http::{ApiMetrics, HttpClient, HttpSettings};

/// The client for the cloud `config` names: TLS as it says (its `ca-file`, or
/// `tls-insecure`), a Keystone session for its credentials, its region, the public
/// interface. Contacts nothing yet.
pub fn connect(config: &Config, metrics: Option<Arc<ApiMetrics>>) -> Result<Arc<OpenStack>> {
    connect_with(config, HttpSettings::new("openstack"), metrics)
}

/// [`connect`] with the HTTP client's deadlines and retries given (tests shorten them).
pub fn connect_with(
    config: &Config,
    mut settings: HttpSettings,
    metrics: Option<Arc<ApiMetrics>>,
) -> Result<Arc<OpenStack>> {
    settings.insecure = config.tls_insecure;
    if let Some(path) = &config.ca_file {
        settings.ca_pem = Some(std::fs::read_to_string(path).map_err(|e| {
            CloudError::InvalidArgument(format!("openstack: ca-file {}: {e}", path.display()))
        })?);
    }
    let http = HttpClient::new(settings, metrics)?;
    let keystone = keystone::Keystone::new(http.clone(), &config.auth_url, config.auth.clone())?;
    Ok(Arc::new(OpenStack::new(
        http,
        keystone,
        "public".into(),
        config.region.clone(),
    )))
}
