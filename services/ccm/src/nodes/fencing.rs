//! Fencing (`--controllers …,node-fencing`, off unless named): the out-of-service taint
//! on a node whose kubelet stopped reporting and whose VM the cloud positively reports
//! powered off or gone.
//!
//! Kubernetes leaves a dead node's pods and volumes where they are: a StatefulSet's pod
//! stays Terminating for ever, and a ReadWriteOnce volume stays attached until the
//! attach/detach controller's six-minute force detach — because only something that
//! knows the machine is off may say the node's writes have stopped. The taint
//! `node.kubernetes.io/out-of-service` (NodeOutOfServiceVolumeDetach) is that word: the
//! taint manager evicts the pods at once (NoExecute), pod GC deletes them although their
//! kubelet never confirms, and the attach/detach controller detaches their volumes
//! without waiting. The cloud's API is the authority on a VM's power state, as a
//! hypervisor is the fence of a classic cluster; this controller says what it says, and
//! nothing else:
//! - applied only when the node's Ready condition has been `Unknown` (its lease expired;
//!   a kubelet that reports `False` is alive) for the grace, *and* the listing — a
//!   successful one — has the node's instance `Shutdown` (never `Suspended`, never a
//!   state the cloud cannot vouch for), or lacks it while the deletion guard admits that
//!   listing's absences. An error, a timeout, a page that is not the API's, a providerID
//!   another provider spelled: no answer, nothing applied;
//! - removed only where this controller applied it (its annotation says so: a taint a
//!   person applied stays theirs), once the node is Ready and its VM running again. The
//!   annotation outlives the taint until the node lifecycle controller has taken its own
//!   taints (`unreachable`, `not-ready`) off: before Kubernetes 1.26 (kubernetes#113136)
//!   that controller writes a node's whole taint list unguarded, from a read that may
//!   predate our removal, and so puts our taint back (seen on the kit's node, v1.25); the
//!   annotation still there, it is removed again. For the same reason a taint of ours that
//!   disappears while the node is still lost and its VM still off is applied again;
//! - never on a node labelled `overcast.dev/fencing=disabled`.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use overcast_cloud::{Instance, InstanceState};
use serde_json::json;

use super::{has_taint, taints, NodeSync, Outcome};
use crate::Result;

pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";
/// The taint's value, as Kubernetes' documentation of non-graceful node shutdown writes it.
pub const OUT_OF_SERVICE_VALUE: &str = "nodeshutdown";
/// `disabled` on a Node: never fenced.
pub const OPT_OUT_LABEL: &str = "overcast.dev/fencing";
/// On a Node this controller fenced: when, and what the cloud said.
pub const FENCED_ANNOTATION: &str = "overcast.dev/fenced";
/// The node lifecycle controller's taints of a node whose kubelet stopped reporting.
const LIFECYCLE_TAINTS: [&str; 2] = [
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
];

/// Whether `node` carries the taint this controller applied (the gauge's count).
pub fn carries_ours(node: &Node) -> bool {
    fenced_by_us(node) && has_taint(node, OUT_OF_SERVICE_TAINT)
}

/// The fencing part's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fencing {
    /// How long the node's Ready condition must have been `Unknown` first.
    pub grace: Duration,
}

/// What fencing does to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Nothing,
    /// Taint it; the cloud's answer, for the event.
    Apply(&'static str),
    /// Remove the taint this controller put there (its annotation stays: see [`Step::Release`]).
    Remove,
    /// Remove this controller's annotation: the taint is off and the node lifecycle
    /// controller has made its last write of this outage (its taints are off too).
    Release,
    /// It would be applied once the grace has run out: look again then.
    Wait(Duration),
}

/// How long the node's Ready condition has been `Unknown` — the node lifecycle
/// controller's verdict that its kubelet's lease expired — or `None` when it is not.
pub(super) fn unknown_for(node: &Node, now: Timestamp) -> Option<Duration> {
    let ready = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    if ready.status != "Unknown" {
        return None;
    }
    // No transition time: as of now (the grace starts, it does not count as over).
    let since = ready.last_transition_time.as_ref().map_or(now, |t| t.0);
    Some(Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO))
}

/// Whether this controller's taint is on `node` (its annotation says so).
pub fn fenced_by_us(node: &Node) -> bool {
    node.annotations().contains_key(FENCED_ANNOTATION)
}

