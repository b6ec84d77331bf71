//! The node controllers. One sync asks the cloud for every instance once, then for each
//! node:
//! - **initialize** a node carrying `node.cloudprovider.kubernetes.io/uninitialized`:
//!   providerID, instance-type and zone/region labels (and their legacy beta twins),
//!   the taint removed — one patch, guarded by the node's resourceVersion; its addresses
//!   in a second patch on the status subresource;
//! - **keep addresses in sync** on initialized nodes;
//! - **lifecycle**: a NotReady node whose instance the cloud no longer lists is deleted;
//!   one whose instance is shut down gets the shutdown taint, removed when it runs again.
//!   A cloud error or timeout is never "gone": the whole sync stops and nothing is deleted.
//!   A successful listing that would make more nodes "gone" than [`guard`] allows deletes
//!   none of them: a wrong inventory looks exactly like a mass disappearance;
//! - **fencing** (opt-in): the out-of-service taint on a node whose lease expired and
//!   whose VM the cloud reports off or gone ([`fencing`]).

pub mod fencing;
pub mod guard;
pub mod held_back;
mod lifecycle;
mod watch;

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, NodeAddress as K8sAddress, Taint};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Resource, ResourceExt};
use overcast_cloud::{Instance, InstanceIndex, Instances, NodeRef};
use serde_json::json;

use crate::addresses::{with_node_ip, AddressPolicy, PROVIDED_NODE_IP};
use crate::metrics::Metrics;
use crate::Result;
pub use fencing::Fencing;
use guard::DeletionGuard;
use held_back::HeldBack;
pub use watch::{slim, Wake, WatchTriage};

pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
const BETA_INSTANCE_TYPE: &str = "beta.kubernetes.io/instance-type";
const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";

/// Which parts of the node controllers run.
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    pub initialize: bool,
    pub lifecycle: bool,
    pub fencing: Option<Fencing>,
}

/// What one sync did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub initialized: usize,
    pub addresses_updated: usize,
    pub deleted: usize,
    pub tainted_shutdown: usize,
    pub untainted: usize,
    pub waiting_for_instance: usize,
    /// Nodes whose kubelet `--node-ip` the cloud does not list: left uninitialized, or
    /// their addresses left as they are.
    pub node_ip_unmatched: usize,
    /// NotReady nodes the cloud no longer lists, kept because the guard refused.
    pub deletion_refused: usize,
    pub fenced: usize,
    pub unfenced: usize,
    /// When a node's fencing grace runs out: the next sync should come by then.
    pub recheck_in: Option<Duration>,
}

pub struct NodeSync<'a> {
    pub api: &'a Api<Node>,
    pub cloud: &'a dyn Instances,
    pub policy: &'a AddressPolicy,
    pub metrics: &'a Metrics,
    pub parts: Parts,
    /// Nodes worked on at once (API round trips overlap; the cloud is still asked once).
    pub concurrency: usize,
    /// Caps how many nodes the lifecycle controller deletes per window.
    pub guard: &'a DeletionGuard,
    /// Where refused deletions are reported as events on their Nodes.
    pub recorder: Option<&'a Recorder>,
    /// Which Nodes were told they wait on the cloud (kept across syncs: once a streak).
    pub held_back: Option<&'a HeldBack>,
}

/// How long a sync waits on the cloud's listing before the Nodes that need its answer are
/// told they wait (the ccm's log says it at the same time, `main.rs`).
pub const HELD_BACK_AFTER: Duration = Duration::from_secs(10);

/// What one node's sync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Nothing,
    Initialized,
    AddressesUpdated,
    Deleted,
    TaintedShutdown,
    Untainted,
    WaitingForInstance,
    NodeIpUnmatched,
    DeletionRefused,
    Fenced,
    Unfenced,
    FenceWaiting(Duration),
}

