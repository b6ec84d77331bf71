//! The pod network's routes on a Neutron router (`[Route] router-id`), as OCCM's
//! `routes.go` makes them: `destination` the node's pod CIDR, `nexthop` its InternalIP of
//! the same family, and the CIDR added to the node port's `allowed_address_pairs` (so
//! port security lets the pods' traffic out). With the `extraroute-atomic` extension a
//! route is added and removed alone (`add_extraroutes` / `remove_extraroutes`), so two
//! writers never lose each other's routes; without it the router's whole list is
//! written back guarded by `If-Match: revision_number=<n>` (OCCM takes a lock in its own
//! process only), and a concurrent change makes the write fail instead of undoing it.

use std::sync::Arc;

use async_trait::async_trait;
use http::Method;
use overcast_cloud::routes::{Route, RouteTarget, Routes};
use overcast_cloud::{AddressType, CloudError, Result};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use crate::client::{json_at, OpenStack, Service};
use crate::volumes::encode;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
struct RouterRoute {
    destination: String,
    nexthop: String,
}

#[derive(Debug, Deserialize)]
struct Router {
    #[serde(default)]
    routes: Vec<RouterRoute>,
    #[serde(default)]
    revision_number: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Port {
    id: String,
    #[serde(default)]
    device_owner: String,
    #[serde(default)]
    port_security_enabled: Option<bool>,
    #[serde(default)]
    allowed_address_pairs: Vec<Value>,
    #[serde(default)]
    fixed_ips: Vec<Value>,
    #[serde(default)]
    revision_number: Option<u64>,
}

/// What the cloud's Neutron offers (read once).
#[derive(Debug, Clone, Copy)]
struct Extensions {
    atomic: bool,
    address_pairs: bool,
}

pub struct NeutronRoutes {
    os: Arc<OpenStack>,
    router: String,
    extensions: OnceCell<Extensions>,
    /// Tests: write the whole list with a revision check even where `extraroute-atomic`
    /// exists.
    pub force_revision_writes: bool,
    /// Tests: run between reading a port and writing its address pairs (another writer
    /// changing the port there).
    pub between_port_read_and_write: Option<PortHook>,
}

/// What a test runs between a port's read and its write (the port's id).
pub type PortHook = Arc<
    dyn Fn(String) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
>;

impl NeutronRoutes {
    pub fn new(os: Arc<OpenStack>, router: String) -> Self {
        Self {
            os,
            router,
            extensions: OnceCell::new(),
            force_revision_writes: false,
            between_port_read_and_write: None,
        }
    }

    async fn extensions(&self) -> Result<Extensions> {
        self.extensions
            .get_or_try_init(|| async {
                let resp = self
                    .os
                    .expect(
                        Service::Network,
                        "extension_list",
                        Method::GET,
                        "/v2.0/extensions",
                        None,
                        &[200],
                    )
                    .await?;
                #[derive(Deserialize)]
                struct Ext {
                    alias: String,
                }
                let all: Vec<Ext> = json_at("extension_list", &resp, "extensions")?;
                let has = |a: &str| all.iter().any(|e| e.alias == a);
                if !has("extraroute") && !has("extraroute-atomic") {
                    return Err(CloudError::FailedPrecondition(
                        "openstack: Neutron has no extraroute extension: routes cannot be made"
                            .into(),
                    ));
                }
                Ok(Extensions {
                    atomic: has("extraroute-atomic"),
                    address_pairs: has("allowed-address-pairs"),
                })
            })
            .await
            .copied()
    }

    async fn router(&self) -> Result<Router> {
        let resp = self
            .os
            .expect(
                Service::Network,
                "router_get",
                Method::GET,
                &format!("/v2.0/routers/{}", encode(&self.router)),
                None,
                &[200],
            )
            .await?;
        json_at("router_get", &resp, "router")
    }

