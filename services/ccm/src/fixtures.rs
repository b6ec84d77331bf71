//! Realistic objects for the tests and benchmarks (not used by the controllers).

use serde_json::{json, Value};

/// A Node as a kubelet of v1.33 writes it: images, nodeInfo, capacity, five conditions
/// with messages, annotations, managedFields.
pub fn kubelet_node(i: usize) -> Value {
    let images: Vec<Value> = (0..40)
        .map(|k| json!({"names": [format!("registry.example.com/team/app-{k}@sha256:{:064x}", k * 7919 + i), format!("registry.example.com/team/app-{k}:v1.{k}.0")], "sizeBytes": 123_456_789 + k}))
        .collect();
    let condition = |t: &str, s: &str| json!({"type": t, "status": s, "lastHeartbeatTime": "2026-11-23T10:00:00Z", "lastTransitionTime": "2026-11-20T10:00:00Z", "reason": format!("Kubelet{t}"), "message": format!("kubelet reports {t} = {s} on this node")});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": format!("node-{i}"), "uid": format!("00000000-0000-0000-0000-{i:012}"), "resourceVersion": "12345",
            "labels": {"kubernetes.io/hostname": format!("node-{i}"), "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m.large", "topology.kubernetes.io/zone": "z1"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true", "csi.volume.kubernetes.io/nodeid": format!("{{\"local.csi.overcast.dev\":\"node-{i}\"}}")},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-23T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastHeartbeatTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}}, "f:images": {}, "f:nodeInfo": {"f:kubeletVersion": {}}}}}],
        },
        "spec": {"providerID": format!("local://node-{i}"), "podCIDR": "10.244.0.0/24", "taints": [{"key": "example.com/dedicated", "value": "db", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "8", "memory": "32869348Ki", "pods": "110", "ephemeral-storage": "101430960Ki"},
            "allocatable": {"cpu": "8", "memory": "32766948Ki", "pods": "110", "ephemeral-storage": "93478772582"},
            "conditions": [condition("MemoryPressure", "False"), condition("DiskPressure", "False"), condition("PIDPressure", "False"), condition("NetworkUnavailable", "False"), condition("Ready", "True")],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256, i % 256)}, {"type": "Hostname", "address": format!("node-{i}")}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"), "bootID": format!("{i:032x}"), "kernelVersion": "6.1.0-27-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": "v1.33.1", "kubeProxyVersion": "v1.33.1", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
            "volumesInUse": ["kubernetes.io/csi/local.csi.overcast.dev^vol-1"],
        },
    })
}
