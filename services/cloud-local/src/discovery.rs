//! Discovery for the local cloud: its zone and region, its storage (the state
//! directory's filesystem), this host's instance type, health checks of what the cloud
//! needs, and the disks the CSI controller made (from the inventory it keeps).

use std::path::PathBuf;

use async_trait::async_trait;
use serde_json::json;

use super::instances::{host_instance_type, LocalInstances};
use super::loopdev;
use super::store::{InventoryDisk, INVENTORY};
use overcast_cloud::discovery::{CloudCondition, ClusterDisk, Discovery, InstanceType};
use overcast_cloud::{CloudError, Instances, Result, Zone};

pub struct LocalDiscovery {
    state_dir: PathBuf,
    zone: Zone,
    instances: LocalInstances,
}

impl LocalDiscovery {
    pub fn new(state_dir: PathBuf, zone: Zone, instances: LocalInstances) -> Self {
        Self {
            state_dir,
            zone,
            instances,
        }
    }
}

/// `local.<cpus>c<GiB>g` back into its numbers.
fn parse_type(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix("local.")?;
    let (cpu, mem) = rest.split_once('c')?;
    Some((cpu.parse().ok()?, mem.strip_suffix('g')?.parse().ok()?))
}

fn fs_bytes(path: &std::path::Path) -> Result<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(path)
        .map_err(|e| CloudError::Unavailable(format!("statvfs {}: {e}", path.display())))?;
    let f = st.fragment_size() as u64;
    Ok((st.blocks() as u64 * f, st.blocks_available() as u64 * f))
}

#[async_trait]
impl Discovery for LocalDiscovery {
    async fn discovery_data(&self) -> Result<serde_json::Value> {
        // Only stable facts: the document is rewritten whenever it changes.
        let (capacity, _) = fs_bytes(&self.state_dir)?;
        Ok(json!({
            "apiVersion": "deckhouse.io/v1",
            "kind": "LocalCloudProviderDiscoveryData",
            "zones": [self.zone.zone],
            "region": self.zone.region,
            "storage": {
                "stateDirectory": self.state_dir.display().to_string(),
                "capacityBytes": capacity,
            },
            "instanceType": host_instance_type(),
        }))
    }

    async fn instance_types(&self) -> Result<Vec<InstanceType>> {
        let root_gib = fs_bytes(std::path::Path::new("/"))?.0 >> 30;
        let mut types: Vec<InstanceType> = self
            .instances
            .list_instances()
            .await?
            .into_iter()
            .filter_map(|i| {
                let (cpu, gib) = parse_type(&i.instance_type)?;
                Some(InstanceType {
                    name: i.instance_type,
                    cpu,
                    memory_mib: gib * 1024,
                    root_disk_gib: root_gib,
                })
            })
            .collect();
        types.sort_by(|a, b| a.name.cmp(&b.name));
        types.dedup_by(|a, b| a.name == b.name);
        Ok(types)
    }

    async fn conditions(&self) -> Result<Vec<CloudCondition>> {
        let dir = match std::fs::metadata(self.state_dir.join("disks")) {
            Ok(m) if m.is_dir() => CloudCondition {
                name: "state-directory".into(),
                message: "present".into(),
                ok: true,
            },
            Ok(_) => CloudCondition {
                name: "state-directory".into(),
                message: "disks is not a directory".into(),
                ok: false,
            },
            Err(e) => CloudCondition {
                name: "state-directory".into(),
                message: format!("{}: {e}", self.state_dir.display()),
                ok: false,
            },
        };
        let loops = match loopdev::available() {
            Ok(()) => CloudCondition {
                name: "loop-devices".into(),
                message: "/dev/loop-control answers".into(),
                ok: true,
            },
            Err(e) => CloudCondition {
                name: "loop-devices".into(),
                message: format!("/dev/loop-control: {e}"),
                ok: false,
            },
        };
        let instances = match self.instances.list_instances().await {
            Ok(list) => CloudCondition {
                name: "instances".into(),
                message: format!("{} instances", list.len()),
                ok: true,
            },
            Err(e) => CloudCondition {
                name: "instances".into(),
                message: e.to_string(),
                ok: false,
            },
        };
        Ok(vec![dir, loops, instances])
    }

    async fn cluster_disks(&self) -> Result<Vec<ClusterDisk>> {
        let path = self.state_dir.join(INVENTORY);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            // No controller has run here yet: no disks.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(CloudError::Unavailable(format!("{}: {e}", path.display()))),
        };
        let disks: Vec<InventoryDisk> = serde_json::from_slice(&bytes)
            .map_err(|e| CloudError::Unavailable(format!("{}: {e}", path.display())))?;
        Ok(disks
            .into_iter()
            .map(|d| ClusterDisk {
                id: d.id,
                name: d.name,
                metadata: d.metadata,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_type_names_parse_back() {
        assert_eq!(parse_type("local.2c24g"), Some((2, 24)));
        assert_eq!(parse_type("m.large"), None);
    }
}
