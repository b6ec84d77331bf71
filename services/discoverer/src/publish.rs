//! One discovery cycle: ask the cloud, publish what changed, report orphans.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, Secret};
use k8s_openapi::ByteString;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use overcast_cloud::Discovery;
use serde_json::{json, Value};

use crate::metrics::{ConditionLabels, DiskLabels, Metrics};

pub use overcast_discoverer::api_calls::{
    CATALOG, CATALOG_GROUP, CATALOG_KIND, CATALOG_PLURAL, CATALOG_VERSION, CONDITIONS,
    INSTALLER_KEY, INSTALLER_SECRET, NAMESPACE, SECRET, SECRET_KEY,
};
const MANAGER: &str = "overcast-discoverer";
// The metadata key external-provisioner's `--extra-create-metadata` puts on every disk
// the cluster provisions: its presence marks a disk as the cluster's.
use overcast_cloud::discovery::PV_NAME_KEY;

/// The installer's data with every discovered field laid over it: what only the
/// installer knows (OpenStack's `mainNetwork`, `defaultImageName`, a layout) stays; what
/// the cloud says now replaces what it said at install time.
pub fn merge(installer: Option<Value>, discovered: Value) -> Value {
    match (installer, discovered) {
        (Some(Value::Object(mut base)), Value::Object(found)) => {
            base.extend(found);
            Value::Object(base)
        }
        (_, found) => found,
    }
}

pub struct Publisher {
    pub client: Client,
    pub cloud: Arc<dyn Discovery>,
    pub metrics: Arc<Metrics>,
    pub freshness: Arc<Freshness>,
}

/// When a cycle last heard the cloud and published everything (or since start).
pub struct Freshness {
    last_good: std::sync::Mutex<Instant>,
}

impl Default for Freshness {
    fn default() -> Self {
        Self::new()
    }
}

impl Freshness {
    pub fn new() -> Self {
        Self {
            last_good: std::sync::Mutex::new(Instant::now()),
        }
    }

    fn good(&self) {
        *self.last_good.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// `/healthz`: an error once nothing good happened for `limit`.
    pub fn check(&self, limit: std::time::Duration) -> Result<(), String> {
        let since = self
            .last_good
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        if since > limit {
            Err(format!(
                "no discovery cycle has reached the cloud and published for {}s (limit {}s)",
                since.as_secs(),
                limit.as_secs()
            ))
        } else {
            Ok(())
        }
    }
}

fn catalog_resource() -> ApiResource {
    ApiResource {
        group: CATALOG_GROUP.into(),
        version: CATALOG_VERSION.into(),
        api_version: format!("{CATALOG_GROUP}/{CATALOG_VERSION}"),
        kind: CATALOG_KIND.into(),
        plural: CATALOG_PLURAL.into(),
    }
}

/// A Secret without a type is Opaque (the API server's default).
fn opaque(s: &Secret) -> bool {
    s.type_.as_deref().is_none_or(|t| t == "Opaque")
}

fn apply() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

impl Publisher {
    /// Runs one cycle; `false` when a cloud request failed (the caller backs off).
    pub async fn cycle(&self) -> bool {
        let started = Instant::now();
        let mut cloud_ok = true;
        let mut write_ok = true;

        match self.cloud.discovery_data().await {
            Ok(data) => {
                self.metrics.request("discovery_data", false);
                let data = merge(self.installer_data().await, data);
                write_ok &= self.report("discovery data", self.publish_secret(&data).await);
            }
            Err(e) => {
                tracing::warn!(error = %e, "discovery data: the cloud did not answer; the last published data stays");
                self.metrics.request("discovery_data", true);
                cloud_ok = false;
            }
        }
        match self.cloud.instance_types().await {
            Ok(types) => {
                self.metrics.request("instance_types", false);
                let list: Vec<Value> = types
                    .iter()
                    .map(|t| json!({"name": t.name, "cpu": t.cpu.to_string(), "memory": format!("{}Mi", t.memory_mib), "rootDisk": format!("{}Gi", t.root_disk_gib)}))
                    .collect();
                write_ok &= self.report("instance types", self.publish_catalog(list).await);
            }
            Err(e) => {
                tracing::warn!(error = %e, "instance types: the cloud did not answer");
                self.metrics.request("instance_types", true);
                cloud_ok = false;
            }
        }
        match self.cloud.conditions().await {
            Ok(conditions) => {
                self.metrics.cloud_conditions_error.clear();
                for c in conditions.iter().filter(|c| !c.ok) {
                    self.metrics
                        .cloud_conditions_error
                        .get_or_create(&ConditionLabels {
                            name: c.name.clone(),
                            message: c.message.clone(),
                        })
                        .set(1);
                }
                let list: Vec<Value> = conditions
                    .iter()
                    .map(|c| json!({"name": c.name, "message": c.message, "ok": c.ok}))
                    .collect();
                write_ok &= self.report("conditions", self.publish_conditions(&list).await);
            }
            Err(e) => {
                tracing::warn!(error = %e, "conditions: the cloud did not answer");
                cloud_ok = false;
            }
        }
        match self.orphans().await {
            Ok(orphans) => {
                self.metrics.request("disks_meta", false);
                self.metrics.orphaned_disk_info.clear();
                for (id, name) in orphans {
                    self.metrics
                        .orphaned_disk_info
                        .get_or_create(&DiskLabels { id, name })
                        .set(1);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "orphaned disks: could not compare disks and volumes");
                self.metrics.request("disks_meta", true);
                cloud_ok = false;
            }
        }
        self.metrics.update_resource_error.set(i64::from(!write_ok));
        if cloud_ok && write_ok {
            self.freshness.good();
        }
        self.metrics
            .cycle_duration
            .observe(started.elapsed().as_secs_f64());
        cloud_ok
    }

