//! The routes capability: each node's pod CIDR routed to that node by the cloud's router,
//! for pod networks without an overlay (the upstream route controller's `Routes`).

use async_trait::async_trait;

use crate::{NodeAddress, Result};

/// A node routes may point at: its name, its providerID, its addresses as its Node says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTarget {
    pub node: String,
    pub provider_id: Option<String>,
    pub addresses: Vec<NodeAddress>,
}

/// A route the cloud has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The node the next hop belongs to; `None` when no node has that address (a
    /// blackhole: its node is gone).
    pub node: Option<String>,
    pub destination_cidr: String,
    /// The cloud's next hop as it holds it, so exactly this route is deleted.
    pub next_hop: String,
    /// Whether what else the route needs to carry traffic is in place (OpenStack: the
    /// next hop's port lets the CIDR through its port security). An incomplete route is
    /// made again — creating is idempotent — and its node's network is not called
    /// available until it is.
    pub complete: bool,
}

#[async_trait]
pub trait Routes: Send + Sync + 'static {
    /// The routes the cloud holds, their next hops matched to `nodes`.
    async fn list_routes(&self, nodes: &[RouteTarget]) -> Result<Vec<Route>>;
    /// Routes `destination_cidr` to `target`; one already there is made.
    async fn create_route(&self, target: &RouteTarget, destination_cidr: &str) -> Result<()>;
    /// Deletes `route`; one already gone is deleted.
    async fn delete_route(&self, route: &Route) -> Result<()>;
}
