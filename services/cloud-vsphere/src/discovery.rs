//! What Deckhouse's vSphere cloud-data-discoverer publishes, from the vCenter:
//! `VsphereCloudDiscoveryData` (`deckhouse.io/v1`) with the datacenter, the zones (the
//! zone-category tags on its clusters), the datastores and datastore clusters that carry
//! zone tags (`{zones, path, name, datastoreType, datastoreURL}`, `name` the Kubernetes-safe
//! name Deckhouse makes of the inventory path below the datacenter), and the storage
//! policies; the instance types the VMs have; conditions; and the CNS volumes made for this
//! cluster (the discoverer reports those no PV names as orphans). The installer's fields
//! (`vmFolderPath`, `resourcePoolPath`) are merged in by the discoverer from
//! `d8-provider-cluster-configuration`, as Deckhouse's does.
//!
//! Where Deckhouse's stops — no zone found, no zoned datastore — this one publishes what
//! it found and says so in a condition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use overcast_cloud::{CloudCondition, CloudError, ClusterDisk, Discovery, InstanceType, Result};
use serde_json::{json, Value};

use crate::cns::{Cns, Filter};
use crate::inventory::{Props, View};
use crate::pbm::Pbm;
use crate::session::Vcenter;
use crate::soap::Moref;
use crate::tags::Tags;

pub const KIND: &str = "VsphereCloudDiscoveryData";
pub const API_VERSION: &str = "deckhouse.io/v1";

pub struct VsphereDiscovery {
    vc: Arc<Vcenter>,
    view: View,
    tags: Tags,
    pbm: Pbm,
    cns: Cns,
    datacenter: String,
    zone_category: Option<String>,
    cluster_id: String,
}

/// The inventory one discovery reads: every object's name and parent, the datastores'
/// URLs, the VMs' shapes.
struct Inventory {
    objects: Vec<Props>,
    parents: BTreeMap<Moref, (String, Option<Moref>)>,
}

impl Inventory {
    /// `obj`'s inventory path (`/DC0/datastore/LocalDS_0`: from the datacenter down, as
    /// govmomi's finder writes it) and whether it is below `dc`.
    fn path_under(&self, obj: &Moref, dc: &Moref) -> Option<String> {
        let mut names = Vec::new();
        let mut at = Some(obj.clone());
        while let Some(m) = at {
            let (name, parent) = self.parents.get(&m)?;
            names.push(name.clone());
            if &m == dc {
                names.reverse();
                return Some(format!("/{}", names.join("/")));
            }
            if names.len() > 64 {
                return None;
            }
            at = parent.clone();
        }
        None
    }
}

impl VsphereDiscovery {
    pub fn new(
        vc: Arc<Vcenter>,
        datacenter: String,
        zone_category: Option<String>,
        cluster_id: String,
    ) -> Self {
        Self {
            view: View::new(
                Arc::clone(&vc),
                &[
                    "Datacenter",
                    "Folder",
                    "ComputeResource",
                    "Datastore",
                    "StoragePod",
                    "VirtualMachine",
                ],
            ),
            tags: Tags::new(Arc::clone(&vc)),
            pbm: Pbm::new(Arc::clone(&vc)),
            cns: Cns::new(Arc::clone(&vc)),
            vc,
            datacenter,
            zone_category,
            cluster_id,
        }
    }

    async fn inventory(&self) -> Result<Inventory> {
        const NAMED: &[&str] = &["name", "parent"];
        let objects = self
            .view
            .retrieve(&[
                ("Datacenter", NAMED),
                ("Folder", NAMED),
                ("ComputeResource", NAMED),
                ("Datastore", &["name", "parent", "summary.url"]),
                ("StoragePod", NAMED),
                ("VirtualMachine", &["summary.config"]),
            ])
            .await?;
        let parents = objects
            .iter()
            .filter(|p| p.obj.kind != "VirtualMachine")
            .map(|p| {
                (
                    p.obj.clone(),
                    (
                        p.text("name").unwrap_or_default().to_owned(),
                        p.get("parent").and_then(Moref::of),
                    ),
                )
            })
            .collect();
        Ok(Inventory { objects, parents })
    }

    fn datacenter_of(&self, inv: &Inventory) -> Result<Moref> {
        inv.objects
            .iter()
            .find(|p| {
                p.obj.kind == "Datacenter" && p.text("name") == Some(self.datacenter.as_str())
            })
            .map(|p| p.obj.clone())
            .ok_or_else(|| {
                CloudError::Unavailable(format!(
                    "vsphere: {}: no datacenter {:?}",
                    self.vc.server(),
                    self.datacenter
                ))
            })
    }

