//! Discovery on OpenStack, for the Deckhouse contracts: `OpenStackCloudProviderDiscoveryData`
//! (`deckhouse.io/v1alpha1`) with the flavors, images, volume types, zones, networks,
//! security groups and server groups the project sees; the InstanceTypesCatalog from the
//! flavors; this cluster's volumes (orphans are those no PV names); conditions: Keystone
//! answers, the services the suite needs are in the catalog, the quotas are not used up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use http::Method;
use overcast_cloud::discovery::{CloudCondition, ClusterDisk, Discovery, InstanceType};
use overcast_cloud::Result;
use serde_json::{json, Value};

use crate::client::{json, Microversion, OpenStack, Service};
use crate::volumes::{CinderDisks, CLUSTER_METADATA};

pub struct OpenStackDiscovery {
    os: Arc<OpenStack>,
    disks: CinderDisks,
    cluster: String,
}

/// GET `path` of `service`, 200 or the typed error.
async fn get(os: &OpenStack, service: Service, name: &'static str, path: &str) -> Result<Value> {
    let version = (service == Service::Compute).then_some(Microversion(2, 1));
    let resp = os
        .call(service, name, Method::GET, path, None, version)
        .await?;
    if resp.status.as_u16() != 200 {
        return Err(overcast_cloud_http::status_error("openstack", name, &resp));
    }
    json(name, &resp)
}

fn items<'a>(doc: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    doc[key].as_array().into_iter().flatten()
}

fn names(doc: &Value, key: &str) -> Vec<String> {
    let set: BTreeSet<String> = items(doc, key)
        .filter_map(|i| i["name"].as_str())
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    set.into_iter().collect()
}

impl OpenStackDiscovery {
    pub fn new(os: Arc<OpenStack>, disks: CinderDisks, cluster: String) -> Self {
        Self { os, disks, cluster }
    }

    async fn flavors(&self) -> Result<Value> {
        get(&self.os, Service::Compute, "flavor_list", "/flavors/detail").await
    }

