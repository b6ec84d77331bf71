//! The engine's VMs as the ccm's instances, as Deckhouse's zVirt ccm names them:
//! providerID `zvirt://<vm id>`, node name and Hostname = the VM's name, the guest's IPs
//! from its reported devices (private IPv4 InternalIP, other non-local addresses
//! ExternalIP; IPv6 kept: unique-local InternalIP, global ExternalIP), `down` = shut down.
//! Beyond upstream: the instance type (the VM's instance type's name, else
//! `zvirt-vm.cpu-<n>.mem-<GiB>gb`), zone = its oVirt cluster, region = its data center.
//!
//! A sync reads the cluster's nodes' VMs alone, searched by id and name with their
//! reported devices inline (`follow`), however many VMs the engine holds (one search per
//! 40 nodes), then the clusters, the data centers, and the instance types only when a VM
//! has one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use http::Method;
use overcast_cloud::{
    AddressType, CloudError, Instance, InstanceKey, InstanceState, Instances, NodeAddress, NodeRef,
    Result, Zone,
};
use serde_json::Value;

use crate::client::{is_id, members, number, Engine};

pub const PROVIDER: &str = "zvirt";

pub struct EngineInstances {
    engine: Arc<Engine>,
}

impl EngineInstances {
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }

    /// The instances of `vms` (as the engine answers them, reported devices inline):
    /// with their zones (the clusters and data centers, listed) and instance types.
    async fn described(&self, vms: Vec<Value>) -> Result<Vec<Instance>> {
        if vms.is_empty() {
            return Ok(Vec::new());
        }
        let clusters = self.names("cluster_list", "/clusters", "cluster").await?;
        let data_centers = self
            .names("datacenter_list", "/datacenters", "data_center")
            .await?;
        let typed = vms.iter().any(|vm| vm["instance_type"]["id"].is_string());
        let types = match typed {
            true => {
                self.names("instancetype_list", "/instancetypes", "instance_type")
                    .await?
            }
            false => BTreeMap::new(),
        };
        Ok(vms
            .iter()
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
        self.described(members(&vms, "vm").cloned().collect()).await
    }

    /// The nodes' VMs alone, however many the engine holds: searched by id (a node with a
    /// providerID) and by name (one without), [`TERMS_PER_SEARCH`] terms a call. The
    /// engine answers a search its backend refuses with an empty collection, so a search
    /// that answers nothing is not believed on its word: each id it asked is read alone
    /// (404: gone), and names fall back to the whole listing.
    async fn instances_of(&self, nodes: &[NodeRef<'_>]) -> Result<Vec<Instance>> {
        let mut ids = BTreeSet::new();
        let mut names = BTreeSet::new();
        for node in nodes {
            match node.provider_id {
                // A providerID this provider cannot read is no question to the engine:
                // the sync leaves that node alone.
                Some(p) => {
                    if let Some(key) = self
                        .instance_keys(p)
                        .ok()
                        .and_then(|k| k.into_iter().next())
                    {
                        if is_id(&key.0) {
                            ids.insert(key.0);
                        }
                    }
                }
                None if searchable(node.name) => {
                    names.insert(node.name.to_owned());
                }
                // A name the search language cannot hold (Kubernetes allows none such):
                // the whole listing answers for it.
                None => return self.list_instances().await,
            }
        }
        let terms: Vec<(bool, String)> = ids
            .into_iter()
            .map(|id| (true, id))
            .chain(names.into_iter().map(|n| (false, n)))
            .collect();
        let mut found: BTreeMap<String, Value> = BTreeMap::new();
        for chunk in terms.chunks(TERMS_PER_SEARCH) {
            let search = chunk
                .iter()
                .map(|(id, v)| match id {
                    true => format!("id={v}"),
                    false => format!("name=\"{v}\""),
                })
                .collect::<Vec<_>>()
                .join(" or ");
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("search", &search)
                .append_pair("follow", "reported_devices")
                .finish();
            let doc = self
                .engine
                .json("vm_search", Method::GET, &format!("/vms?{query}"), None)
                .await?;
            let before = found.len();
            found.extend(
                members(&doc, "vm")
                    .filter_map(|vm| Some((vm["id"].as_str()?.to_owned(), vm.clone()))),
            );
            if found.len() > before {
                continue;
            }
            // Nothing at all: absent, or a search the engine refused. Each id is read.
            for (_, id) in chunk.iter().filter(|(is_id, _)| *is_id) {
                let path = format!("/vms/{id}?follow=reported_devices");
                match self.engine.json("vm_get", Method::GET, &path, None).await {
                    Ok(_) => {
                        tracing::warn!(vm = %id, "the engine's VM search did not answer a VM it holds: listing every VM this sync");
                        return self.list_instances().await;
                    }
                    Err(CloudError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            if chunk.iter().any(|(is_id, _)| !is_id) {
                return self.list_instances().await;
            }
        }
        self.described(found.into_values().collect()).await
    }
}

/// Terms in one VM search: each is under 50 characters, and the engine's Apache takes a
/// request line of 8,190 bytes at most.
const TERMS_PER_SEARCH: usize = 40;

/// Whether the engine's search can hold `name` as a quoted value: the backend refuses
/// `'` and `;` anywhere, a quote ends the value, a trailing `\` escapes it, and `*` is a
/// wildcard.
fn searchable(name: &str) -> bool {
    !name.is_empty() && !name.contains(['\'', ';', '"', '*']) && !name.ends_with('\\')
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