    /// Adds or removes one route: alone with `extraroute-atomic`, else by writing the
    /// whole list back at the revision it was read at.
    async fn change(&self, route: RouterRoute, add: bool) -> Result<()> {
        let ext = self.extensions().await?;
        let entry = json!({"destination": route.destination, "nexthop": route.nexthop});
        if ext.atomic && !self.force_revision_writes {
            let (name, action) = if add {
                ("router_add_extraroutes", "add_extraroutes")
            } else {
                ("router_remove_extraroutes", "remove_extraroutes")
            };
            self.os
                .expect(
                    Service::Network,
                    name,
                    Method::PUT,
                    &format!("/v2.0/routers/{}/{action}", encode(&self.router)),
                    Some(&json!({"router": {"routes": [entry]}})),
                    &[200],
                )
                .await?;
            return Ok(());
        }
        let router = self.router().await?;
        let present = router.routes.contains(&route);
        if present == add {
            return Ok(());
        }
        let mut routes: Vec<Value> = router
            .routes
            .iter()
            .filter(|r| **r != route)
            .map(|r| json!({"destination": r.destination, "nexthop": r.nexthop}))
            .collect();
        if add {
            routes.push(entry);
        }
        self.os
            .expect_at_revision(
                Service::Network,
                "router_update",
                &format!("/v2.0/routers/{}", encode(&self.router)),
                &json!({"router": {"routes": routes}}),
                router.revision_number,
            )
            .await
    }

    /// The node's port holding `address` on a server (OCCM looks on the router's
    /// networks; a compute port with that address is the same port).
    async fn port_of(&self, address: &str) -> Result<Option<Port>> {
        let filter = encode(&format!("ip_address={address}"));
        let mut ports = self.server_ports(&format!("fixed_ips={filter}")).await?;
        Ok(if ports.len() == 1 { ports.pop() } else { None })
    }

    /// The server (compute) ports a port listing with `query` answers.
    async fn server_ports(&self, query: &str) -> Result<Vec<Port>> {
        let resp = self
            .os
            .expect(
                Service::Network,
                "port_list",
                Method::GET,
                &format!("/v2.0/ports?{query}"),
                None,
                &[200],
            )
            .await?;
        let mut ports: Vec<Port> = json_at("port_list", &resp, "ports")?;
        ports.retain(|p| p.device_owner.starts_with("compute:"));
        Ok(ports)
    }

    /// Adds or removes `cidr` in the allowed address pairs of the port holding `address`.
    async fn pair(&self, address: &str, cidr: &str, add: bool) -> Result<()> {
        if !self.extensions().await?.address_pairs {
            return Ok(());
        }
        let Some(port) = self.port_of(address).await? else {
            tracing::warn!(%address, "no single server port holds the next hop: no allowed address pair");
            return Ok(());
        };
        if port.port_security_enabled == Some(false) {
            return Ok(());
        }
        let present = port
            .allowed_address_pairs
            .iter()
            .any(|p| p["ip_address"] == cidr);
        if present == add {
            return Ok(());
        }
        let mut pairs: Vec<Value> = port
            .allowed_address_pairs
            .into_iter()
            .filter(|p| p["ip_address"] != cidr)
            .collect();
        if add {
            pairs.push(json!({"ip_address": cidr}));
        }
        if let Some(hook) = &self.between_port_read_and_write {
            hook(port.id.clone()).await;
        }
        self.os
            .expect_at_revision(
                Service::Network,
                "port_update",
                &format!("/v2.0/ports/{}", encode(&port.id)),
                &json!({"port": {"allowed_address_pairs": pairs}}),
                port.revision_number,
            )
            .await
    }
}

/// Whether the one server port holding the route's next hop lets its CIDR through:
/// port security off, or the CIDR among its allowed address pairs. No single such port
/// (the hop is not a server's, or several claim it) leaves nothing a pair could fix: the
/// route counts as complete, as `pair` then adds none.
fn lets_through(ports: &[Port], route: &RouterRoute) -> bool {
    let holding: Vec<&Port> = ports
        .iter()
        .filter(|p| {
            p.fixed_ips
                .iter()
                .any(|ip| ip["ip_address"] == route.nexthop.as_str())
        })
        .collect();
    match holding.as_slice() {
        [port] => {
            port.port_security_enabled == Some(false)
                || port
                    .allowed_address_pairs
                    .iter()
                    .any(|p| p["ip_address"] == route.destination.as_str())
        }
        _ => true,
    }
}

/// The node's InternalIP of the CIDR's family.
fn next_hop(target: &RouteTarget, cidr: &str) -> Option<String> {
    let v6 = cidr.contains(':');
    target
        .addresses
        .iter()
        .filter(|a| a.kind == AddressType::InternalIP)
        .map(|a| a.address.clone())
        .find(|a| {
            a.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_ipv6() == v6)
        })
}