    /// Every image, page by page (Glance's `next` link).
    async fn images(&self) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut path = "/v2/images?limit=200".to_owned();
        for _ in 0..1000 {
            let doc = get(&self.os, Service::Image, "image_list", &path).await?;
            out.extend(items(&doc, "images").cloned());
            match next_page(&path, doc["next"].as_str()) {
                Some(next) => path = next,
                None => break,
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl Discovery for OpenStackDiscovery {
    async fn discovery_data(&self) -> Result<Value> {
        let flavors = self.flavors().await?;
        let images = self.images().await?;
        let types = get(
            &self.os,
            Service::BlockStorage,
            "volume_type_list",
            "/types?is_public=None",
        )
        .await?;
        let default_type = get(
            &self.os,
            Service::BlockStorage,
            "volume_type_default",
            "/types/default",
        )
        .await
        .ok()
        .and_then(|d| d["volume_type"]["id"].as_str().map(str::to_owned));
        let zones = get(
            &self.os,
            Service::Compute,
            "availability_zone_list",
            "/os-availability-zone",
        )
        .await?;
        let networks = get(&self.os, Service::Network, "network_list", "/v2.0/networks").await?;
        let groups = get(
            &self.os,
            Service::Network,
            "security_group_list",
            "/v2.0/security-groups",
        )
        .await?;
        let server_groups = get(
            &self.os,
            Service::Compute,
            "server_group_list",
            "/os-server-groups",
        )
        .await?;

        let zone_names: BTreeSet<String> = items(&zones, "availabilityZoneInfo")
            .filter(|z| z["zoneState"]["available"].as_bool() == Some(true))
            .filter_map(|z| z["zoneName"].as_str().map(str::to_owned))
            .collect();
        let flavor_details: Vec<Value> = items(&flavors, "flavors")
            .map(|f| json!({"name": f["name"], "ram": f["ram"], "vcpus": f["vcpus"], "disk": f["disk"]}))
            .collect();
        let mut image_names: Vec<String> = images
            .iter()
            .filter_map(|i| i["name"].as_str().map(str::to_owned))
            .collect();
        image_names.sort();
        image_names.dedup();
        let image_details: Vec<Value> = images
            .iter()
            .map(|i| {
                json!({"id": i["id"], "name": i["name"],
                       "defaultVolumeType": i["cinder_img_volume_type"].as_str().unwrap_or_default(),
                       "createdAt": i["created_at"]})
            })
            .collect();
        let volume_types: Vec<Value> = items(&types, "volume_types")
            .map(|t| {
                json!({"id": t["id"], "name": t["name"],
                       "description": t["description"].as_str().unwrap_or_default(),
                       "extraSpecs": t["extra_specs"].as_object().cloned().unwrap_or_default(),
                       "isPublic": t["is_public"].as_bool().unwrap_or(true),
                       "isDefault": default_type.as_deref().is_some_and(|d| t["id"] == d),
                       "qosSpecID": t["qos_specs_id"].as_str().unwrap_or_default()})
            })
            .collect();
        // External networks carry floating IPs; the others are where nodes can be.
        let internal: BTreeSet<String> = items(&networks, "networks")
            .filter(|n| n["router:external"].as_bool() != Some(true))
            .filter_map(|n| n["name"].as_str().map(str::to_owned))
            .filter(|n| !n.is_empty())
            .collect();
        Ok(json!({
            "apiVersion": "deckhouse.io/v1alpha1",
            "kind": "OpenStackCloudProviderDiscoveryData",
            "flavors": names(&flavors, "flavors"),
            "flavorsDetails": flavor_details,
            "images": image_names,
            "imagesDetails": image_details,
            "volumeTypes": volume_types,
            "zones": zone_names,
            "additionalNetworks": internal,
            "additionalSecurityGroups": names(&groups, "security_groups"),
            "serverGroups": names(&server_groups, "server_groups"),
        }))
    }

    async fn instance_types(&self) -> Result<Vec<InstanceType>> {
        let flavors = self.flavors().await?;
        let mut out: BTreeMap<String, InstanceType> = BTreeMap::new();
        for f in items(&flavors, "flavors") {
            let Some(name) = f["name"].as_str() else {
                continue;
            };
            out.insert(
                name.to_owned(),
                InstanceType {
                    name: name.to_owned(),
                    cpu: f["vcpus"]
                        .as_u64()
                        .and_then(|v| u32::try_from(v).ok())
                        .unwrap_or(0),
                    memory_mib: f["ram"].as_u64().unwrap_or(0),
                    root_disk_gib: f["disk"].as_u64().unwrap_or(0),
                },
            );
        }
        Ok(out.into_values().collect())
    }

    async fn conditions(&self) -> Result<Vec<CloudCondition>> {
        let mut out = Vec::new();
        let session = match self.os.session().await {
            Ok(s) => {
                out.push(condition("keystone", true, "Keystone issues a token"));
                s
            }
            Err(e) => {
                out.push(condition("keystone", false, e.to_string()));
                return Ok(out);
            }
        };
        let have = session.services();
        let missing: Vec<&str> = [
            ("compute", &["compute"][..]),
            ("block-storage", &["block-storage", "volumev3"][..]),
            ("network", &["network"][..]),
            ("image", &["image"][..]),
        ]
        .into_iter()
        .filter(|(_, types)| !types.iter().any(|t| have.iter().any(|h| h == t)))
        .map(|(name, _)| name)
        .collect();
        out.push(if missing.is_empty() {
            condition(
                "services",
                true,
                "compute, block-storage, network and image are in the catalog",
            )
        } else {
            condition(
                "services",
                false,
                format!("the catalog lacks {}", missing.join(", ")),
            )
        });
        out.push(match self.quota_left(session.project_id.as_deref()).await {
            Ok(full) if full.is_empty() => condition("quotas", true, "no quota is used up"),
            Ok(full) => condition("quotas", false, format!("used up: {}", full.join(", "))),
            Err(e) => condition("quotas", false, e.to_string()),
        });
        Ok(out)
    }

    async fn cluster_disks(&self) -> Result<Vec<ClusterDisk>> {
        // Cinder's metadata filter: the volumes of other clusters in the project are not
        // read (the provider filters its answer again).
        let ours = self.disks.cluster_volumes(&self.cluster).await?;
        Ok(ours
            .into_iter()
            .filter(|v| v.metadata.get(CLUSTER_METADATA) == Some(&self.cluster))
            .map(|v| {
                let name = v.name.unwrap_or_default();
                let mut metadata = v.metadata;
                // cinder-csi-plugin (ours too) names a volume after its PV; without the
                // provisioner's --extra-create-metadata that name is the only record of
                // it, and the orphan report matches PVs by this key.
                if !name.is_empty() {
                    metadata
                        .entry(overcast_cloud::discovery::PV_NAME_KEY.to_owned())
                        .or_insert_with(|| name.clone());
                }
                ClusterDisk {
                    id: v.id,
                    name,
                    metadata,
                }
            })
            .collect())
    }
}

impl OpenStackDiscovery {
    /// The quotas with nothing left (`<service> <resource>`), Cinder's and Nova's.
    async fn quota_left(&self, project: Option<&str>) -> Result<Vec<String>> {
        let Some(project) = project else {
            return Ok(Vec::new());
        };
        let mut full = Vec::new();
        for (service, name, path, keys) in [
            (
                Service::BlockStorage,
                "quota_get",
                format!("/os-quota-sets/{project}?usage=true"),
                &["volumes", "gigabytes"][..],
            ),
            (
                Service::Compute,
                "compute_quota_get",
                format!("/os-quota-sets/{project}/detail"),
                &["instances", "cores", "ram"][..],
            ),
        ] {
            let doc = get(&self.os, service, name, &path).await?;
            for k in keys {
                let q = &doc["quota_set"][k];
                let limit = q["limit"].as_i64().unwrap_or(-1);
                let used = q["in_use"].as_i64().unwrap_or(0) + q["reserved"].as_i64().unwrap_or(0);
                if limit >= 0 && used >= limit {
                    full.push(format!("{k} ({used} of {limit})"));
                }
            }
        }
        Ok(full)
    }
}

/// Glance's `next` link, followed only under the endpoint's `/v2/` and only when it
/// moves on (a Glance answering the same page forever would otherwise cost a thousand
/// calls a cycle).
fn next_page(current: &str, next: Option<&str>) -> Option<String> {
    next.filter(|n| n.starts_with("/v2/") && *n != current)
        .map(str::to_owned)
}

fn condition(name: &str, ok: bool, message: impl Into<String>) -> CloudCondition {
    CloudCondition::new(name, ok, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glance_pages_are_followed_only_forward_and_under_the_endpoint() {
        let first = "/v2/images?limit=200";
        assert_eq!(
            next_page(first, Some("/v2/images?limit=200&marker=a")).as_deref(),
            Some("/v2/images?limit=200&marker=a")
        );
        assert_eq!(next_page(first, Some(first)), None, "the same page again");
        assert_eq!(next_page(first, Some("http://elsewhere/v2/images")), None);
        assert_eq!(next_page(first, Some("/v3/auth/tokens")), None);
        assert_eq!(next_page(first, None), None);
    }
}
