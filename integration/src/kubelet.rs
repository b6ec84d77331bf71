//! A stand-in for kubelet and the CSI sidecars in tests: the calls they make, on
//! paths laid out as kubelet lays them out under a test's directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::csi_v1 as csi;
use crate::{
    create_request, is_mount_point, node_publish_request, node_unpublish_request, publish_request,
    stage_request, unpublish_request, unstage_request, ControllerClient, Csi, NodeClient,
};

/// Drives the node service the way kubelet does, with the controller calls the
/// sidecars make, on paths under the test's directory.
pub struct Kubelet {
    pub c: ControllerClient,
    pub n: NodeClient,
    pub root: PathBuf,
}

impl Kubelet {
    pub async fn new(csi: &Csi) -> Self {
        let root = csi.dir.path().join("kubelet");
        std::fs::create_dir_all(&root).unwrap();
        Self {
            c: csi.controller().await,
            n: csi.node().await,
            root,
        }
    }

    pub fn staging(&self, id: &str) -> PathBuf {
        self.root.join("staging").join(id)
    }

    pub fn target(&self, id: &str) -> PathBuf {
        self.root.join("pods/pod-1/volumes").join(id)
    }

    pub async fn create(&mut self, name: &str, bytes: i64) -> String {
        self.c
            .create_volume(create_request(name, bytes))
            .await
            .unwrap()
            .into_inner()
            .volume
            .unwrap()
            .volume_id
    }

    pub async fn attach(&mut self, id: &str) -> HashMap<String, String> {
        self.c
            .controller_publish_volume(publish_request(id, false))
            .await
            .unwrap()
            .into_inner()
            .publish_context
    }

    pub fn stage_req(
        &self,
        id: &str,
        ctx: &HashMap<String, String>,
        cap: csi::VolumeCapability,
    ) -> csi::NodeStageVolumeRequest {
        stage_request(id, ctx, &self.staging(id), cap)
    }

    pub fn publish_req(
        &self,
        id: &str,
        ctx: &HashMap<String, String>,
        cap: csi::VolumeCapability,
        readonly: bool,
    ) -> csi::NodePublishVolumeRequest {
        csi::NodePublishVolumeRequest {
            readonly,
            ..node_publish_request(id, ctx, &self.staging(id), &self.target(id), cap)
        }
    }

    pub async fn stage(
        &mut self,
        id: &str,
        ctx: &HashMap<String, String>,
        cap: csi::VolumeCapability,
    ) -> Result<(), tonic::Status> {
        std::fs::create_dir_all(self.staging(id)).unwrap();
        let req = self.stage_req(id, ctx, cap);
        self.n.node_stage_volume(req).await.map(drop)
    }

    pub async fn publish(
        &mut self,
        id: &str,
        ctx: &HashMap<String, String>,
        cap: csi::VolumeCapability,
        ro: bool,
    ) -> Result<(), tonic::Status> {
        std::fs::create_dir_all(self.target(id).parent().unwrap()).unwrap();
        let req = self.publish_req(id, ctx, cap, ro);
        self.n.node_publish_volume(req).await.map(drop)
    }

    pub async fn unpublish(&mut self, id: &str) {
        let req = node_unpublish_request(id, &self.target(id));
        self.n.node_unpublish_volume(req.clone()).await.unwrap();
        self.n
            .node_unpublish_volume(req)
            .await
            .expect("unpublish is idempotent");
        assert!(!self.target(id).exists(), "the target is removed");
    }

    pub async fn unstage(&mut self, id: &str) {
        let req = unstage_request(id, &self.staging(id));
        self.n.node_unstage_volume(req.clone()).await.unwrap();
        self.n
            .node_unstage_volume(req)
            .await
            .expect("unstage is idempotent");
        assert!(!is_mount_point(&self.staging(id)));
    }

    /// ControllerUnpublish as the external-attacher sends it: a device the kernel still
    /// holds a moment after the unmount (FAILED_PRECONDITION, "held exclusively"; CI33 on
    /// a loaded machine) is asked again, with backoff, for up to 10 s.
    pub async fn detach(&mut self, id: &str) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match self
                .c
                .controller_unpublish_volume(unpublish_request(id))
                .await
            {
                Ok(_) => return,
                Err(e)
                    if e.code() == tonic::Code::FailedPrecondition
                        && std::time::Instant::now() < until =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await
                }
                Err(e) => panic!("unpublish {id}: {e}"),
            }
        }
    }

    pub async fn stats(
        &mut self,
        id: &str,
        path: &Path,
    ) -> Result<csi::NodeGetVolumeStatsResponse, tonic::Status> {
        let req = csi::NodeGetVolumeStatsRequest {
            volume_id: id.into(),
            volume_path: path.display().to_string(),
            staging_target_path: String::new(),
        };
        self.n
            .node_get_volume_stats(req)
            .await
            .map(|r| r.into_inner())
    }
}