#[async_trait]
impl Routes for NeutronRoutes {
    /// The router's routes, each complete only when its next hop's port lets the CIDR
    /// through (one port listing for all of them).
    async fn list_routes(&self, nodes: &[RouteTarget]) -> Result<Vec<Route>> {
        let router = self.router().await?;
        let ports = if self.extensions().await?.address_pairs && !router.routes.is_empty() {
            Some(
                // Every server port, once, with only the fields a route's pair needs.
                self.server_ports(
                    "fields=id&fields=device_owner&fields=fixed_ips&fields=allowed_address_pairs\
                     &fields=port_security_enabled&fields=revision_number",
                )
                .await?,
            )
        } else {
            None
        };
        Ok(router
            .routes
            .into_iter()
            .map(|r| {
                let node = nodes
                    .iter()
                    .find(|n| n.addresses.iter().any(|a| a.address == r.nexthop))
                    .map(|n| n.node.clone());
                let complete =
                    node.is_none() || ports.as_ref().is_none_or(|ports| lets_through(ports, &r));
                Route {
                    node,
                    destination_cidr: r.destination,
                    next_hop: r.nexthop,
                    complete,
                }
            })
            .collect())
    }

    async fn create_route(&self, target: &RouteTarget, cidr: &str) -> Result<()> {
        let hop = next_hop(target, cidr).ok_or_else(|| {
            CloudError::FailedPrecondition(format!(
                "node {} has no InternalIP of the family of {cidr} to route it to",
                target.node
            ))
        })?;
        let route = RouterRoute {
            destination: cidr.to_owned(),
            nexthop: hop.clone(),
        };
        self.change(route.clone(), true).await?;
        // As OCCM's CreateRoute: a route whose port pair could not be added is taken out
        // again, so the next pass makes both (a route without its pair routes traffic
        // that port security then drops).
        if let Err(e) = self.pair(&hop, cidr, true).await {
            if let Err(undo) = self.change(route, false).await {
                tracing::warn!(%cidr, next_hop = %hop, error = %undo, "could not take out a route whose port pair failed; the next pass sees it incomplete and repairs it");
            }
            return Err(e);
        }
        Ok(())
    }

    async fn delete_route(&self, route: &Route) -> Result<()> {
        self.change(
            RouterRoute {
                destination: route.destination_cidr.clone(),
                nexthop: route.next_hop.clone(),
            },
            false,
        )
        .await?;
        // A blackhole's next hop is no node's any more; its port (if any) is another's.
        if route.node.is_some() {
            self.pair(&route.next_hop, &route.destination_cidr, false)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overcast_cloud::NodeAddress;

    #[test]
    fn the_next_hop_is_the_internal_ip_of_the_cidr_s_family() {
        let t = RouteTarget {
            node: "n1".into(),
            provider_id: None,
            addresses: vec![
                NodeAddress {
                    kind: AddressType::ExternalIP,
                    address: "172.24.4.9".into(),
                },
                NodeAddress {
                    kind: AddressType::InternalIP,
                    address: "fd00::5".into(),
                },
                NodeAddress {
                    kind: AddressType::InternalIP,
                    address: "10.0.0.5".into(),
                },
            ],
        };
        assert_eq!(next_hop(&t, "10.244.1.0/24").as_deref(), Some("10.0.0.5"));
        assert_eq!(next_hop(&t, "fd10:1::/64").as_deref(), Some("fd00::5"));
        let none = RouteTarget {
            addresses: vec![],
            ..t
        };
        assert_eq!(next_hop(&none, "10.244.1.0/24"), None);
    }
}
