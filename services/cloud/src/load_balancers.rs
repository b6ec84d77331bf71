//! The load-balancer capability: a Service of type LoadBalancer becomes an address that
//! forwards each of its ports to the NodePorts of the backend nodes.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The Service API's spelling (`TCP`, `UDP`, `SCTP`), which is also Octavia's.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
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
    /// The node's labels, for clouds that let a Service pick its nodes by label
    /// (OpenStack's `loadbalancer.openstack.org/node-selector`).
    pub labels: BTreeMap<String, String>,
}

/// Which Service a balancer is for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl std::fmt::Display for ServiceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What names a balancer in the cloud, also when the Service's ports cannot be read
/// (its deletion): the name the ccm gives it, the Service, and the annotations a cloud
/// keeps its own references in (OpenStack's `loadbalancer.openstack.org/load-balancer-id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerRef {
    /// Unique and stable for the Service (derived from its uid).
    pub name: String,
    pub service: ServiceRef,
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadBalancerSpec {
    /// Unique and stable for the Service (derived from its uid).
    pub name: String,
    pub service: ServiceRef,
    pub ports: Vec<LbPort>,
    pub backends: Vec<Backend>,
    /// `spec.loadBalancerIP`, when the user asked for one.
    pub requested_ip: Option<String>,
    /// `spec.loadBalancerIP` as the Service has it (`requested_ip` also carries the address
    /// a restart found); OpenStack reads it as the floating IP to reuse.
    pub load_balancer_ip: Option<String>,
    /// `externalTrafficPolicy: Local`: the client's address is kept, and `backends` holds
    /// only the nodes with a ready endpoint of the Service (the ccm follows its
    /// EndpointSlices), so no cloud has to health-check nodes itself.
    pub local_traffic: bool,
    /// `spec.healthCheckNodePort` (set for `externalTrafficPolicy: Local`).
    pub health_check_node_port: Option<u16>,
    /// `spec.sessionAffinity: ClientIP`.
    pub client_ip_affinity: bool,
    /// `spec.loadBalancerSourceRanges`: who may connect (empty: anyone).
    pub source_ranges: Vec<String>,
    /// The Service's annotations, for clouds that read theirs from it (address pools, …).
    pub annotations: BTreeMap<String, String>,
    /// `spec.loadBalancerClass`, when set.
    pub class: Option<String>,
}

impl LoadBalancerSpec {
    pub fn reference(&self) -> LoadBalancerRef {
        LoadBalancerRef {
            name: self.name.clone(),
            service: self.service.clone(),
            annotations: self.annotations.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadBalancerStatus {
    pub ingress_ips: Vec<String>,
    pub ingress_hostnames: Vec<String>,
    /// `ipMode: Proxy` on the ingress IPs: the balancer speaks the PROXY protocol, so
    /// kube-proxy must not short-cut traffic to the address inside the cluster.
    pub proxy_ip_mode: bool,
    /// Annotations the cloud records on the Service (OCCM's
    /// `loadbalancer.openstack.org/load-balancer-id`, so a renamed cluster still finds
    /// its balancer); the ccm sets them when they differ.
    pub annotations: BTreeMap<String, String>,
}

#[async_trait]
pub trait LoadBalancers: Send + Sync + 'static {
    async fn get_load_balancer(&self, lb: &LoadBalancerRef) -> Result<Option<LoadBalancerStatus>>;
    /// Creates or updates the balancer to match `spec`.
    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancerStatus>;
    /// Deletes it; a balancer that does not exist is already deleted.
    async fn delete_load_balancer(&self, lb: &LoadBalancerRef) -> Result<()>;
}
