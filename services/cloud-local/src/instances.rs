//! Instances of the local cloud: this host — providerID `local://<node>`, its interface
//! addresses, an instance type from its CPUs and memory — plus, optionally, machines
//! listed in an instances file, so one host can stand in for a cluster (tests, demos).
//! The file is read on every listing: editing it is how a machine "vanishes" or "shuts
//! down". A file that cannot be read is an error — "unknown", never "gone".

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::Deserialize;

use overcast_cloud::instances::{AddressType, Instance, InstanceState, Instances, NodeAddress};
use overcast_cloud::{CloudError, Result, Zone};

pub const PROVIDER: &str = "local";

#[derive(Debug, Clone)]
pub struct LocalInstances {
    node_name: String,
    zone: Zone,
    file: Option<PathBuf>,
}

/// One machine in the instances file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileInstance {
    name: String,
    #[serde(default)]
    addresses: Vec<NodeAddress>,
    #[serde(default = "running")]
    state: InstanceState,
    instance_type: Option<String>,
    zone: Option<String>,
    region: Option<String>,
}

/// The machines of the instances file. A missing file is no answer either: a mistyped
/// path, a config mount that is not there yet, a file replaced by delete-then-write.
/// "Gone" must come from an inventory that was read, never from one that was not.
fn read_file(path: &Path) -> Result<Vec<FileInstance>> {
    let bytes = std::fs::read(path)
        .map_err(|e| CloudError::Unavailable(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| CloudError::Unavailable(format!("{}: {e}", path.display())))
}

/// The names of the machines the instances file lists.
pub fn machine_names(path: &Path) -> Result<Vec<String>> {
    Ok(read_file(path)?.into_iter().map(|i| i.name).collect())
}

/// The keys of one machine in the instances file.
pub(crate) fn file_instance_keys() -> &'static [&'static str] {
    overcast_cloud::config::serde_fields::<FileInstance>()
}

fn running() -> InstanceState {
    InstanceState::Running
}

pub fn provider_id(node: &str) -> String {
    format!("{PROVIDER}://{node}")
}

impl LocalInstances {
    pub fn new(node_name: String, zone: Zone, file: Option<PathBuf>) -> Self {
        Self {
            node_name,
            zone,
            file,
        }
    }

    fn this_host(&self) -> Instance {
        Instance {
            node_name: self.node_name.clone(),
            provider_id: provider_id(&self.node_name),
            instance_type: host_instance_type(),
            addresses: host_addresses(&self.node_name),
            zone: Some(self.zone.clone()),
            state: InstanceState::Running,
        }
    }

    fn listed_in_file(&self) -> Result<Vec<Instance>> {
        let Some(path) = &self.file else {
            return Ok(vec![]);
        };
        Ok(read_file(path)?
            .into_iter()
            .filter(|i| i.name != self.node_name)
            .map(|i| Instance {
                provider_id: provider_id(&i.name),
                instance_type: i.instance_type.unwrap_or_else(host_instance_type),
                zone: Some(Zone {
                    zone: i.zone.unwrap_or_else(|| self.zone.zone.clone()),
                    region: i.region.unwrap_or_else(|| self.zone.region.clone()),
                }),
                // Like this host's, every machine's node name is its Hostname address.
                addresses: {
                    let mut a = i.addresses;
                    if !a.iter().any(|x| x.kind == AddressType::Hostname) {
                        a.push(NodeAddress {
                            kind: AddressType::Hostname,
                            address: i.name.clone(),
                        });
                    }
                    a
                },
                node_name: i.name,
                state: i.state,
            })
            .collect())
    }
}

#[async_trait]
impl Instances for LocalInstances {
    fn provider_name(&self) -> &'static str {
        PROVIDER
    }

    async fn list_instances(&self) -> Result<Vec<Instance>> {
        let mut all = vec![self.this_host()];
        all.extend(self.listed_in_file()?);
        Ok(all)
    }
}

/// `local.<cpus>c<GiB>g`, e.g. `local.2c24g`.
pub fn host_instance_type() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    let gib = (kib as f64 / (1024.0 * 1024.0)).round() as u64;
    format!("local.{cpus}c{gib}g")
}

/// The host's usable addresses as InternalIP (loopback and link-local left out, unless
/// nothing else exists), and the node name as Hostname.
pub fn host_addresses(node_name: &str) -> Vec<NodeAddress> {
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for ifa in addrs {
            let Some(addr) = ifa.address else { continue };
            let ip = if let Some(v4) = addr.as_sockaddr_in() {
                IpAddr::V4(v4.ip())
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                IpAddr::V6(v6.ip())
            } else {
                continue;
            };
            let link_local = matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
                || matches!(ip, IpAddr::V4(v4) if v4.is_link_local());
            if !ip.is_loopback() && !link_local && !ips.contains(&ip) {
                ips.push(ip);
            }
        }
    }
    if ips.is_empty() {
        ips.push(IpAddr::from([127, 0, 0, 1]));
    }
    let mut out: Vec<NodeAddress> = ips
        .into_iter()
        .map(|ip| NodeAddress {
            kind: AddressType::InternalIP,
            address: ip.to_string(),
        })
        .collect();
    out.push(NodeAddress {
        kind: AddressType::Hostname,
        address: node_name.to_owned(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone() -> Zone {
        Zone {
            region: "r".into(),
            zone: "z".into(),
        }
    }

    #[tokio::test]
    async fn this_host_and_the_file_machines_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("instances.json");
        let cloud = LocalInstances::new("me".into(), zone(), Some(file.clone()));
        assert!(
            cloud.list_instances().await.is_err(),
            "a missing file is unknown, not an empty cloud"
        );
        let alone = LocalInstances::new("me".into(), zone(), None);
        let only = alone.list_instances().await.unwrap();
        assert_eq!(only.len(), 1, "without a file: this host alone");
        assert_eq!(only[0].provider_id, "local://me");
        assert!(only[0].instance_type.starts_with("local."));
        assert!(only[0]
            .addresses
            .iter()
            .any(|a| a.kind == AddressType::InternalIP));
        assert!(only[0].addresses.contains(&NodeAddress {
            kind: AddressType::Hostname,
            address: "me".into()
        }));

        std::fs::write(
            &file,
            r#"[{"name":"n2","addresses":[{"type":"InternalIP","address":"10.0.0.2"}],"state":"shutdown","zone":"z2"}]"#,
        )
        .unwrap();
        let all = cloud.list_instances().await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].state, InstanceState::Shutdown);
        assert_eq!(all[1].zone.as_ref().unwrap().zone, "z2");
        let index = overcast_cloud::InstanceIndex::new(&cloud, &all);
        assert_eq!(
            index.find("n2", None).unwrap().unwrap().provider_id,
            "local://n2"
        );
        assert_eq!(
            index
                .find("x", Some("local://n2"))
                .unwrap()
                .unwrap()
                .node_name,
            "n2"
        );

        std::fs::write(&file, b"{not json").unwrap();
        assert!(
            cloud.list_instances().await.is_err(),
            "an unreadable file is unknown, not empty"
        );
    }
}
