//! The Identity service: who the driver is, what it offers, and whether it is ready.

use std::sync::Arc;

use overcast_api::csi_v1 as csi;
use overcast_cloud::Disks;
use tonic::{Request, Response, Status};

use csi::plugin_capability::{service, volume_expansion, Service, Type, VolumeExpansion};

/// How long Probe waits for the cloud before it answers "not ready".
const PROBE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

pub struct IdentityService {
    name: String,
    controller: bool,
    /// The cloud a controller needs; a node-only driver needs none.
    cloud: Option<Arc<dyn Disks>>,
}

impl IdentityService {
    pub fn new(name: String, controller: bool, cloud: Option<Arc<dyn Disks>>) -> Self {
        Self {
            name,
            controller,
            cloud,
        }
    }
}

fn service(t: service::Type) -> csi::PluginCapability {
    csi::PluginCapability {
        r#type: Some(Type::Service(Service { r#type: t as i32 })),
    }
}

fn expansion(t: volume_expansion::Type) -> csi::PluginCapability {
    csi::PluginCapability {
        r#type: Some(Type::VolumeExpansion(VolumeExpansion { r#type: t as i32 })),
    }
}

#[tonic::async_trait]
impl csi::identity_server::Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: env!("CARGO_PKG_VERSION").to_owned(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        let mut capabilities = vec![service(service::Type::VolumeAccessibilityConstraints)];
        if self.controller {
            capabilities.insert(0, service(service::Type::ControllerService));
        }
        capabilities.push(expansion(volume_expansion::Type::Online));
        capabilities.push(expansion(volume_expansion::Type::Offline));
        Ok(Response::new(csi::GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        let ready = match &self.cloud {
            None => true,
            // A cloud that hangs (its identity service paused, a black-holed route)
            // must not hang the probe: kubelet's and livenessprobe's own deadlines are
            // a few seconds, and a probe that never answers reads as a dead driver, not
            // as a cloud that is unreachable.
            Some(cloud) => match tokio::time::timeout(PROBE_DEADLINE, cloud.probe()).await {
                Ok(Ok(())) => true,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "probe: the cloud does not answer");
                    false
                }
                Err(_) => {
                    tracing::warn!(
                        "probe: the cloud did not answer within {PROBE_DEADLINE:?}: unreachable"
                    );
                    false
                }
            },
        };
        Ok(Response::new(csi::ProbeResponse { ready: Some(ready) }))
    }
}
