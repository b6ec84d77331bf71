//! vSphere as the registry sees it. Until its cloud calls are built, its configuration
//! is read and checked as the provider will read it — so a Secret lacking credentials is
//! said now, naming what is missing — and then the binary stops, saying the provider's
//! calls are not in this build.

use overcast_cloud::{Cloud, CloudName};
use overcast_provider::{NodeIdentity, Provider, Role, Settings};

use crate::Config;

/// What this crate gives the registry.
pub static PROVIDER: Vsphere = Vsphere;

pub struct Vsphere;

const NOT_BUILT: &str =
    "the vSphere provider's cloud calls are not in this build yet; see the README's status table";

#[async_trait::async_trait]
impl Provider for Vsphere {
    fn name(&self) -> CloudName {
        CloudName::Vsphere
    }

    fn node_identity(&self, _s: &Settings) -> anyhow::Result<NodeIdentity> {
        anyhow::bail!(NOT_BUILT)
    }

    async fn open(&self, _role: Role, s: &Settings) -> anyhow::Result<Cloud> {
        let c = Config::load(s.cloud_config.as_deref())?;
        if !c.unknown.is_empty() {
            tracing::warn!(cloud = "vsphere", keys = ?c.unknown, "the cloud config has keys this version does not know; ignored");
        }
        let hosts: Vec<&str> = c.vcenters.iter().map(|v| v.server.as_str()).collect();
        anyhow::bail!(
            "cloud \"vsphere\": its configuration is complete (vCenter {}); {NOT_BUILT}",
            hosts.join(", ")
        )
    }
}
