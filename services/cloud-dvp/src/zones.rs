//! Zones on DVP: the `topology.kubernetes.io/zone` (and `/region`) labels of the parent
//! cluster's Nodes. A VM is in the zone of the parent node it runs on; a disk is in the
//! zones of the parent nodes its PersistentVolume can be used from.
//!
//! The parent's Nodes and PersistentVolumes are cluster-scoped: a tenant's account may
//! not read them (the optional ClusterRole of `deploy/parent/dvp/rbac.yaml` grants it).
//! Without it there are no zones: said once in the log, and not asked again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume,
};
use kube::api::ListParams;
use kube::Api;
use overcast_cloud::{CloudError, Result, Zone};

use crate::parent::Parent;

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";

/// One parent node: its name and labels.
#[derive(Debug, Clone)]
pub struct ParentNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl ParentNode {
    /// The node's zone, when it carries one.
    pub fn zone(&self) -> Option<Zone> {
        Some(Zone {
            zone: self.labels.get(ZONE_LABEL)?.clone(),
            region: self.labels.get(REGION_LABEL).cloned().unwrap_or_default(),
        })
    }
}

/// Reads the parent's Nodes, remembering a refusal.
#[derive(Debug, Default)]
pub struct ParentNodes {
    refused: AtomicBool,
}

impl ParentNodes {
    /// Every parent node (one list of their metadata); `None` when the account may not
    /// list them.
    pub async fn list(&self, parent: &Parent) -> Result<Option<Vec<ParentNode>>> {
        if self.refused.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let api: Api<Node> = Api::all(parent.client.clone());
        match parent
            .call(
                "node_list",
                "list the parent's Nodes",
                api.list_metadata(&ListParams::default()),
            )
            .await
        {
            Ok(list) => Ok(Some(
                list.items
                    .into_iter()
                    .filter_map(|n| {
                        Some(ParentNode {
                            name: n.metadata.name?,
                            labels: n.metadata.labels.unwrap_or_default(),
                        })
                    })
                    .collect(),
            )),
            Err(CloudError::PermissionDenied(_)) => {
                self.refused.store(true, Ordering::Relaxed);
                tracing::warn!(
                    "the parent's Nodes cannot be read (deploy/parent/dvp/rbac.yaml's ClusterRole is not bound): no zones"
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Zone of each parent node that has one, by node name; empty when they cannot be
    /// read.
    pub async fn zones_by_node(&self, parent: &Parent) -> Result<BTreeMap<String, Zone>> {
        Ok(self
            .list(parent)
            .await?
            .unwrap_or_default()
            .into_iter()
            .filter_map(|n| Some((n.name.clone(), n.zone()?)))
            .collect())
    }
}

/// The distinct zones of `nodes`, sorted.
pub fn zones_of<'a>(nodes: impl IntoIterator<Item = &'a ParentNode>) -> BTreeSet<Zone> {
    nodes.into_iter().filter_map(ParentNode::zone).collect()
}

/// The zones a PersistentVolume can be used from: those of the parent nodes its node
/// affinity admits; `None` when it has none (any node may use it).
pub fn pv_zones(pv: &PersistentVolume, nodes: &[ParentNode]) -> Option<BTreeSet<Zone>> {
    let terms = pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms
        .as_slice();
    if terms.is_empty() {
        return None;
    }
    Some(zones_of(
        nodes
            .iter()
            .filter(|n| terms.iter().any(|t| term_matches(t, n))),
    ))
}

/// Kubernetes' node selector semantics: the terms are ORed, the requirements of a term
/// ANDed; an empty term matches nothing.
pub fn term_matches(term: &NodeSelectorTerm, node: &ParentNode) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let name_fields = BTreeMap::from([("metadata.name".to_owned(), node.name.clone())]);
    exprs.iter().all(|r| requirement_matches(r, &node.labels))
        && fields.iter().all(|r| requirement_matches(r, &name_fields))
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| number(v)),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: Option<&str>) -> ParentNode {
        let mut labels = BTreeMap::from([("kubernetes.io/hostname".to_owned(), name.to_owned())]);
        if let Some(z) = zone {
            labels.insert(ZONE_LABEL.into(), z.into());
        }
        ParentNode {
            name: name.into(),
            labels,
        }
    }

    fn pv(terms: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pv"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": terms}}},
        }))
        .expect("pv")
    }

    fn zone(z: &str) -> Zone {
        Zone {
            zone: z.into(),
            region: String::new(),
        }
    }

    #[test]
    fn a_pv_is_in_the_zones_of_the_nodes_its_affinity_admits() {
        let nodes = [
            node("a1", Some("a")),
            node("a2", Some("a")),
            node("b1", Some("b")),
            node("x", None),
        ];
        // Local storage: pinned to one host.
        let local = pv(json!([{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["b1"]}]}]));
        assert_eq!(pv_zones(&local, &nodes), Some(BTreeSet::from([zone("b")])));
        // Zonal storage: pinned to a zone.
        let zonal = pv(json!([{"matchExpressions": [
            {"key": ZONE_LABEL, "operator": "In", "values": ["a"]}]}]));
        assert_eq!(pv_zones(&zonal, &nodes), Some(BTreeSet::from([zone("a")])));
        // Terms are ORed.
        let two = pv(json!([
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a2"]}]},
            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["b"]}]}]));
        assert_eq!(
            pv_zones(&two, &nodes),
            Some(BTreeSet::from([zone("a"), zone("b")]))
        );
        // Requirements of a term are ANDed: nothing matches both.
        let none = pv(json!([{"matchExpressions": [
            {"key": ZONE_LABEL, "operator": "In", "values": ["a"]},
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["b1"]}]}]));
        assert_eq!(pv_zones(&none, &nodes), Some(BTreeSet::new()));
        // An empty term matches nothing; NotIn matches a node without the label.
        let not_in = pv(json!([{}, {"matchExpressions": [
            {"key": ZONE_LABEL, "operator": "NotIn", "values": ["a"]}]}]));
        assert_eq!(pv_zones(&not_in, &nodes), Some(BTreeSet::from([zone("b")])));
        // Network storage: no affinity, any node.
        let anywhere: PersistentVolume =
            serde_json::from_value(json!({"metadata": {"name": "pv"}, "spec": {}})).expect("pv");
        assert_eq!(pv_zones(&anywhere, &nodes), None);
    }

    #[test]
    fn numeric_operators_compare_numbers_only() {
        let n = ParentNode {
            name: "n".into(),
            labels: BTreeMap::from([("rack".to_owned(), "7".to_owned())]),
        };
        let req = |op: &str, v: &str| NodeSelectorRequirement {
            key: "rack".into(),
            operator: op.into(),
            values: Some(vec![v.into()]),
        };
        assert!(requirement_matches(&req("Gt", "6"), &n.labels));
        assert!(!requirement_matches(&req("Gt", "7"), &n.labels));
        assert!(requirement_matches(&req("Lt", "8"), &n.labels));
        assert!(!requirement_matches(&req("Lt", "x"), &n.labels));
        assert!(!requirement_matches(&req("Bogus", "7"), &n.labels));
    }
}
