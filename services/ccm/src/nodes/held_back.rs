//! What the node controllers hold back while the cloud does not answer, said on the Nodes
//! it concerns (issue 61): a node waiting to be initialized keeps its `uninitialized`
//! taint, and a node whose kubelet stopped reporting is not fenced, since only the cloud
//! can say its VM is off. An operator running `kubectl describe node` sees why, not only
//! the ccm's log.
//!
//! Said once a streak per node: when a sync has waited on the cloud for a while, or
//! failed; told again only after a sync has succeeded (the Recorder would otherwise patch
//! the same Event at every retry).

use std::collections::HashSet;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};

use super::fencing::{self, OPT_OUT_LABEL, OUT_OF_SERVICE_TAINT};
use super::{has_taint, Parts, UNINITIALIZED_TAINT};

/// The Event reasons.
pub const FENCING_HELD_BACK: &str = "FencingHeldBack";
pub const INITIALIZATION_HELD_BACK: &str = "InitializationHeldBack";

#[derive(Debug, Default)]
pub struct HeldBack {
    /// Nodes told during this streak.
    told: Mutex<HashSet<String>>,
}

/// Why `node` waits on the cloud, if it does: the Event's reason and note.
pub fn waiting(node: &Node, parts: Parts, why: &str) -> Option<(&'static str, String)> {
    if parts.fencing.is_some()
        && fencing::unknown_for(node, jiff::Timestamp::now()).is_some()
        && !has_taint(node, OUT_OF_SERVICE_TAINT)
        && node.labels().get(OPT_OUT_LABEL).map(String::as_str) != Some("disabled")
    {
        return Some((
            FENCING_HELD_BACK,
            format!(
                "the node's kubelet has stopped reporting, and the cloud has not answered \
                 whether its VM is off ({why}): it is not fenced (no {OUT_OF_SERVICE_TAINT} \
                 taint) until the cloud answers"
            ),
        ));
    }
    if parts.initialize && has_taint(node, UNINITIALIZED_TAINT) {
        return Some((
            INITIALIZATION_HELD_BACK,
            format!(
                "the cloud has not answered ({why}): the node keeps {UNINITIALIZED_TAINT} \
                 until it does"
            ),
        ));
    }
    None
}

impl HeldBack {
    /// A sync succeeded: the next streak is told again.
    pub fn answered(&self) {
        self.told.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Tells each node of `nodes` that waits on the cloud, once a streak.
    pub async fn tell<N: std::borrow::Borrow<Node>>(
        &self,
        recorder: &Recorder,
        nodes: &[N],
        parts: Parts,
        why: &str,
    ) {
        for node in nodes {
            let node = node.borrow();
            let Some((reason, note)) = waiting(node, parts, why) else {
                continue;
            };
            if !self
                .told
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(node.name_any())
            {
                continue;
            }
            tracing::warn!(node = %node.name_any(), reason, "{note}");
            let event = Event {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(note),
                action: "NodeLifecycle".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &node.object_ref(&())).await {
                tracing::warn!(error = %e, "could not record an event");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::Fencing;
    use std::time::Duration;

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).unwrap()
    }

    const PARTS: Parts = Parts {
        initialize: true,
        lifecycle: true,
        fencing: Some(Fencing {
            grace: Duration::from_secs(60),
        }),
    };

    #[test]
    fn a_silent_node_is_held_back_from_fencing_and_a_new_one_from_initialization() {
        let lost = node(serde_json::json!({
            "metadata": {"name": "lost"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                "lastTransitionTime": "2026-11-29T00:00:00Z"}]}
        }));
        let (reason, note) = waiting(&lost, PARTS, "timed out").unwrap();
        assert_eq!(reason, FENCING_HELD_BACK);
        assert!(note.contains("(timed out)"), "{note}");
        let no_fencing = Parts {
            fencing: None,
            ..PARTS
        };
        assert_eq!(waiting(&lost, no_fencing, "x"), None);
        let new = node(serde_json::json!({
            "metadata": {"name": "new"},
            "spec": {"taints": [{"key": UNINITIALIZED_TAINT, "effect": "NoSchedule"}]}
        }));
        assert_eq!(
            waiting(&new, PARTS, "x").map(|(r, _)| r),
            Some(INITIALIZATION_HELD_BACK)
        );
        let fine = node(serde_json::json!({
            "metadata": {"name": "fine"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }));
        assert_eq!(waiting(&fine, PARTS, "x"), None);
        let opted_out = node(serde_json::json!({
            "metadata": {"name": "out", "labels": {OPT_OUT_LABEL: "disabled"}},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
        }));
        assert_eq!(waiting(&opted_out, PARTS, "x"), None);
    }
}
