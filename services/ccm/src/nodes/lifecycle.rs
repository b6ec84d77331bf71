//! The node lifecycle: a NotReady node whose instance the cloud no longer lists is
//! deleted (when the deletion guard admits the listing's absences), one whose instance is
//! shut down gets the shutdown taint, removed when it runs again.

use std::borrow::Borrow;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::ResourceExt;
use overcast_cloud::{Instance, InstanceIndex, InstanceState};
use serde_json::json;

use super::guard::Verdict;
use super::{
    has_taint, is_ours, provider_id, ready, taints, NodeSync, Outcome, SHUTDOWN_TAINT,
    UNINITIALIZED_TAINT,
};
use crate::{Error, Result};

impl NodeSync<'_> {
    /// Whether this sync may delete the nodes the listing says are gone: asked of the
    /// guard once, for all of them, with how much of the cluster the listing lacks.
    pub(super) fn admit_deletions<N: Borrow<Node>>(
        &self,
        nodes: &[N],
        instances: &InstanceIndex,
    ) -> bool {
        // Fencing a node the listing lacks asks the guard as a deletion would.
        if !self.parts.lifecycle && self.parts.fencing.is_none() {
            return true;
        }
        let provider = self.cloud.provider_name();
        let ours: Vec<&Node> = nodes
            .iter()
            .map(Borrow::borrow)
            .filter(|n| is_ours(n, provider) && !has_taint(n, UNINITIALIZED_TAINT))
            .collect();
        let missing: Vec<&&Node> = ours
            .iter()
            // Only a listing that positively lacks the node's instance: a providerID the
            // provider cannot read is no answer about it.
            .filter(|n| {
                matches!(instances.find(&n.name_any(), provider_id(n)), Ok(None))
                    && !instances.ambiguous(&n.name_any(), provider_id(n))
            })
            .collect();
        let gone = missing.iter().filter(|n| !ready(n)).count();
        match self
            .guard
            .admit(gone, missing.len(), ours.len(), std::time::Instant::now())
        {
            Verdict::Allowed => true,
            Verdict::Refused {
                missing,
                recent,
                budget,
            } => {
                self.metrics.node_deletions_refused.inc_by(gone as u64);
                tracing::warn!(
                    candidates = gone,
                    missing,
                    nodes = ours.len(),
                    recent,
                    budget,
                    "refusing to delete NotReady nodes the cloud no longer lists: the listing \
                     lacks more nodes than the deletion guard's share, or more were deleted in \
                     its window (a wrong inventory looks the same); check the cloud, then \
                     delete them by hand or raise --node-deletion-max-percent"
                );
                false
            }
        }
    }

    pub(super) async fn lifecycle(
        &self,
        node: &Node,
        instance: Option<&Instance>,
        may_delete: bool,
    ) -> Result<Outcome> {
        // A node another provider manages (a static node beside cloud ones) is not in
        // this cloud's listing, and is not this controller's to delete or taint.
        if !is_ours(node, self.cloud.provider_name()) {
            return Ok(Outcome::Nothing);
        }
        let name = node.name_any();
        let shutdown_tainted = has_taint(node, SHUTDOWN_TAINT);
        match instance {
            None if !ready(node) && !may_delete => {
                self.event(
                    node,
                    "DeletionRefused",
                    "the cloud no longer lists this node's instance, but more nodes than the \
                     deletion guard allows would go at once; kept"
                        .into(),
                )
                .await;
                Ok(Outcome::DeletionRefused)
            }
            None if !ready(node) => {
                tracing::info!(node = %name, "deleting a NotReady node whose instance no longer exists");
                // Only the node this answer was about: one re-registered under the name
                // (another uid), or changed since it was read (a providerID rewritten,
                // Ready again), is a 409 and is looked at again next pass.
                let exact = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: node.metadata.uid.clone(),
                        resource_version: node.metadata.resource_version.clone(),
                    }),
                    ..DeleteParams::default()
                };
                self.api
                    .delete(&name, &exact)
                    .await
                    .map(drop)
                    .or_else(ignore_not_found)?;
                Ok(Outcome::Deleted)
            }
            Some(i)
                if matches!(i.state, InstanceState::Shutdown | InstanceState::Suspended)
                    && !ready(node)
                    && !shutdown_tainted =>
            {
                let mut t = taints(node);
                t.push(Taint {
                    key: SHUTDOWN_TAINT.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                });
                self.set_taints(node, t, None).await?;
                Ok(Outcome::TaintedShutdown)
            }
            Some(i) if i.state == InstanceState::Running && shutdown_tainted => {
                let t = taints(node)
                    .into_iter()
                    .filter(|t| t.key != SHUTDOWN_TAINT)
                    .collect();
                self.set_taints(node, t, None).await?;
                Ok(Outcome::Untainted)
            }
            _ => Ok(Outcome::Nothing),
        }
    }

    /// `node`'s taints replaced by `taints` — and `annotation` (`(key, value)`, a `null`
    /// value removing it) set with them — in one patch guarded by the resourceVersion
    /// this sync read: a Node changed since is left for the next sync, never overwritten.
    pub(super) async fn set_taints(
        &self,
        node: &Node,
        taints: Vec<Taint>,
        annotation: Option<(&str, serde_json::Value)>,
    ) -> Result<()> {
        let mut patch = json!({ "metadata": { "resourceVersion": node.resource_version() }, "spec": { "taints": taints } });
        if let Some((key, value)) = annotation {
            patch["metadata"]["annotations"] = json!({ key: value });
        }
        self.api
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }
}

fn ignore_not_found(e: kube::Error) -> Result<()> {
    match &e {
        kube::Error::Api(s) if s.code == 404 => Ok(()),
        _ => Err(Error::Kube(e)),
    }
}
