//! Where this node is, for NodeGetInfo. Most clouds say it at start (the local cloud's
//! flags or file). A DVP node plugin holds no parent credentials, so its zone is the one
//! the cloud-controller-manager found for the node's VM and put on the Node as
//! `topology.kubernetes.io/zone` (and `/region`): read from the API when kubelet asks.
//!
//! kubelet asks once, when the plugin registers, and the answer becomes the node's CSI
//! topology for good; so an answer is given only once the ccm has decided. A Node still
//! tainted `node.cloudprovider.kubernetes.io/uninitialized` is waited for, up to a bound,
//! then UNAVAILABLE (the registrar fails, is restarted, and asks again). A Node the ccm
//! initialized without a zone has none: its volumes carry no topology.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use overcast_cloud::Zone;
use tonic::Status;

use crate::validation::{REGION_KEY, ZONE_KEY};

/// The taint kubelet (`--cloud-provider=external`) puts on a Node until the ccm has
/// initialized it — and labelled its zone.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

#[derive(Debug, Clone)]
pub enum NodeZone {
    /// Known at start.
    Known(Zone),
    /// The labels of this node's Node object.
    FromNodeLabels {
        /// In-cluster configuration when unset.
        kubeconfig: Option<PathBuf>,
        /// How long NodeGetInfo waits for the ccm to initialize the Node.
        wait: Duration,
        /// How often it looks again meanwhile.
        poll: Duration,
    },
}

/// What NodeGetInfo learns about this node: its zone, and — when it was read from the
/// Node — the Node's `spec.providerID` (the instance, for clouds whose node id is it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub zone: Zone,
    pub provider_id: Option<String>,
}

impl NodeZone {
    pub async fn resolve(&self, node: &str) -> Result<NodeFacts, Status> {
        match self {
            NodeZone::Known(zone) => Ok(NodeFacts {
                zone: zone.clone(),
                provider_id: None,
            }),
            NodeZone::FromNodeLabels {
                kubeconfig,
                wait,
                poll,
            } => {
                // The node id names the Node in a URL path: only a name it could be.
                if !is_node_name(node) {
                    return Err(Status::failed_precondition(format!(
                        "node id {node:?} cannot be a Node's name, so its zone cannot be read"
                    )));
                }
                let client = overcast_kube::client(kubeconfig.as_deref())
                    .await
                    .map_err(|e| {
                        Status::failed_precondition(format!(
                            "this node's zone is read from its Node object, and there is no API client: {e:#}"
                        ))
                    })?;
                from_labels(Api::all(client), node, *wait, *poll).await
            }
        }
    }
}

/// The zone the labels of Node `name` give, once the ccm has initialized it, and its
/// provider id.
async fn from_labels(
    nodes: Api<Node>,
    name: &str,
    wait: Duration,
    poll: Duration,
) -> Result<NodeFacts, Status> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let why = match nodes.get_opt(name).await {
            Ok(Some(node)) => match decided(&node) {
                Some(zone) => {
                    return Ok(NodeFacts {
                        zone,
                        provider_id: node
                            .spec
                            .and_then(|s| s.provider_id)
                            .filter(|p| !p.is_empty()),
                    })
                }
                None => format!(
                    "Node {name} is not initialized by the cloud-controller-manager yet ({UNINITIALIZED_TAINT})"
                ),
            },
            Ok(None) => format!("Node {name} does not exist (yet)"),
            Err(kube::Error::Api(e)) if e.code == 403 => {
                // No waiting makes a missing grant appear.
                return Err(Status::failed_precondition(format!(
                    "may not read Node {name} for its zone: {}",
                    e.message
                )));
            }
            Err(e) => format!("read Node {name}: {e}"),
        };
        if tokio::time::Instant::now() + poll > deadline {
            return Err(Status::unavailable(format!(
                "this node's zone is not known after {wait:?}: {why}"
            )));
        }
        tracing::debug!(reason = %why, "waiting for this node's zone");
        tokio::time::sleep(poll).await;
    }
}

/// Whether `s` is a UUID (an OpenStack instance id).
pub use overcast_cloud::is_uuid;

/// The instance a provider id names under `scheme`: the last path segment of
/// `<scheme>://<region?>/<id>`, when it is a UUID.
pub fn instance_of(provider_id: &str, scheme: &str) -> Option<String> {
    let rest = provider_id.strip_prefix(scheme)?.strip_prefix("://")?;
    let id = rest.rsplit('/').next()?;
    is_uuid(id).then(|| id.to_owned())
}

/// Whether `s` can be a Node's name (an RFC 1123 subdomain).
fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && !part.starts_with('-')
                && !part.ends_with('-')
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// The zone a Node's labels give, or `None` while the ccm has not initialized it.
fn decided(node: &Node) -> Option<Zone> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNINITIALIZED_TAINT));
    match labels.get(ZONE_KEY) {
        Some(zone) => Some(Zone {
            zone: zone.clone(),
            region: labels.get(REGION_KEY).cloned().unwrap_or_default(),
        }),
        None if tainted => None,
        None => Some(Zone::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_node_id_that_cannot_name_a_node_never_reaches_a_url() {
        let zone = NodeZone::FromNodeLabels {
            kubeconfig: Some("/nonexistent/kubeconfig".into()),
            wait: Duration::from_secs(1),
            poll: Duration::from_millis(10),
        };
        for hostile in ["", "../secrets", "a/b", "n?watch=1", "UPPER", "a..b", "-a"] {
            let err = zone.resolve(hostile).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{hostile:?}");
            assert!(err.message().contains("cannot be a Node's name"), "{err:?}");
        }
        // A good name gets as far as the (missing) client.
        let err = zone.resolve("worker-1.example").await.unwrap_err();
        assert!(err.message().contains("no API client"), "{err:?}");
    }

    #[test]
    fn an_instance_is_read_from_a_provider_id_of_its_scheme_only() {
        let id = "0c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f";
        assert_eq!(
            instance_of(&format!("openstack:///{id}"), "openstack").as_deref(),
            Some(id)
        );
        assert_eq!(
            instance_of(&format!("openstack://RegionOne/{id}"), "openstack").as_deref(),
            Some(id)
        );
        assert_eq!(instance_of(&format!("dvp://{id}"), "openstack"), None);
        assert_eq!(instance_of("openstack:///../../etc", "openstack"), None);
        assert_eq!(instance_of("openstack:///", "openstack"), None);
    }

    #[test]
    fn a_zone_is_decided_by_the_label_or_by_the_ccm_having_initialized_the_node() {
        let node = |labels: serde_json::Value, taints: serde_json::Value| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n", "labels": labels},
                "spec": {"taints": taints},
            }))
            .unwrap()
        };
        let taint = json!([{"key": UNINITIALIZED_TAINT, "effect": "NoSchedule"}]);
        assert_eq!(decided(&node(json!({}), taint.clone())), None);
        assert_eq!(
            decided(&node(json!({ZONE_KEY: "a", REGION_KEY: "r"}), json!([]))),
            Some(Zone {
                zone: "a".into(),
                region: "r".into()
            })
        );
        // Labelled before the taint is gone: the label is what the ccm decided.
        assert_eq!(
            decided(&node(json!({ZONE_KEY: "a"}), taint)).map(|z| z.zone),
            Some("a".into())
        );
        assert_eq!(
            decided(&node(
                json!({}),
                json!([{"key": "other", "effect": "NoSchedule"}])
            )),
            Some(Zone::default())
        );
    }
}
