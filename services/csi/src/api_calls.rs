//! Every request the csi binary makes to the Kubernetes API (the RBAC the manifests grant
//! it, and nothing more: `deploy/` is tested against this list). The controller and most
//! node plugins make none; a node plugin whose cloud gives it no zone (DVP) reads its own
//! Node's zone labels once, when kubelet registers it (`node::NodeZone`); a node plugin
//! whose cloud's volume ids do not name their disks (vSphere, DVP) reads a volume's
//! VolumeAttachment to this node when it has no record of a mount (`node::attachment`).

use overcast_kube::ApiCall;

pub const NODE_ZONE_FROM_LABELS: &[ApiCall] = &[ApiCall {
    group: "",
    resource: "nodes",
    verbs: &["get"],
    namespace: None,
    names: &[],
}];

pub const NODE_ATTACHMENTS: &[ApiCall] = &[ApiCall {
    group: "storage.k8s.io",
    resource: "volumeattachments",
    verbs: &["get"],
    namespace: None,
    names: &[],
}];