impl SyncReport {
    fn count(&mut self, outcomes: &[Outcome]) {
        for o in outcomes {
            match o {
                Outcome::Nothing => {}
                Outcome::Initialized => self.initialized += 1,
                Outcome::AddressesUpdated => self.addresses_updated += 1,
                Outcome::Deleted => self.deleted += 1,
                Outcome::TaintedShutdown => self.tainted_shutdown += 1,
                Outcome::Untainted => self.untainted += 1,
                Outcome::WaitingForInstance => self.waiting_for_instance += 1,
                Outcome::NodeIpUnmatched => self.node_ip_unmatched += 1,
                Outcome::DeletionRefused => self.deletion_refused += 1,
                Outcome::Fenced => self.fenced += 1,
                Outcome::Unfenced => self.unfenced += 1,
                Outcome::FenceWaiting(d) => {
                    self.recheck_in = Some(self.recheck_in.map_or(*d, |r| r.min(*d)));
                }
            }
        }
    }
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn has_taint(node: &Node, key: &str) -> bool {
    taints(node).iter().any(|t| t.key == key)
}

/// Whether the node's Ready condition is True.
pub fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

/// The addresses the node should have, as upstream's cloud-node controller makes them:
/// the cloud's (through the address policy); the node's own Hostname kept when the cloud
/// names none (kubelet wrote it); kubelet's `--node-ip` honoured ([`with_node_ip`]).
/// Empty when the cloud reports none (vSphere's guest tools not running): the node's are
/// left as they are. An error when kubelet's node IP is not among the cloud's: upstream
/// neither initializes such a node nor touches its addresses.
fn wanted_addresses(
    policy: &AddressPolicy,
    instance: &Instance,
    node: &Node,
) -> std::result::Result<Vec<K8sAddress>, String> {
    let mut out: Vec<K8sAddress> = policy
        .apply(&instance.addresses)
        .into_iter()
        .map(|a| K8sAddress {
            type_: a.kind.as_str().to_owned(),
            address: a.address,
        })
        .collect();
    if out.is_empty() {
        return Ok(out);
    }
    if !out.iter().any(|a| a.type_ == "Hostname") {
        let own = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        out.extend(
            own.into_iter()
                .flatten()
                .filter(|a| a.type_ == "Hostname")
                .cloned(),
        );
    }
    match node.annotations().get(PROVIDED_NODE_IP) {
        Some(provided) => with_node_ip(provided, &out),
        None => Ok(out),
    }
}

/// Re-reads after a conflict before the error is left to the next sync.
const CONFLICT_RETRIES: u32 = 3;

impl NodeSync<'_> {
    /// Syncs `nodes` (the cache's own `Arc<Node>`s, or owned nodes in tests).
    pub async fn run<N: Borrow<Node> + Sync>(&self, nodes: &[N]) -> Result<SyncReport> {
        let started = Instant::now();
        let result = self.sync(nodes).await;
        self.metrics.reconciled(
            "node",
            started.elapsed().as_secs_f64(),
            result.as_ref().err(),
        );
        result
    }

