//! The publish context of a volume's attachment to this node, read from its
//! VolumeAttachment — the object kubelet itself reads it from to pass to NodeStage — for
//! the calls that carry none (NodeUnpublish, NodeUnstage, NodeGetVolumeStats) when the
//! node has no record of the volume, on a cloud whose volume ids do not name their disks
//! (vSphere: the disk's UUID, in vsphere-csi-driver's `diskUUID`; DVP: a hash of the
//! VirtualDisk's uid, in ours' `serial`). Its name is kubelet's and the attach/detach
//! controller's: `csi-<sha256(volume handle + driver name + node name)>`.
//!
//! Only an attachment of this volume, by this driver, to this node, that says it is
//! attached counts; an API that cannot be reached is an error (nothing is unmounted on
//! it), never "no attachment".

use std::collections::HashMap;
use std::path::PathBuf;

use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Default)]
pub enum Attachments {
    /// Not read: the cloud's ids name their disks, or the node has no API access.
    #[default]
    None,
    /// Read from the API server (in-cluster configuration when `kubeconfig` is unset).
    Api {
        kubeconfig: Option<PathBuf>,
        driver: String,
        node: String,
    },
    /// Given by a test: volume id → its attachment's context.
    #[cfg(test)]
    Fixed(HashMap<String, HashMap<String, String>>),
}

/// Why an attachment could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// No API client could be made (no kubeconfig, no in-cluster token): a deployment
    /// that gives the node plugin none.
    NoClient(String),
    /// The API server did not answer, or answered an error: may pass.
    Api(String),
}

/// The VolumeAttachment's name for `handle` of `driver` on Node `node`, as kubelet and the
/// attach/detach controller make it (`getAttachmentName`).
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let digest = Sha256::digest(format!("{handle}{driver}{node}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

impl Attachments {
    /// The attachment's publish context: `Ok(None)` when this volume has no attachment
    /// to this node that says it is attached; an error when the API did not answer.
    pub async fn context(
        &self,
        volume_id: &str,
    ) -> Result<Option<HashMap<String, String>>, Unread> {
        match self {
            Attachments::None => Ok(None),
            #[cfg(test)]
            Attachments::Fixed(all) => Ok(all.get(volume_id).cloned()),
            Attachments::Api {
                kubeconfig,
                driver,
                node,
            } => {
                let client = overcast_kube::client(kubeconfig.as_deref())
                    .await
                    .map_err(|e| Unread::NoClient(format!("{e:#}")))?;
                let name = attachment_name(volume_id, driver, node);
                let found = Api::<VolumeAttachment>::all(client)
                    .get_opt(&name)
                    .await
                    .map_err(|e| Unread::Api(format!("reading VolumeAttachment {name}: {e}")))?;
                Ok(found.and_then(|va| {
                    let ours = va.spec.attacher == *driver && va.spec.node_name == *node;
                    let status = va.status.filter(|s| s.attached && ours)?;
                    Some(
                        status
                            .attachment_metadata
                            .unwrap_or_default()
                            .into_iter()
                            .collect(),
                    )
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubelet's name for a known triple (sha256sum of the joined string).
    #[test]
    fn the_name_is_kubelet_s() {
        let name = attachment_name("vol-1", "csi.vsphere.vmware.com", "worker-0");
        assert_eq!(
            name,
            "csi-d438323f9050b7f5ff6ff36b3843448cb1895acb085bf1f6972402299a6df670"
        );
        assert_ne!(
            name,
            attachment_name("vol-1", "csi.vsphere.vmware.com", "worker-1")
        );
    }
}
