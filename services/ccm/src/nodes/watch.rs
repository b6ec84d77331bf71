//! What the node watch keeps of each Node, and which of its events start work at once.

use k8s_openapi::api::core::v1::Node;
use kube::{Resource, ResourceExt};

use super::{has_taint, provider_id, ready, UNINITIALIZED_TAINT};

/// Which node watch events start work at once. A cluster's kubelets patch their node's
/// status every ten seconds or so (about 17 a second on 5,000 nodes); a full sync —
/// one cloud listing — on each would list the cloud almost continuously. New nodes and
/// nodes still waiting for initialization are handled at once; everything else waits for
/// the periodic sync, unless they turn Ready or NotReady (what the lifecycle controller
/// acts on). The Service controller hears only what changes the backends: a node
/// coming, going, turning Ready or NotReady, or changing what a pool takes it by — its
/// providerID, addresses, exclusion label or deletion (the upstream service controller
/// re-syncs on a providerID change; a node the ccm has just initialized gets its
/// addresses that way, and joins the pools at once instead of at the next resync).
#[derive(Debug, Default)]
pub struct WatchTriage {
    /// By uid: what was last seen.
    seen: std::collections::HashMap<String, Seen>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    ready: bool,
    uninitialized: bool,
    /// On a node fencing marked: which of the taints its steps wait on it carries.
    fencing: Option<u8>,
    /// A hash of what the balancers' backends take from the node.
    backend: u64,
}

/// A hash of what a node's place in the load balancers' pools depends on (besides its
/// readiness): its providerID, addresses, exclusion label and deletion.
fn backend_facts(node: &Node) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    provider_id(node).hash(&mut h);
    if let Some(addresses) = node.status.as_ref().and_then(|s| s.addresses.as_ref()) {
        for a in addresses {
            (&a.type_, &a.address).hash(&mut h);
        }
    }
    node.labels()
        .contains_key(crate::services::EXCLUDE_LABEL)
        .hash(&mut h);
    node.meta().deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

/// On a node this controller fenced (its annotation), the taints fencing's next step
/// waits on — its own, and the node lifecycle controller's, whose removal lets the
/// annotation go (`fencing::Step::Release`) — as bits; `None` on any other node. Their
/// changes are rare (an outage's end) and wake a sync at once: waiting for the periodic
/// one left the annotation on a node back for minutes (issue 71, on two real nodes).
fn fencing_facts(node: &Node) -> Option<u8> {
    use super::fencing::{fenced_by_us, OUT_OF_SERVICE_TAINT};
    fenced_by_us(node).then(|| {
        [
            OUT_OF_SERVICE_TAINT,
            "node.kubernetes.io/unreachable",
            "node.kubernetes.io/not-ready",
        ]
        .iter()
        .enumerate()
        .filter(|(_, t)| has_taint(node, t))
        .fold(0u8, |bits, (i, _)| bits | 1 << i)
    })
}

/// What the node cache keeps of a Node: what the controllers read — metadata (name, uid,
/// resourceVersion, labels, deletion), the spec (providerID, taints), the addresses and
/// the Ready condition's status and last transition — and nothing else. A kubelet's Node is mostly what no
/// controller here reads (managedFields, the image list, nodeInfo, capacity, the other
/// conditions' messages, the annotations but kubelet's node IP); memory grows with the
/// cluster (BENCHMARKS.md, issue 15). Every write is a patch built from what is kept, so nothing dropped here is
/// ever written back.
pub fn slim(node: &mut Node) {
    node.metadata.managed_fields = None;
    // Of the annotations, only those read here: kubelet's --node-ip (the address sync)
    // and fencing's own.
    node.metadata.annotations = node.metadata.annotations.take().and_then(|mut a| {
        let kept: std::collections::BTreeMap<String, String> = [
            crate::addresses::PROVIDED_NODE_IP,
            super::fencing::FENCED_ANNOTATION,
        ]
        .into_iter()
        .filter_map(|k| a.remove_entry(k))
        .collect();
        (!kept.is_empty()).then_some(kept)
    });
    if let Some(status) = node.status.take() {
        // Ready for the controllers here, NetworkUnavailable for the route controller
        // (which writes it only when it changes).
        let kept: Vec<_> = status
            .conditions
            .into_iter()
            .flatten()
            .filter(|c| c.type_ == "Ready" || c.type_ == crate::routes::CONDITION)
            .map(|c| k8s_openapi::api::core::v1::NodeCondition {
                // Fencing's grace counts from Ready's last transition.
                last_transition_time: c.last_transition_time.filter(|_| c.type_ == "Ready"),
                type_: c.type_,
                status: c.status,
                ..Default::default()
            })
            .collect();
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            addresses: status.addresses,
            conditions: (!kept.is_empty()).then_some(kept),
            ..Default::default()
        });
    }
}

