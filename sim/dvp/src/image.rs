//! Images, as the parent's registry holds them: a test adds a `ClusterVirtualImage` or a
//! `VirtualImage` and says whether it is Ready (what the `cvi`/`vi` controllers write
//! once the image is imported: phase `Ready`, `target.registryURL`, its size). A disk
//! made from one waits while it is missing or not Ready ([`datasource`]).

use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::Api;
use overcast_cloud_dvp::api;
use serde_json::json;

use super::{cond, DvpSim};

impl DvpSim {
    /// Adds the image `kind` (`ClusterVirtualImage`, or `VirtualImage` in the sim's
    /// namespace) `name` of `bytes`, Ready or still importing.
    pub async fn add_image(&self, kind: &str, name: &str, bytes: u64, ready: bool) {
        let api = self.images(kind);
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": kind,
            "metadata": {"name": name},
            "spec": {"storage": "ContainerRegistry", "dataSource": {"type": "HTTP", "http": {"url": format!("https://images.example/{name}.img")}}},
        }))
        .expect("image");
        if kind == "VirtualImage" {
            obj.metadata.namespace = Some(self.namespace.clone());
        }
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
        self.set_image_ready(kind, name, bytes, ready).await;
    }

    /// Writes the image's status: Ready with its target and size, or `Provisioning`.
    pub async fn set_image_ready(&self, kind: &str, name: &str, bytes: u64, ready: bool) {
        let status = if ready {
            json!({
                "phase": "Ready",
                "target": {"registryURL": format!("registry.example/{name}@sha256:0")},
                "size": {"unpackedBytes": bytes.to_string(), "unpacked": bytes.to_string()},
            })
        } else {
            json!({"phase": "Provisioning", "progress": "10%"})
        };
        self.images(kind)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("{kind} {name} status: {e}"));
    }

    fn images(&self, kind: &str) -> Api<DynamicObject> {
        match kind {
            "VirtualImage" => {
                Api::namespaced_with(self.client.clone(), &self.namespace, &api::virtual_image())
            }
            _ => Api::all_with(self.client.clone(), &api::cluster_virtual_image()),
        }
    }
}

/// Where a disk's content comes from, once its source is ready: its size, and for a
/// restore the snapshot's file to copy.
#[derive(Debug, Default)]
pub(super) struct Source {
    pub bytes: Option<u64>,
    pub file: Option<std::path::PathBuf>,
}

/// A disk's data source, as the `vd` controller's ObjectRef sources check it:
/// `Ok(Source::default())` for a blank disk, its size (and file) for a Ready image or
/// snapshot, `Err` with the `DatasourceReady` and `Ready` conditions (and the message)
/// the disk waits with — `ClusterImageNotFound`/`ImageNotFound` → `DatasourceIsNotFound`,
/// `ClusterImageNotReady`/`ImageNotReady` → `DatasourceIsNotReady`, and for a
/// VirtualDiskSnapshot missing or not Ready `VirtualDiskSnapshot` (that very string,
/// `vdcondition.VirtualDiskSnapshotNotReady`) → `DatasourceIsNotReady`, "not ready"
/// either way (`object_ref_vdsnapshot.go`).
pub(super) async fn datasource(
    client: &kube::Client,
    namespace: &str,
    source: Option<&serde_json::Value>,
    state: &super::State,
) -> anyhow::Result<Result<Source, [serde_json::Value; 2]>> {
    let Some(source) = source.filter(|s| s["type"] == "ObjectRef") else {
        return Ok(Ok(Source::default()));
    };
    let kind = source["objectRef"]["kind"].as_str().unwrap_or_default();
    let name = source["objectRef"]["name"].as_str().unwrap_or_default();
    if kind == "VirtualDiskSnapshot" {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &api::virtual_disk_snapshot());
        let vds = api.get_opt(name).await?;
        let file = vds
            .as_ref()
            .filter(|s| s.data["status"]["phase"] == "Ready")
            .map(|s| {
                super::snapshot::snapshot_file(state, &s.metadata.uid.clone().unwrap_or_default())
            })
            .filter(|f| f.exists());
        let Some(file) = file else {
            let message = format!("VirtualDiskSnapshot {name:?} not ready.");
            return Ok(Err([
                cond("DatasourceReady", false, "VirtualDiskSnapshot", &message),
                cond("Ready", false, "DatasourceIsNotReady", &message),
            ]));
        };
        let bytes = std::fs::metadata(&file)?.len();
        return Ok(Ok(Source {
            bytes: Some(bytes),
            file: Some(file),
        }));
    }
    let (api, prefix): (Api<DynamicObject>, &str) = match kind {
        "VirtualImage" => (
            Api::namespaced_with(client.clone(), namespace, &api::virtual_image()),
            "Image",
        ),
        _ => (
            Api::all_with(client.clone(), &api::cluster_virtual_image()),
            "ClusterImage",
        ),
    };
    let refused = |what: &str, ready_reason: &str, message: String| {
        Err([
            cond(
                "DatasourceReady",
                false,
                &format!("{prefix}{what}"),
                &message,
            ),
            cond("Ready", false, ready_reason, &message),
        ])
    };
    let Some(image) = api.get_opt(name).await? else {
        return Ok(refused(
            "NotFound",
            "DatasourceIsNotFound",
            format!("{kind} {name:?} not found."),
        ));
    };
    let status = &image.data["status"];
    if status["phase"] != "Ready" || status["target"]["registryURL"].as_str().is_none() {
        return Ok(refused(
            "NotReady",
            "DatasourceIsNotReady",
            format!("{kind} {name:?} not ready."),
        ));
    }
    Ok(Ok(Source {
        bytes: status["size"]["unpackedBytes"]
            .as_str()
            .and_then(|b| b.parse().ok()),
        file: None,
    }))
}
