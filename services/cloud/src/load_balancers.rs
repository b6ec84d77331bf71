//! The load-balancer capability: a Service of type LoadBalancer becomes an address that
//! forwards each of its ports to the NodePorts of the backend nodes.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: u16,
}

/// A node traffic may be sent to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Backend {
    pub node: String,
    pub address: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerSpec {
    /// Unique and stable for the Service (derived from its uid).
    pub name: String,
    /// `namespace/name`, for people reading the cloud.
    pub service: String,
    pub ports: Vec<LbPort>,
    pub backends: Vec<Backend>,
    /// `spec.loadBalancerIP`, when the user asked for one.
    pub requested_ip: Option<String>,
    /// `externalTrafficPolicy: Local`: the client's address is kept, and `backends` holds
    /// only the nodes with a ready endpoint of the Service (the ccm follows its
    /// EndpointSlices), so no cloud has to health-check nodes itself.
    pub local_traffic: bool,
    /// The Service's annotations, for clouds that read theirs from it (address pools, …).
    pub annotations: BTreeMap<String, String>,
    /// `spec.loadBalancerClass`, when set.
    pub class: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadBalancerStatus {
    pub ingress_ips: Vec<String>,
    pub ingress_hostnames: Vec<String>,
}

#[async_trait]
pub trait LoadBalancers: Send + Sync + 'static {
    async fn get_load_balancer(&self, name: &str) -> Result<Option<LoadBalancerStatus>>;
    /// Creates or updates the balancer to match `spec`.
    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancerStatus>;
    /// Deletes it; a balancer that does not exist is already deleted.
    async fn delete_load_balancer(&self, name: &str) -> Result<()>;
}

/// Routes for pod CIDRs, on clouds that route them (OpenStack routers, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub node: String,
    pub destination_cidr: String,
}

#[async_trait]
pub trait Routes: Send + Sync + 'static {
    async fn list_routes(&self) -> Result<Vec<Route>>;
    async fn create_route(&self, route: &Route) -> Result<()>;
    async fn delete_route(&self, route: &Route) -> Result<()>;
}