/// What one watch event calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wake {
    pub nodes: bool,
    pub services: bool,
}

impl WatchTriage {
    pub fn applied(&mut self, node: &Node) -> Wake {
        let key = node.metadata.uid.clone().unwrap_or_else(|| node.name_any());
        let state = Seen {
            ready: ready(node),
            uninitialized: has_taint(node, UNINITIALIZED_TAINT),
            fencing: fencing_facts(node),
            backend: backend_facts(node),
        };
        let before = self.seen.insert(key, state);
        // Readiness flips are rare (not heartbeats) and are what the lifecycle
        // controller acts on.
        let readiness_changed = before.map(|b| b.ready) != Some(state.ready);
        let fencing_moved =
            state.fencing.is_some() && before.map(|b| b.fencing) != Some(state.fencing);
        Wake {
            nodes: before.is_none() || state.uninitialized || readiness_changed || fencing_moved,
            services: readiness_changed || before.map(|b| b.backend) != Some(state.backend),
        }
    }

    pub fn deleted(&mut self, node: &Node) -> Wake {
        let key = node.metadata.uid.clone().unwrap_or_else(|| node.name_any());
        self.seen.remove(&key);
        Wake {
            nodes: false,
            services: true,
        }
    }

    /// The watch (re)listed: forget what is gone, and sync everything once.
    pub fn relisted(&mut self, present: &std::collections::HashSet<String>) -> Wake {
        self.seen.retain(|k, _| present.contains(k));
        Wake {
            nodes: true,
            services: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;

    use super::{Wake, WatchTriage};
    use crate::nodes::fencing::FENCED_ANNOTATION;

    /// A node this controller fenced wakes a sync when the taints its release waits on go:
    /// the lifecycle controller's last one off, the annotation is released at once, not at
    /// the periodic sync (issue 71). Another node's taint changes wake nothing.
    #[test]
    fn a_fenced_node_s_taints_wake_its_release() {
        let node = |fenced: bool, taints: &[&str]| -> Node {
            let taints: Vec<serde_json::Value> = taints
                .iter()
                .map(|k| serde_json::json!({"key": k, "effect": "NoExecute"}))
                .collect();
            let annotations = if fenced {
                serde_json::json!({FENCED_ANNOTATION: "2026-12-03T00:00:00Z: the cloud …"})
            } else {
                serde_json::json!({})
            };
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n", "uid": "u1", "annotations": annotations},
                "spec": {"taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap()
        };
        let oos = "node.kubernetes.io/out-of-service";
        let unreachable = "node.kubernetes.io/unreachable";
        let nodes_only = Wake {
            nodes: true,
            services: false,
        };
        let mut t = WatchTriage::default();
        t.applied(&node(true, &[oos, unreachable]));
        assert_eq!(t.applied(&node(true, &[oos, unreachable])), Wake::default());
        assert_eq!(
            t.applied(&node(true, &[unreachable])),
            nodes_only,
            "its taint removed"
        );
        assert_eq!(
            t.applied(&node(true, &[])),
            nodes_only,
            "the lifecycle controller's last taint off: release now"
        );
        assert_eq!(t.applied(&node(false, &[])), Wake::default(), "released");
        assert_eq!(
            t.applied(&node(false, &[unreachable])),
            Wake::default(),
            "not ours to wait on"
        );
    }
}