    /// The zones (zone-category tags on the datacenter's clusters) and the zoned
    /// datastores, as Deckhouse's `GetZonesDatastores` finds them.
    async fn zones_and_datastores(
        &self,
        inv: &Inventory,
        dc: &Moref,
    ) -> Result<(Vec<String>, Vec<Value>)> {
        let Some(category) = &self.zone_category else {
            return Ok((Vec::new(), Vec::new()));
        };
        let clusters: Vec<Moref> = inv
            .objects
            .iter()
            .filter(|p| p.obj.kind == "ClusterComputeResource")
            .filter(|p| inv.path_under(&p.obj, dc).is_some())
            .map(|p| p.obj.clone())
            .collect();
        let stores: Vec<&Props> = inv
            .objects
            .iter()
            .filter(|p| matches!(p.obj.kind.as_str(), "Datastore" | "StoragePod"))
            .filter(|p| inv.path_under(&p.obj, dc).is_some())
            .collect();
        let mut objects = clusters.clone();
        objects.extend(stores.iter().map(|p| p.obj.clone()));
        let attached = self.tags.attached(&objects).await?;
        let zone_tags = |m: &Moref| -> Vec<String> {
            attached
                .get(m)
                .into_iter()
                .flatten()
                .filter(|t| &t.category == category)
                .map(|t| t.name.clone())
                .collect()
        };
        let zones: BTreeSet<String> = clusters.iter().flat_map(zone_tags).collect();
        let mut datastores: Vec<Value> = stores
            .iter()
            .filter_map(|p| {
                let zones = zone_tags(&p.obj);
                if zones.is_empty() {
                    return None;
                }
                let path = inv.path_under(&p.obj, dc)?;
                let below: Vec<&str> = path.split('/').skip(3).collect();
                let (kind, url) = if p.obj.kind == "Datastore" {
                    ("Datastore", p.text("summary.url").unwrap_or_default())
                } else {
                    ("DatastoreCluster", "")
                };
                Some(json!({
                    "zones": zones,
                    "path": path,
                    "name": crate::slug::kubernetes_name(&below.join("-")),
                    "datastoreType": kind,
                    "datastoreURL": url,
                }))
            })
            .collect();
        datastores.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Ok((zones.into_iter().collect(), datastores))
    }
}

#[async_trait]
impl Discovery for VsphereDiscovery {
    async fn discovery_data(&self) -> Result<Value> {
        let inv = self.inventory().await?;
        let dc = self.datacenter_of(&inv)?;
        let (zones, datastores) = self.zones_and_datastores(&inv, &dc).await?;
        let policies: Vec<Value> = self
            .pbm
            .policies()
            .await?
            .into_iter()
            .map(|p| json!({"name": p.name, "id": p.id}))
            .collect();
        Ok(json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "datacenter": self.datacenter,
            "zones": zones,
            "datastores": datastores,
            "storagePolicies": policies,
        }))
    }

    /// The shapes the VMs have (templates left out), named as the ccm's instance types
    /// without the guest: `vsphere-vm.cpu-<n>.mem-<GiB>gb`.
    async fn instance_types(&self) -> Result<Vec<InstanceType>> {
        let inv = self.inventory().await?;
        let mut shapes = BTreeMap::new();
        for p in inv
            .objects
            .iter()
            .filter(|p| p.obj.kind == "VirtualMachine")
        {
            let Some(c) = p.get("summary.config") else {
                continue;
            };
            if c.text_at(&["template"]) == Some("true") {
                continue;
            }
            let cpu: u32 = c
                .text_at(&["numCpu"])
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mib: u64 = c
                .text_at(&["memorySizeMB"])
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if cpu == 0 || mib == 0 {
                continue;
            }
            let name = format!("vsphere-vm.cpu-{cpu}.mem-{}gb", mib / 1024);
            shapes.entry(name.clone()).or_insert(InstanceType {
                name,
                cpu,
                memory_mib: mib,
                root_disk_gib: 0,
            });
        }
        Ok(shapes.into_values().collect())
    }

    async fn conditions(&self) -> Result<Vec<CloudCondition>> {
        let mut out = Vec::new();
        let inv = match self.inventory().await {
            Ok(inv) => {
                out.push(CloudCondition::new("vcenter", true, "the vCenter answers"));
                inv
            }
            Err(e) => {
                out.push(CloudCondition::new("vcenter", false, e.to_string()));
                return Ok(out);
            }
        };
        let dc = match self.datacenter_of(&inv) {
            Ok(dc) => dc,
            Err(e) => {
                out.push(CloudCondition::new("datacenter", false, e.to_string()));
                return Ok(out);
            }
        };
        if let Some(category) = &self.zone_category {
            let (zones, datastores) = self.zones_and_datastores(&inv, &dc).await?;
            out.push(CloudCondition::new(
                "zones",
                !zones.is_empty(),
                if zones.is_empty() {
                    format!(
                        "no cluster of datacenter {:?} carries a tag of category {category:?}",
                        self.datacenter
                    )
                } else {
                    format!("zones {}", zones.join(", "))
                },
            ));
            out.push(CloudCondition::new(
                "zoned-datastores",
                !datastores.is_empty(),
                if datastores.is_empty() {
                    format!("no datastore carries a tag of category {category:?}")
                } else {
                    format!("{} datastores with zones", datastores.len())
                },
            ));
        }
        Ok(out)
    }

    /// The CNS volumes made for this cluster (`containerCluster.clusterId`).
    async fn cluster_disks(&self) -> Result<Vec<ClusterDisk>> {
        Ok(self
            .cns
            .query(&Filter {
                cluster_ids: vec![self.cluster_id.clone()],
                ..Filter::default()
            })
            .await?
            .into_iter()
            .map(|v| ClusterDisk {
                id: v.id,
                name: v.name,
                metadata: v.metadata,
            })
            .collect())
    }
}
