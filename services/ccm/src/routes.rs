//! The route controller, as the upstream cloud-controller-manager's: every node's pod
//! CIDRs (`spec.podCIDRs`) routed to it by the cloud, routes in the cluster CIDRs whose
//! node is gone (or that no longer match its CIDRs) deleted, and the node's
//! `NetworkUnavailable` condition False (`RouteCreated`) once its routes exist, True
//! (`NoRouteCreated`) when making one failed. Cloud-neutral: it speaks
//! [`overcast_cloud::Routes`].
//!
//! Nothing is deleted on an uncertain answer: a failed route listing ends the pass before
//! any change, and routes outside `--cluster-cidr` (other users of the router) are never
//! touched.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use overcast_cloud::cidr::Cidr;
use overcast_cloud::routes::{RouteTarget, Routes};
use overcast_cloud::{AddressType, NodeAddress};
use serde_json::json;

use crate::metrics::Metrics;
use crate::Result;

pub const CONDITION: &str = "NetworkUnavailable";

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RouteReport {
    pub created: usize,
    pub deleted: usize,
    pub failed: usize,
}

pub struct RouteSync {
    pub api: Api<Node>,
    pub cloud: Arc<dyn Routes>,
    pub cluster_cidrs: Vec<Cidr>,
    pub metrics: Arc<Metrics>,
}

/// The node's pod CIDRs: `spec.podCIDRs`, else the older `spec.podCIDR`.
pub fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    let many = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
    if many.is_empty() {
        spec.and_then(|s| s.pod_cidr.clone()).into_iter().collect()
    } else {
        many
    }
}

fn target(node: &Node) -> RouteTarget {
    let addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let kind = match a.type_.as_str() {
                "InternalIP" => AddressType::InternalIP,
                "ExternalIP" => AddressType::ExternalIP,
                "Hostname" => AddressType::Hostname,
                "InternalDNS" => AddressType::InternalDNS,
                "ExternalDNS" => AddressType::ExternalDNS,
                _ => return None,
            };
            Some(NodeAddress {
                kind,
                address: a.address.clone(),
            })
        })
        .collect();
    RouteTarget {
        node: node.name_any(),
        provider_id: node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .filter(|p| !p.is_empty()),
        addresses,
    }
}

/// The network part of a CIDR, for comparing `10.244.1.0/24` with `10.244.1.0/24`
/// however either is written.
fn network(cidr: &str) -> Option<(IpAddr, u8)> {
    let (ip, len) = cidr.split_once('/')?;
    Some((ip.parse().ok()?, len.parse().ok()?))
}

impl RouteSync {
    fn in_cluster(&self, cidr: &str) -> bool {
        network(cidr).is_some_and(|(ip, _)| self.cluster_cidrs.iter().any(|c| c.contains(ip)))
    }

    /// One pass over `nodes` (the ready cache: an empty list means no nodes).
    pub async fn run(&self, nodes: &[Arc<Node>]) -> Result<RouteReport> {
        let targets: Vec<RouteTarget> = nodes.iter().map(|n| target(n)).collect();
        self.metrics.cloud_call("list_routes");
        let routes = self.cloud.list_routes(&targets).await?;
        // Only a complete route counts as made: one whose port pairs are missing (a
        // failed update, a crash between the two) is made again, which repairs it.
        let have: BTreeSet<(String, (IpAddr, u8))> = routes
            .iter()
            .filter(|r| r.complete)
            .filter_map(|r| Some((r.node.clone()?, network(&r.destination_cidr)?)))
            .collect();
        let mut report = RouteReport::default();
        let mut status: Vec<(&Node, bool)> = Vec::new();
        for (node, t) in nodes.iter().zip(&targets) {
            let cidrs = pod_cidrs(node);
            if cidrs.is_empty() {
                continue;
            }
            let mut ok = true;
            for cidr in &cidrs {
                let Some(net) = network(cidr) else {
                    tracing::warn!(node = %t.node, %cidr, "pod CIDR that is not a CIDR; no route");
                    ok = false;
                    continue;
                };
                if have.contains(&(t.node.clone(), net)) {
                    continue;
                }
                self.metrics.cloud_call("create_route");
                match self.cloud.create_route(t, cidr).await {
                    Ok(()) => {
                        tracing::info!(node = %t.node, %cidr, "route created");
                        report.created += 1;
                    }
                    Err(e) => {
                        tracing::warn!(node = %t.node, %cidr, error = %e, "could not create the route");
                        report.failed += 1;
                        ok = false;
                    }
                }
            }
            status.push((node, ok));
        }
        // Routes in the cluster CIDRs that no node wants: their node is gone (a blackhole),
        // or its CIDRs changed.
        let wanted: BTreeSet<(String, (IpAddr, u8))> = nodes
            .iter()
            .flat_map(|n| {
                let name = n.name_any();
                pod_cidrs(n)
                    .into_iter()
                    .filter_map(move |c| Some((name.clone(), network(&c)?)))
            })
            .collect();
        for r in routes
            .iter()
            .filter(|r| self.in_cluster(&r.destination_cidr))
        {
            let keep = match (&r.node, network(&r.destination_cidr)) {
                (Some(node), Some(net)) => wanted.contains(&(node.clone(), net)),
                _ => false,
            };
            if keep {
                continue;
            }
            self.metrics.cloud_call("delete_route");
            match self.cloud.delete_route(r).await {
                Ok(()) => {
                    tracing::info!(node = ?r.node, cidr = %r.destination_cidr, next_hop = %r.next_hop, "route deleted");
                    report.deleted += 1;
                }
                Err(e) => {
                    tracing::warn!(cidr = %r.destination_cidr, error = %e, "could not delete the route");
                    report.failed += 1;
                }
            }
        }
        for (node, ok) in status {
            self.mark(node, ok).await?;
        }
        Ok(report)
    }

    /// Sets the node's NetworkUnavailable condition (the upstream controller's reasons
    /// and messages) unless the cache shows it already says so.
    async fn mark(&self, node: &Node, routed: bool) -> Result<()> {
        if marked_as(node, routed) {
            return Ok(());
        }
        let now = serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ))
        .unwrap_or_default();
        let (status, reason, message) = if routed {
            ("False", "RouteCreated", "RouteController created a route")
        } else {
            (
                "True",
                "NoRouteCreated",
                "RouteController failed to create a route",
            )
        };
        // Conditions merge by type: the kubelet's others are left as they are.
        let patch = json!({"status": {"conditions": [{
            "type": CONDITION, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now, "lastHeartbeatTime": now,
        }]}});
        match self
            .api
            .patch_status(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            // Deleted meanwhile: nothing to mark.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether a node's NetworkUnavailable condition already says `routed` (read from the
/// cache, which keeps that condition).
pub fn marked_as(node: &Node, routed: bool) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == CONDITION))
        .is_some_and(|c| c.status == if routed { "False" } else { "True" })
}

#[cfg(test)]
mod tests;
