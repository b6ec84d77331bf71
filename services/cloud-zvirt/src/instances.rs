//! The engine's VMs as the ccm's instances, as Deckhouse's zVirt ccm names them:
//! providerID `zvirt://<vm id>`, node name and Hostname = the VM's name, the guest's IPs
//! from its reported devices (private IPv4 InternalIP, other non-local addresses
//! ExternalIP; IPv6 kept: unique-local InternalIP, global ExternalIP), `down` = shut down.
//! Beyond upstream: the instance type (the VM's instance type's name, else
//! `zvirt-vm.cpu-<n>.mem-<GiB>gb`), zone = its oVirt cluster, region = its data center.
//!
//! One sync is a fixed number of calls whatever the number of VMs: the VMs with their
//! reported devices inline (`follow`), the clusters, the data centers, and the instance
//! types only when a VM has one.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use http::Method;
use overcast_cloud::{
    AddressType, Instance, InstanceKey, InstanceState, Instances, NodeAddress, Result, Zone,
};
use serde_json::Value;

use crate::client::{members, number, Engine};

pub const PROVIDER: &str = "zvirt";

pub struct EngineInstances {
    engine: Arc<Engine>,
}

impl EngineInstances {
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }

    /// id → name of a collection.
    async fn names(
        &self,
        name: &'static str,
        path: &str,
        key: &str,
    ) -> Result<BTreeMap<String, Value>> {
        let doc = self.engine.json(name, Method::GET, path, None).await?;
        Ok(members(&doc, key)
            .filter_map(|m| Some((m["id"].as_str()?.to_owned(), m.clone())))
            .collect())
    }
}

/// The guest's addresses, typed as upstream types them (IPv6 kept).
pub fn addresses(vm: &Value) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    if let Some(name) = vm["name"].as_str() {
        out.push(NodeAddress {
            kind: AddressType::Hostname,
            address: name.to_owned(),
        });
    }
    let ips = members(&vm["reported_devices"], "reported_device")
        .flat_map(|dev| members(&dev["ips"], "ip"))
        .filter_map(|ip| ip["address"].as_str()?.parse::<IpAddr>().ok());
    for ip in ips {
        let kind = match ip {
            IpAddr::V4(v4) if v4.is_loopback() || v4.is_link_local() || v4.is_unspecified() => {
                continue
            }
            IpAddr::V6(v6)
                if v6.is_loopback() || v6.is_unspecified() || v6.is_unicast_link_local() =>
            {
                continue
            }
            IpAddr::V4(v4) if v4.is_private() => AddressType::InternalIP,
            IpAddr::V6(v6) if v6.is_unique_local() => AddressType::InternalIP,
            _ => AddressType::ExternalIP,
        };
        let address = NodeAddress {
            kind,
            address: ip.to_string(),
        };
        if !out.contains(&address) {
            out.push(address);
        }
    }
    out
}

/// `zvirt-vm.cpu-<n>.mem-<GiB>gb` from the VM's topology and memory.
pub fn shape(vm: &Value) -> String {
    let topology = &vm["cpu"]["topology"];
    let part = |k: &str| number(&topology[k]).unwrap_or(1).max(1);
    let cpus = part("sockets") * part("cores") * part("threads");
    let gib = number(&vm["memory"]).unwrap_or(0).div_ceil(1 << 30);
    format!("zvirt-vm.cpu-{cpus}.mem-{gib}gb")
}

#[async_trait]
impl Instances for EngineInstances {
    fn provider_name(&self) -> &'static str {
        PROVIDER
    }

    /// `zvirt://<vm id>`, as Deckhouse's zVirt ccm writes and reads it; the id is a UUID,
    /// the same in any case.
    fn instance_keys(&self, provider_id: &str) -> Result<Vec<InstanceKey>> {
        let mut keys = overcast_cloud::instances::plain_keys(PROVIDER, provider_id)?;
        keys[0].0.make_ascii_lowercase();
        Ok(keys)
    }

    async fn list_instances(&self) -> Result<Vec<Instance>> {
        let vms = self
            .engine
            .json("vm_list", Method::GET, "/vms?follow=reported_devices", None)
            .await?;
        let clusters = self.names("cluster_list", "/clusters", "cluster").await?;
        let data_centers = self
            .names("datacenter_list", "/datacenters", "data_center")
            .await?;
        let typed = members(&vms, "vm").any(|vm| vm["instance_type"]["id"].is_string());
        let types = match typed {
            true => {
                self.names("instancetype_list", "/instancetypes", "instance_type")
                    .await?
            }
            false => BTreeMap::new(),
        };
        Ok(members(&vms, "vm")
            .filter_map(|vm| {
                let id = vm["id"].as_str()?;
                let name = vm["name"].as_str()?;
                let cluster = vm["cluster"]["id"].as_str().and_then(|c| clusters.get(c));
                let zone = cluster.and_then(|c| {
                    let dc = c["data_center"]["id"]
                        .as_str()
                        .and_then(|d| data_centers.get(d));
                    Some(Zone {
                        zone: c["name"].as_str()?.to_owned(),
                        region: dc
                            .and_then(|d| d["name"].as_str())
                            .unwrap_or_default()
                            .to_owned(),
                    })
                });
                let instance_type = vm["instance_type"]["id"]
                    .as_str()
                    .and_then(|t| types.get(t))
                    .and_then(|t| t["name"].as_str())
                    .map(str::to_owned)
                    .unwrap_or_else(|| shape(vm));
                Some(Instance {
                    node_name: name.to_owned(),
                    provider_id: format!("{PROVIDER}://{id}"),
                    instance_type,
                    addresses: addresses(vm),
                    zone,
                    state: match vm["status"].as_str() {
                        Some("down") => InstanceState::Shutdown,
                        _ => InstanceState::Running,
                    },
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn guest_addresses_are_typed_as_upstream_and_ipv6_is_kept() {
        let vm = json!({"name": "worker-0", "reported_devices": {"reported_device": [
            {"name": "eth0", "type": "network", "ips": {"ip": [
                {"address": "10.1.2.3", "version": "v4"},
                {"address": "203.0.113.7", "version": "v4"},
                {"address": "127.0.0.1", "version": "v4"},
                {"address": "169.254.0.9", "version": "v4"},
                {"address": "fe80::1", "version": "v6"},
                {"address": "fd00::5", "version": "v6"},
                {"address": "2001:db8::5", "version": "v6"},
                {"address": "10.1.2.3", "version": "v4"},
                {"address": "not-an-ip"},
            ]}},
        ]}});
        let got: Vec<(AddressType, String)> = addresses(&vm)
            .into_iter()
            .map(|a| (a.kind, a.address))
            .collect();
        assert_eq!(
            got,
            vec![
                (AddressType::Hostname, "worker-0".into()),
                (AddressType::InternalIP, "10.1.2.3".into()),
                (AddressType::ExternalIP, "203.0.113.7".into()),
                (AddressType::InternalIP, "fd00::5".into()),
                (AddressType::ExternalIP, "2001:db8::5".into()),
            ]
        );
        // No devices reported yet (guest agent not up): the hostname alone.
        assert_eq!(addresses(&json!({"name": "w"})).len(), 1);
    }

    #[test]
    fn a_vm_without_an_instance_type_is_named_by_its_shape() {
        let vm = json!({"cpu": {"topology": {"sockets": "2", "cores": "2", "threads": "1"}}, "memory": "8589934592"});
        assert_eq!(shape(&vm), "zvirt-vm.cpu-4.mem-8gb");
        assert_eq!(shape(&json!({})), "zvirt-vm.cpu-1.mem-0gb");
    }
}