    fn report<E: std::fmt::Display>(&self, what: &str, result: Result<bool, E>) -> bool {
        match result {
            Ok(true) => {
                tracing::info!(what, "published");
                true
            }
            Ok(false) => true,
            Err(e) => {
                tracing::warn!(what, error = %e, "could not publish");
                false
            }
        }
    }

    /// Applies the Secret when its document differs; `Ok(true)` when it wrote.
    ///
    /// Only an `Opaque` Secret is ours. One of another type under our name (made by
    /// someone else first, say `kubernetes.io/service-account-token`, which a token
    /// controller would fill with another account's token) cannot be changed in place —
    /// the type is immutable, every apply would fail with 422 forever — so it is deleted
    /// (guarded by its uid and resourceVersion: only what was inspected) and published anew.
    /// What the installer wrote (`d8-provider-cluster-configuration`'s
    /// `cloud-provider-discovery-data.json`); nothing when there is none or it cannot be
    /// read or parsed (said in the log: the discovered data is published alone).
    async fn installer_data(&self) -> Option<Value> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), NAMESPACE);
        let secret = match api.get_opt(INSTALLER_SECRET).await {
            Ok(s) => s?,
            Err(e) => {
                tracing::warn!(error = %e, secret = INSTALLER_SECRET, "what the installer knows cannot be read; publishing what was discovered alone");
                return None;
            }
        };
        let bytes = secret.data.as_ref()?.get(INSTALLER_KEY)?;
        match serde_json::from_slice::<Value>(&bytes.0) {
            Ok(v) if v.is_object() => Some(v),
            _ => {
                tracing::warn!(
                    secret = INSTALLER_SECRET,
                    key = INSTALLER_KEY,
                    "not a JSON object; ignored"
                );
                None
            }
        }
    }

    async fn publish_secret(&self, data: &Value) -> anyhow::Result<bool> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), NAMESPACE);
        let bytes = serde_json::to_vec(data).unwrap_or_default();
        let mut current = api.get_opt(SECRET).await?;
        if let Some(found) = current.as_ref().filter(|s| !opaque(s)) {
            tracing::warn!(
                secret = SECRET,
                found_type = found.type_.as_deref().unwrap_or_default(),
                "the discovery Secret is not Opaque and its type cannot change: deleting it to publish it anew"
            );
            let guard = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: found.metadata.uid.clone(),
                    resource_version: found.metadata.resource_version.clone(),
                }),
                ..Default::default()
            };
            match api.delete(SECRET, &guard).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            current = None;
        }
        if current
            .and_then(|s| s.data)
            .and_then(|d| d.get(SECRET_KEY).cloned())
            .is_some_and(|b| b.0 == bytes)
        {
            return Ok(false);
        }
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(SECRET.into()),
                namespace: Some(NAMESPACE.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(SECRET_KEY.to_owned(), ByteString(bytes))])),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        let mut body = serde_json::to_value(&secret).unwrap_or_default();
        body["apiVersion"] = json!("v1");
        body["kind"] = json!("Secret");
        let written = api.patch(SECRET, &apply(), &Patch::Apply(&body)).await?;
        // Created or updated, what is there now must be ours; a race with another writer
        // is healed by the next cycle.
        anyhow::ensure!(
            opaque(&written),
            "the discovery Secret is of type {:?} after publishing",
            written.type_
        );
        Ok(true)
    }

    async fn publish_conditions(&self, list: &[Value]) -> kube::Result<bool> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), NAMESPACE);
        let text = serde_json::to_string(list).unwrap_or_default();
        let current = api.get_opt(CONDITIONS).await?;
        if current
            .and_then(|c| c.data)
            .and_then(|d| d.get("conditions").cloned())
            .is_some_and(|t| t == text)
        {
            return Ok(false);
        }
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONDITIONS, "namespace": NAMESPACE},
            "data": {"conditions": text},
        });
        api.patch(CONDITIONS, &apply(), &Patch::Apply(&body))
            .await?;
        Ok(true)
    }

    async fn publish_catalog(&self, types: Vec<Value>) -> kube::Result<bool> {
        let resource = catalog_resource();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let current = api.get_opt(CATALOG).await?;
        if current.is_some_and(|c| c.data.get("instanceTypes") == Some(&json!(types))) {
            return Ok(false);
        }
        let body = json!({
            "apiVersion": resource.api_version, "kind": resource.kind,
            "metadata": {"name": CATALOG},
            "instanceTypes": types,
        });
        api.patch(CATALOG, &apply(), &Patch::Apply(&body)).await?;
        Ok(true)
    }

    /// Disks the cluster made, or a provider kept without knowing whose they are, that no
    /// PersistentVolume references: (id, name).
    async fn orphans(&self) -> anyhow::Result<Vec<(String, String)>> {
        let disks = self.cloud.cluster_disks().await?;
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let handles: HashSet<String> = pvs
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|pv| pv.spec?.csi.map(|c| c.volume_handle))
            .collect();
        Ok(disks
            .into_iter()
            .filter(|d| {
                (d.metadata.contains_key(PV_NAME_KEY)
                    || d.metadata
                        .contains_key(overcast_cloud::discovery::UNEXPLAINED))
                    && !handles.contains(&d.id)
            })
            .map(|d| (d.id, d.name))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovered_fields_are_laid_over_what_the_installer_knows() {
        let installer = json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "OpenStackCloudProviderDiscoveryData",
            "mainNetwork": "net1", "defaultImageName": "ubuntu", "zones": ["stale"]});
        let found = json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "OpenStackCloudProviderDiscoveryData",
            "zones": ["nova"], "flavors": ["m1.small"]});
        assert_eq!(
            merge(Some(installer), found.clone()),
            json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "OpenStackCloudProviderDiscoveryData",
                "mainNetwork": "net1", "defaultImageName": "ubuntu", "zones": ["nova"], "flavors": ["m1.small"]})
        );
        assert_eq!(merge(None, found.clone()), found);
        assert_eq!(merge(Some(json!(["not an object"])), found.clone()), found);
    }
}