    async fn sync<N: Borrow<Node> + Sync>(&self, nodes: &[N]) -> Result<SyncReport> {
        // (The metric keeps the name it has always had: one cloud answer per sync.)
        self.metrics.cloud_call("list_instances");
        // One answer for every node — about these nodes alone where the cloud can say
        // (its cost follows the cluster, not the cloud); on error nothing below runs
        // (uncertain is not gone). The Nodes that wait on it are told when it is slow or
        // fails.
        let refs: Vec<NodeRef<'_>> = nodes
            .iter()
            .map(|n| {
                let node: &Node = n.borrow();
                NodeRef {
                    name: node.metadata.name.as_deref().unwrap_or_default(),
                    provider_id: provider_id(node),
                }
            })
            .collect();
        let listing = self.cloud.instances_of(&refs);
        tokio::pin!(listing);
        let listed = match tokio::time::timeout(HELD_BACK_AFTER, listing.as_mut()).await {
            Ok(listed) => listed,
            Err(_) => {
                let why = format!("no answer after {}s", HELD_BACK_AFTER.as_secs());
                self.held_back(nodes, &why).await;
                listing.await
            }
        };
        let listed = match listed {
            Ok(listed) => listed,
            Err(e) => {
                self.held_back(nodes, &e.to_string()).await;
                return Err(e.into());
            }
        };
        if let Some(h) = self.held_back {
            h.answered();
        }
        let instances = InstanceIndex::new(self.cloud, &listed);
        let deletions = self.admit_deletions(nodes, &instances);
        let mut report = SyncReport::default();
        let mut first_error = None;
        // Futures are collected before they run (a closure inside the stream trips
        // rustc's Send check for the spawned task, rust-lang/rust#64552), a chunk at a
        // time: all 5,000 at once held ~30 MiB of future state during every sync.
        let concurrency = self.concurrency.max(1);
        for chunk in nodes.chunks(concurrency * 16) {
            let pending: Vec<_> = chunk
                .iter()
                .map(|node| self.named(node.borrow(), &instances, deletions))
                .collect();
            let results: Vec<(String, Result<Vec<Outcome>>)> = futures::stream::iter(pending)
                .buffered(concurrency)
                .collect()
                .await;
            for (name, result) in results {
                match result {
                    Ok(outcomes) => report.count(&outcomes),
                    Err(e) => {
                        tracing::warn!(node = %name, error = %e, "node sync failed");
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        if self.parts.fencing.is_some() {
            let before = nodes
                .iter()
                .filter(|n| fencing::carries_ours((*n).borrow()))
                .count();
            self.metrics
                .out_of_service
                .set((before + report.fenced).saturating_sub(report.unfenced) as i64);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Syncs one node; a patch refused with 409 (the node changed since the cache read
    /// it) re-reads the node and tries again at once, as client-go's RetryOnConflict does,
    /// instead of waiting for the next sync.
    async fn named(
        &self,
        node: &Node,
        instances: &InstanceIndex<'_>,
        may_delete: bool,
    ) -> (String, Result<Vec<Outcome>>) {
        let name = node.name_any();
        let mut fresh: Option<Node> = None;
        let mut attempt = 0;
        loop {
            let current = fresh.as_ref().unwrap_or(node);
            match self.sync_node(current, instances, may_delete).await {
                Err(e) if e.is_conflict() && attempt < CONFLICT_RETRIES => {
                    attempt += 1;
                    match self.api.get_opt(&name).await {
                        Ok(Some(n)) => fresh = Some(n),
                        // Deleted meanwhile: nothing left to do.
                        Ok(None) => return (name, Ok(vec![])),
                        Err(e) => return (name, Err(e.into())),
                    }
                }
                other => return (name, other),
            }
        }
    }

    async fn sync_node(
        &self,
        node: &Node,
        instances: &InstanceIndex<'_>,
        may_delete: bool,
    ) -> Result<Vec<Outcome>> {
        let name = node.name_any();
        if instances.ambiguous(&name, provider_id(node)) {
            tracing::warn!(node = %name, "several instances carry this node's name: not initialized, not deleted, until it has a providerID or the others are renamed");
            return Ok(vec![Outcome::WaitingForInstance]);
        }
        let instance = match instances.find(&name, provider_id(node)) {
            Ok(found) => found,
            // Not "gone": the node is neither initialized, nor tainted, nor deleted, and
            // says why.
            Err(e) if is_ours(node, self.cloud.provider_name()) => {
                self.event(
                    node,
                    "ProviderIDUnreadable",
                    format!("{e}; the node is left as it is"),
                )
                .await;
                return Err(e.into());
            }
            Err(_) => return Ok(vec![]),
        };
        if has_taint(node, UNINITIALIZED_TAINT) {
            if !self.parts.initialize {
                return Ok(vec![]);
            }
            let Some(i) = instance else {
                return Ok(vec![Outcome::WaitingForInstance]);
            };
            // As upstream: a node whose kubelet was given an address the cloud does not
            // list stays tainted (no pods land on a node reached on the wrong network).
            return match wanted_addresses(self.policy, i, node) {
                Ok(addresses) => self
                    .initialize(node, i, addresses)
                    .await
                    .map(|()| vec![Outcome::Initialized]),
                Err(e) => {
                    self.node_ip_unmatched(node, &e).await;
                    Ok(vec![Outcome::NodeIpUnmatched])
                }
            };
        }
        let mut outcomes = Vec::new();
        if self.parts.initialize {
            if let Some(i) = instance {
                let have = node
                    .status
                    .as_ref()
                    .and_then(|s| s.addresses.clone())
                    .unwrap_or_default();
                match wanted_addresses(self.policy, i, node) {
                    Ok(want) if !want.is_empty() && want != have => {
                        self.patch_addresses(&name, want).await?;
                        outcomes.push(Outcome::AddressesUpdated);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.node_ip_unmatched(node, &e).await;
                        outcomes.push(Outcome::NodeIpUnmatched);
                    }
                }
            }
        }
        if self.parts.lifecycle {
            outcomes.push(self.lifecycle(node, instance, may_delete).await?);
        }
        if let Some(fencing) = self.parts.fencing {
            // A node just deleted needs no fence; one of another provider is not ours.
            if !outcomes.contains(&Outcome::Deleted) && is_ours(node, self.cloud.provider_name()) {
                outcomes.push(self.fence(node, instance, may_delete, fencing).await?);
            }
        }
        Ok(outcomes)
    }

    async fn initialize(
        &self,
        node: &Node,
        instance: &Instance,
        addresses: Vec<K8sAddress>,
    ) -> Result<()> {
        let name = node.name_any();
        // As the upstream cloud-node controller: an empty value (a cloud without regions,
        // a flavor name that is no label value) is no label at all.
        let mut labels = BTreeMap::new();
        let mut put = |keys: [&'static str; 2], value: &str| {
            if !value.is_empty() {
                for k in keys {
                    labels.insert(k, value.to_owned());
                }
            }
        };
        put([INSTANCE_TYPE, BETA_INSTANCE_TYPE], &instance.instance_type);
        if let Some(z) = &instance.zone {
            put([ZONE, BETA_ZONE], &z.zone);
            put([REGION, BETA_REGION], &z.region);
        }
        let remaining: Vec<Taint> = taints(node)
            .into_iter()
            .filter(|t| t.key != UNINITIALIZED_TAINT)
            .collect();
        // The resourceVersion makes the taint list replacement safe: if anyone changed the
        // node since we read it, the API answers 409 and the next sync retries.
        let patch = json!({
            "metadata": { "labels": labels, "resourceVersion": node.resource_version() },
            "spec": { "providerID": instance.provider_id, "taints": remaining },
        });
        self.api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if !addresses.is_empty() {
            self.patch_addresses(&name, addresses).await?;
        }
        tracing::info!(node = %name, provider_id = %instance.provider_id, "node initialized");
        Ok(())
    }

    /// Replaces the node's addresses with the cloud's. A JSON merge patch replaces the
    /// list; a strategic-merge patch would merge it by address type (Kubernetes' patch
    /// key for `addresses`), so two InternalIPs became one and an address the cloud no
    /// longer lists stayed, and the node never matched and was patched on every sync.
    async fn patch_addresses(&self, name: &str, addresses: Vec<K8sAddress>) -> Result<()> {
        let patch = json!({ "status": { "addresses": addresses } });
        self.api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }
}

impl NodeSync<'_> {
    async fn held_back<N: Borrow<Node>>(&self, nodes: &[N], why: &str) {
        if let (Some(h), Some(recorder)) = (self.held_back, self.recorder) {
            h.tell(recorder, nodes, self.parts, why).await;
        }
    }

    async fn node_ip_unmatched(&self, node: &Node, why: &str) {
        tracing::warn!(node = %node.name_any(), reason = %why, "kubelet's node IP is not among the cloud's addresses: not initialized, addresses left as they are");
        self.event(
            node,
            "NodeIPNotFound",
            format!("{why}; the node's addresses are left as they are (and an uninitialized node keeps its taint) until kubelet's --node-ip and the cloud agree"),
        )
        .await;
    }

    async fn event(&self, node: &Node, reason: &str, note: String) {
        self.event_of(node, EventType::Warning, reason, note).await;
    }

    async fn event_of(&self, node: &Node, type_: EventType, reason: &str, note: String) {
        let Some(recorder) = self.recorder else {
            return;
        };
        let event = Event {
            type_,
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

/// Whether `node` belongs to this cloud: its providerID names `provider`, or it has
/// none yet (matched by name).
fn is_ours(node: &Node, provider: &str) -> bool {
    provider_id(node).is_none_or(|p| {
        p.strip_prefix(provider)
            .is_some_and(|rest| rest.starts_with("://"))
    })
}

#[cfg(test)]
mod tests;
