//! The Neutron calls a load balancer needs: its floating IP (found by the VIP port, by
//! address; made, moved, deleted), the external network to take one from when none is
//! configured, and the subnet of a node's address when no subnet is configured.

use http::Method;
use overcast_cloud::{CloudError, Result};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::client::{json_at, OpenStack, Service};
use crate::volumes::encode;

#[derive(Debug, Clone, Deserialize)]
pub struct FloatingIp {
    pub id: String,
    pub floating_ip_address: String,
    #[serde(default)]
    pub port_id: Option<String>,
    #[serde(default)]
    pub description: String,
}

async fn list<T: serde::de::DeserializeOwned>(
    os: &OpenStack,
    name: &'static str,
    path: &str,
    key: &str,
) -> Result<Vec<T>> {
    let resp = os
        .expect(Service::Network, name, Method::GET, path, None, &[200])
        .await?;
    json_at(name, &resp, key)
}

pub async fn floating_ip_of_port(os: &OpenStack, port: &str) -> Result<Option<FloatingIp>> {
    Ok(list::<FloatingIp>(
        os,
        "floating_ip_list",
        &format!("/v2.0/floatingips?port_id={}", encode(port)),
        "floatingips",
    )
    .await?
    .into_iter()
    .next())
}

pub async fn floating_ip_by_address(os: &OpenStack, address: &str) -> Result<Option<FloatingIp>> {
    Ok(list::<FloatingIp>(
        os,
        "floating_ip_list",
        &format!("/v2.0/floatingips?floating_ip_address={}", encode(address)),
        "floatingips",
    )
    .await?
    .into_iter()
    .next())
}

pub async fn create_floating_ip(os: &OpenStack, body: Value) -> Result<FloatingIp> {
    let resp = os
        .expect(
            Service::Network,
            "floating_ip_create",
            Method::POST,
            "/v2.0/floatingips",
            Some(&json!({ "floatingip": body })),
            &[201],
        )
        .await?;
    json_at("floating_ip_create", &resp, "floatingip")
}

/// Points a floating IP at a port, or at none.
pub async fn move_floating_ip(os: &OpenStack, id: &str, port: Option<&str>) -> Result<FloatingIp> {
    let resp = os
        .expect(
            Service::Network,
            "floating_ip_update",
            Method::PUT,
            &format!("/v2.0/floatingips/{}", encode(id)),
            Some(&json!({"floatingip": {"port_id": port}})),
            &[200],
        )
        .await?;
    json_at("floating_ip_update", &resp, "floatingip")
}

pub async fn delete_floating_ip(os: &OpenStack, id: &str) -> Result<()> {
    os.expect(
        Service::Network,
        "floating_ip_delete",
        Method::DELETE,
        &format!("/v2.0/floatingips/{}", encode(id)),
        None,
        &[204, 404],
    )
    .await
    .map(|_| ())
}

/// The first external network with an IPv4 subnet (OCCM's `GetFloatingNetworkID`).
pub async fn external_network(os: &OpenStack) -> Result<Option<String>> {
    #[derive(Deserialize)]
    struct Network {
        id: String,
        #[serde(default)]
        subnets: Vec<String>,
    }
    #[derive(Deserialize)]
    struct Subnet {
        id: String,
        ip_version: u8,
    }
    let networks: Vec<Network> = list(
        os,
        "network_list",
        "/v2.0/networks?router%3Aexternal=true",
        "networks",
    )
    .await?;
    for n in networks.iter().filter(|n| !n.subnets.is_empty()) {
        let subnets: Vec<Subnet> = list(
            os,
            "subnet_list",
            &format!("/v2.0/subnets?network_id={}", encode(&n.id)),
            "subnets",
        )
        .await?;
        // A subnet we cannot see (another project's) counts, as in OCCM.
        if n.subnets.iter().any(|id| {
            subnets
                .iter()
                .find(|s| &s.id == id)
                .is_none_or(|s| s.ip_version == 4)
        }) {
            return Ok(Some(n.id.clone()));
        }
    }
    Ok(None)
}

/// The subnet of a server port holding `address` (OCCM reads it from the first node's
/// server; the address alone finds the same port in one call). Several candidate ports
/// (the same address in two networks) is an error asking for `subnet-id`.
pub async fn subnet_of_address(os: &OpenStack, address: &str) -> Result<String> {
    #[derive(Deserialize)]
    struct Port {
        #[serde(default)]
        device_owner: String,
        #[serde(default)]
        fixed_ips: Vec<FixedIp>,
    }
    #[derive(Deserialize)]
    struct FixedIp {
        subnet_id: String,
        ip_address: String,
    }
    let filter = encode(&format!("ip_address={address}"));
    let ports: Vec<Port> = list(
        os,
        "port_list",
        &format!("/v2.0/ports?fixed_ips={filter}"),
        "ports",
    )
    .await?;
    let subnets: Vec<String> = ports
        .iter()
        .filter(|p| p.device_owner.starts_with("compute:"))
        .flat_map(|p| &p.fixed_ips)
        .filter(|ip| ip.ip_address == address)
        .map(|ip| ip.subnet_id.clone())
        .collect();
    match subnets.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CloudError::FailedPrecondition(format!(
            "openstack: no server port holds the node address {address}; \
             set [LoadBalancer] subnet-id or the loadbalancer.openstack.org/subnet-id annotation"
        ))),
        _ => Err(CloudError::FailedPrecondition(format!(
            "openstack: several server ports hold the node address {address}; \
             set [LoadBalancer] subnet-id or the loadbalancer.openstack.org/subnet-id annotation"
        ))),
    }
}
