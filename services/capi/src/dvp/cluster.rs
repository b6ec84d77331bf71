//! The DeckhouseCluster controller: once Cluster API's Cluster owns it, it is provisioned
//! (`ready`, contract v1beta1, and `initialization.provisioned`, v1beta2): the parent
//! cluster needs nothing made for a cluster, its VMs live in the configured namespace.
//! Deleted, a finalizer capdvp left on it is released.

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;
use serde_json::json;

use super::Context;
use crate::crd::dvp::{
    ClusterInitialization, DeckhouseCluster, DeckhouseClusterStatus, CAPDVP_CLUSTER_FINALIZER,
};
use crate::{Error, Result};

pub async fn reconcile(dc: Arc<DeckhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
    let key = crate::retry::key_of(dc.as_ref());
    let outcome = reconcile_once(dc, Arc::clone(&ctx)).await;
    ctx.retries.settle(&key, outcome)
}

async fn reconcile_once(dc: Arc<DeckhouseCluster>, ctx: Arc<Context>) -> Result<Action> {
    let owned = dc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Cluster" && o.api_version.starts_with(crate::core::GROUP));
    if dc.metadata.deletion_timestamp.is_some() {
        return release(&dc, &ctx).await;
    }
    if !owned {
        return Ok(Action::await_change());
    }
    let want = DeckhouseClusterStatus {
        ready: true,
        initialization: Some(ClusterInitialization {
            provisioned: Some(true),
            ..ClusterInitialization::default()
        }),
        ..dc.status.clone().unwrap_or_default()
    };
    if dc.status.as_ref() != Some(&want) {
        let api: Api<DeckhouseCluster> =
            Api::namespaced(ctx.client.clone(), &dc.namespace().unwrap_or_default());
        api.patch_status(
            &dc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": want})),
        )
        .await?;
    }
    Ok(Action::await_change())
}

/// A deleted DeckhouseCluster capdvp ran is held by its finalizer: capdvp's cleanup
/// swept the parent of what the cluster left; here each machine removed its own VM and
/// parts before Cluster API deletes the cluster, so the finalizer goes (the write
/// conditional on the object not having changed since it was read).
async fn release(dc: &DeckhouseCluster, ctx: &Context) -> Result<Action> {
    let held = dc.finalizers();
    if !held.iter().any(|f| f == CAPDVP_CLUSTER_FINALIZER) {
        return Ok(Action::await_change());
    }
    let rest: Vec<&String> = held
        .iter()
        .filter(|f| *f != CAPDVP_CLUSTER_FINALIZER)
        .collect();
    let api: Api<DeckhouseCluster> =
        Api::namespaced(ctx.client.clone(), &dc.namespace().unwrap_or_default());
    api.patch(
        &dc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "finalizers": rest,
            "resourceVersion": dc.resource_version(),
        }})),
    )
    .await?;
    tracing::info!(cluster = %dc.name_any(), "capdvp's finalizer released from the deleted cluster");
    Ok(Action::await_change())
}

pub fn error_policy(dc: Arc<DeckhouseCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retries.after_failure(dc.as_ref(), error)
}
