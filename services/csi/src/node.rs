//! The Node service. This part answers who the node is; staging, publishing, stats and
//! expansion are not built yet and answer UNIMPLEMENTED (the generated defaults), and
//! NodeGetCapabilities advertises none of them.

use overcast_api::csi_v1 as csi;
use overcast_cloud::Zone;
use tonic::{Request, Response, Status};

use crate::validation::topology_of;

pub struct NodeService {
    node_id: String,
    max_volumes: u64,
    zone: Zone,
}

impl NodeService {
    pub fn new(node_id: String, max_volumes: u64, zone: Zone) -> Self {
        Self {
            node_id,
            max_volumes,
            zone,
        }
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for NodeService {
    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities: vec![],
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: i64::try_from(self.max_volumes).unwrap_or(i64::MAX),
            accessible_topology: Some(topology_of(&self.zone)),
        }))
    }
}
