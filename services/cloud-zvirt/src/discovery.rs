//! Discovery on the engine, for the Deckhouse contracts: `ZvirtCloudProviderDiscoveryData`
//! (`deckhouse.io/v1`) with the data storage domains (`name`, `type` — the storage's
//! kind, `isEnabled` — the engine reports it `ok`, `isDefault` — the first by name, as
//! Deckhouse's discoverer marks it); the InstanceTypesCatalog from the engine's instance
//! types; this cluster's disks (orphans are those no PV names); conditions: SSO login,
//! the engine's version, the data domains' status.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use http::Method;
use overcast_cloud::discovery::{CloudCondition, ClusterDisk, Discovery, InstanceType};
use overcast_cloud::Result;
use serde_json::{json, Value};

use crate::client::{members, number, Engine};
use crate::disks::{data_domains, EngineDisks};

/// The oldest engine whose API this provider speaks as it does (4.4: `follow`).
const OLDEST: (u64, u64) = (4, 4);

pub struct EngineDiscovery {
    engine: Arc<Engine>,
    disks: EngineDisks,
}

impl EngineDiscovery {
    pub fn new(engine: Arc<Engine>, disks: EngineDisks) -> Self {
        Self { engine, disks }
    }
}

/// Whether the engine reports the domain usable: `external_status` (and, where given,
/// `status`) `ok`/`active`.
fn enabled(sd: &Value) -> bool {
    let external = sd["external_status"].as_str().unwrap_or("ok");
    let status = sd["status"].as_str().unwrap_or("active");
    external == "ok" && status == "active"
}

#[async_trait]
impl Discovery for EngineDiscovery {
    async fn discovery_data(&self) -> Result<Value> {
        let domains = data_domains(&self.engine).await?;
        let list: Vec<Value> = domains
            .iter()
            .enumerate()
            .map(|(i, (name, sd))| {
                json!({
                    "name": name,
                    "type": sd["storage"]["type"].as_str().unwrap_or_default(),
                    "isEnabled": enabled(sd),
                    "isDefault": i == 0,
                })
            })
            .collect();
        Ok(json!({
            "apiVersion": "deckhouse.io/v1",
            "kind": "ZvirtCloudProviderDiscoveryData",
            "storageDomains": list,
        }))
    }

    async fn instance_types(&self) -> Result<Vec<InstanceType>> {
        let doc = self
            .engine
            .json("instancetype_list", Method::GET, "/instancetypes", None)
            .await?;
        let mut out: BTreeMap<String, InstanceType> = BTreeMap::new();
        for t in members(&doc, "instance_type") {
            let Some(name) = t["name"].as_str() else {
                continue;
            };
            let topology = &t["cpu"]["topology"];
            let part = |k: &str| number(&topology[k]).unwrap_or(1).max(1);
            out.insert(
                name.to_owned(),
                InstanceType {
                    name: name.to_owned(),
                    cpu: u32::try_from(part("sockets") * part("cores") * part("threads"))
                        .unwrap_or(u32::MAX),
                    memory_mib: number(&t["memory"]).unwrap_or(0) >> 20,
                    root_disk_gib: 0,
                },
            );
        }
        Ok(out.into_values().collect())
    }

    async fn conditions(&self) -> Result<Vec<CloudCondition>> {
        let mut out = Vec::new();
        let api = match self.engine.json("api_get", Method::GET, "", None).await {
            Ok(api) => {
                out.push(CloudCondition::new("auth", true, "SSO login works"));
                api
            }
            Err(e) => {
                out.push(CloudCondition::new("auth", false, e.to_string()));
                return Ok(out);
            }
        };
        let version = &api["product_info"]["version"];
        let (major, minor) = (
            number(&version["major"]).unwrap_or(0),
            number(&version["minor"]).unwrap_or(0),
        );
        let full = version["full_version"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{major}.{minor}"));
        out.push(CloudCondition::new(
            "engine-version",
            (major, minor) >= OLDEST,
            format!("engine {full} (needs {}.{} or newer)", OLDEST.0, OLDEST.1),
        ));
        out.push(match data_domains(&self.engine).await {
            Ok(domains) if domains.is_empty() => {
                CloudCondition::new("storage-domains", false, "no data storage domain")
            }
            Ok(domains) => {
                let down: Vec<&str> = domains
                    .iter()
                    .filter(|(_, sd)| !enabled(sd))
                    .map(|(n, _)| n.as_str())
                    .collect();
                match down.is_empty() {
                    true => CloudCondition::new(
                        "storage-domains",
                        true,
                        format!("{} data storage domain(s) ok", domains.len()),
                    ),
                    false => CloudCondition::new(
                        "storage-domains",
                        false,
                        format!("not ok: {}", down.join(", ")),
                    ),
                }
            }
            Err(e) => CloudCondition::new("storage-domains", false, e.to_string()),
        });
        Ok(out)
    }

    /// The cluster's disks as one narrow search lists them: the report needs no
    /// attachments.
    async fn cluster_disks(&self) -> Result<Vec<ClusterDisk>> {
        Ok(self
            .disks
            .ours_listed()
            .await?
            .iter()
            .map(|d| ClusterDisk::from(self.disks.to_disk(d)))
            .collect())
    }
}