/// What fencing does to `node`, given what a successful listing said of its instance
/// (`None`: the listing lacks it) and whether the deletion guard admitted that listing's
/// absences (`gone_admitted`).
pub fn step(
    node: &Node,
    instance: Option<&Instance>,
    gone_admitted: bool,
    fencing: Fencing,
    now: Timestamp,
) -> Step {
    let tainted = has_taint(node, OUT_OF_SERVICE_TAINT);
    let opted_out = node.labels().get(OPT_OUT_LABEL).map(String::as_str) == Some("disabled");
    if fenced_by_us(node) {
        let back =
            super::ready(node) && instance.is_some_and(|i| i.state == InstanceState::Running);
        if back && tainted {
            return Step::Remove;
        }
        if back {
            let lifecycle_done = !LIFECYCLE_TAINTS.iter().any(|t| has_taint(node, t));
            return if lifecycle_done {
                Step::Release
            } else {
                Step::Nothing
            };
        }
        // Still lost: our taint stays; gone (another writer's stale list), it is applied
        // again on the same terms as the first time.
        if tainted || opted_out {
            return Step::Nothing;
        }
    } else if tainted || opted_out {
        return Step::Nothing;
    }
    let answer = match instance {
        Some(i) if i.state == InstanceState::Shutdown => "reports this node's VM powered off",
        None if gone_admitted => "no longer lists this node's VM",
        _ => return Step::Nothing,
    };
    match unknown_for(node, now) {
        None => Step::Nothing,
        Some(d) if d >= fencing.grace => Step::Apply(answer),
        Some(d) => Step::Wait(fencing.grace - d),
    }
}

impl NodeSync<'_> {
    pub(super) async fn fence(
        &self,
        node: &Node,
        instance: Option<&Instance>,
        gone_admitted: bool,
        fencing: Fencing,
    ) -> Result<Outcome> {
        let now = Timestamp::now();
        match step(node, instance, gone_admitted, fencing, now) {
            Step::Nothing => Ok(Outcome::Nothing),
            Step::Wait(d) => Ok(Outcome::FenceWaiting(d)),
            Step::Apply(answer) => {
                let mut t = taints(node);
                t.push(Taint {
                    key: OUT_OF_SERVICE_TAINT.into(),
                    value: Some(OUT_OF_SERVICE_VALUE.into()),
                    effect: "NoExecute".into(),
                    time_added: Some(Time(now)),
                });
                self.set_taints(
                    node,
                    t,
                    Some((
                        FENCED_ANNOTATION,
                        json!(format!("{now}: the cloud {answer}")),
                    )),
                )
                .await?;
                tracing::warn!(node = %node.name_any(), cloud = answer, "node fenced: out-of-service taint applied");
                self.metrics.fenced("applied");
                self.event_of(
                    node,
                    EventType::Warning,
                    "OutOfServiceTaintApplied",
                    format!(
                        "the cloud {answer} and the node's kubelet has stopped reporting (Ready \
                         Unknown for at least {}s): tainted {OUT_OF_SERVICE_TAINT}={OUT_OF_SERVICE_VALUE}:NoExecute, \
                         so its pods are deleted and its volumes detached without waiting",
                        fencing.grace.as_secs()
                    ),
                )
                .await;
                Ok(Outcome::Fenced)
            }
            Step::Remove => {
                let t: Vec<Taint> = taints(node)
                    .into_iter()
                    .filter(|t| t.key != OUT_OF_SERVICE_TAINT)
                    .collect();
                self.set_taints(node, t, None).await?;
                tracing::info!(node = %node.name_any(), "node back: out-of-service taint removed");
                self.metrics.fenced("removed");
                self.event_of(
                    node,
                    EventType::Normal,
                    "OutOfServiceTaintRemoved",
                    "the node is Ready and the cloud reports its VM running: the out-of-service \
                     taint this controller applied is removed"
                        .into(),
                )
                .await;
                Ok(Outcome::Unfenced)
            }
            Step::Release => {
                self.set_taints(
                    node,
                    taints(node),
                    Some((FENCED_ANNOTATION, serde_json::Value::Null)),
                )
                .await?;
                tracing::info!(node = %node.name_any(), "node back: fencing annotation released");
                Ok(Outcome::Nothing)
            }
        }
    }
}

#[cfg(test)]
mod tests;
