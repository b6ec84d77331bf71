//! Discovery on DVP, for the Deckhouse contracts: `DVPCloudDiscoveryData` (the zones of
//! the parent's nodes — `["default"]` when it has none, as Deckhouse's hook fills in — and
//! the parent's StorageClasses with their binding mode, reclaim policy, expansion and
//! default), the instance types this cluster's VMs have (the names the ccm labels the
//! nodes with), the volumes made for this cluster (orphans are those no PV names), and
//! conditions: the parent answers, the namespace exists, the account may do what the
//! provider does.
//!
//! The parent's StorageClasses and Nodes are cluster-scoped: without the optional grant of
//! `deploy/parent/dvp/rbac.yaml` they are left out and a condition says why.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::authorization::v1::SelfSubjectRulesReview;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use overcast_cloud::discovery::{CloudCondition, ClusterDisk, Discovery, InstanceType};
use overcast_cloud::{CloudError, Disks, Result};
use serde_json::json;

use crate::api;
use crate::disks::DvpDisks;
use crate::instances::{instance_type, parent_zones};
use crate::parent::Parent;

const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// What the provider does in its namespace (group, resource, verb): the permissions
/// condition names whatever of it the account may not.
const NEEDED: &[(&str, &str, &str)] = &[
    ("virtualization.deckhouse.io", "virtualdisks", "create"),
    ("virtualization.deckhouse.io", "virtualdisks", "delete"),
    ("virtualization.deckhouse.io", "virtualdisks", "patch"),
    ("virtualization.deckhouse.io", "virtualdisks", "watch"),
    (
        "virtualization.deckhouse.io",
        "virtualmachineblockdeviceattachments",
        "create",
    ),
    (
        "virtualization.deckhouse.io",
        "virtualmachineblockdeviceattachments",
        "delete",
    ),
    (
        "virtualization.deckhouse.io",
        "virtualmachineblockdeviceattachments",
        "watch",
    ),
    ("virtualization.deckhouse.io", "virtualmachines", "list"),
    ("virtualization.deckhouse.io", "virtualmachines", "patch"),
    ("", "services", "create"),
    ("", "services", "delete"),
];

pub struct DvpDiscovery {
    parent: Parent,
    disks: DvpDisks,
}

impl DvpDiscovery {
    pub fn new(parent: Parent, disks: DvpDisks) -> Self {
        Self { parent, disks }
    }

    /// The parent's StorageClasses as the discovery document lists them; `None` when the
    /// account may not read them.
    async fn storage_classes(&self) -> Result<Option<Vec<serde_json::Value>>> {
        let api: Api<StorageClass> = Api::all(self.parent.client.clone());
        let list = match self
            .parent
            .call(
                "storageclass_list",
                "list the parent's StorageClasses",
                api.list(&ListParams::default()),
            )
            .await
        {
            Ok(l) => l,
            Err(CloudError::PermissionDenied(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut out: Vec<serde_json::Value> = list
            .items
            .iter()
            .map(|sc| {
                json!({
                    "name": sc.name_any(),
                    "volumeBindingMode": sc.volume_binding_mode.clone().unwrap_or_else(|| "Immediate".into()),
                    "reclaimPolicy": sc.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
                    "allowVolumeExpansion": sc.allow_volume_expansion.unwrap_or(false),
                    "isEnabled": true,
                    "isDefault": sc.annotations().get(DEFAULT_CLASS).map(String::as_str) == Some("true"),
                })
            })
            .collect();
        out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Ok(Some(out))
    }

    /// What of [`NEEDED`] the account may not do in the namespace (one review).
    async fn missing_permissions(&self) -> Result<Vec<String>> {
        let api: Api<SelfSubjectRulesReview> = Api::all(self.parent.client.clone());
        let review: SelfSubjectRulesReview = serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": self.parent.namespace},
        }))
        .map_err(|e| CloudError::Internal(e.to_string()))?;
        let answer = self
            .parent
            .call(
                "selfsubjectrulesreview_create",
                "review the account's permissions",
                api.create(&PostParams::default(), &review),
            )
            .await?;
        let rules = answer.status.map(|s| s.resource_rules).unwrap_or_default();
        let allows = |group: &str, resource: &str, verb: &str| {
            rules.iter().any(|r| {
                let has = |list: &Option<Vec<String>>, want: &str| {
                    list.iter().flatten().any(|v| v == want || v == "*")
                };
                has(&r.api_groups, group)
                    && has(&r.resources, resource)
                    && r.verbs.iter().any(|v| v == verb || v == "*")
            })
        };
        Ok(NEEDED
            .iter()
            .filter(|(g, r, v)| !allows(g, r, v))
            .map(|(g, r, v)| {
                let group = if g.is_empty() { "core" } else { g };
                format!("{v} {r} ({group})")
            })
            .collect())
    }
}

fn condition(name: &str, ok: bool, message: impl Into<String>) -> CloudCondition {
    CloudCondition {
        name: name.into(),
        message: message.into(),
        ok,
    }
}

#[async_trait]
impl Discovery for DvpDiscovery {
    async fn discovery_data(&self) -> Result<serde_json::Value> {
        let zones = parent_zones(&self.parent).await?;
        let mut names: Vec<String> = zones
            .unwrap_or_default()
            .into_values()
            .map(|z| z.zone)
            .collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            names.push("default".into());
        }
        let mut doc = json!({
            "apiVersion": "deckhouse.io/v1",
            "kind": "DVPCloudDiscoveryData",
            "zones": names,
        });
        if let Some(classes) = self.storage_classes().await? {
            doc["storageClasses"] = json!(classes);
        }
        Ok(doc)
    }

    async fn instance_types(&self) -> Result<Vec<InstanceType>> {
        let vms = self
            .parent
            .list_all("virtualmachine_list", &self.parent.vms(), None)
            .await?;
        // A VM's root disk is its first VirtualDisk: all of them in one list.
        let disks = self
            .parent
            .list_all("virtualdisk_list", &self.parent.disks(), None)
            .await?;
        let sizes: BTreeMap<String, u64> = disks
            .iter()
            .map(|d| {
                let size = d
                    .status
                    .as_ref()
                    .and_then(|s| s.capacity.as_deref())
                    .and_then(api::quantity_bytes)
                    .unwrap_or(0);
                (d.name_any(), size)
            })
            .collect();
        let mut out: BTreeMap<String, InstanceType> = BTreeMap::new();
        for vm in &vms {
            let name = instance_type(vm);
            let memory = vm
                .spec
                .memory
                .as_ref()
                .and_then(|m| api::quantity_bytes(&m.size.0))
                .unwrap_or(0);
            let root = vm
                .spec
                .block_device_refs
                .iter()
                .find(|r| r.kind == "VirtualDisk")
                .and_then(|r| sizes.get(&r.name))
                .copied()
                .unwrap_or(0);
            out.entry(name.clone()).or_insert(InstanceType {
                name,
                cpu: vm.spec.cpu.as_ref().map(|c| c.cores).unwrap_or(0),
                memory_mib: memory >> 20,
                root_disk_gib: root.div_ceil(1 << 30),
            });
        }
        Ok(out.into_values().collect())
    }

    async fn conditions(&self) -> Result<Vec<CloudCondition>> {
        let reachable = match self.disks.probe().await {
            Ok(()) => condition("parent-reachable", true, "the parent cluster answers"),
            Err(e) => condition("parent-reachable", false, e.to_string()),
        };
        let namespaces: Api<Namespace> = Api::all(self.parent.client.clone());
        let ns = &self.parent.namespace;
        let namespace = match self.parent.get_opt("namespace_get", &namespaces, ns).await {
            Ok(Some(_)) => condition("namespace", true, format!("namespace {ns} exists")),
            Ok(None) => condition(
                "namespace",
                false,
                format!("namespace {ns} does not exist in the parent cluster"),
            ),
            // The account may not read namespaces: what it may do there says enough.
            Err(CloudError::PermissionDenied(_)) => condition(
                "namespace",
                true,
                format!("namespace {ns}: not allowed to read it; its objects answer"),
            ),
            Err(e) => condition("namespace", false, e.to_string()),
        };
        let permissions = match self.missing_permissions().await {
            Ok(missing) if missing.is_empty() => condition(
                "permissions",
                true,
                "the account may do all the provider does",
            ),
            Ok(missing) => condition(
                "permissions",
                false,
                format!(
                    "the account may not: {} (deploy/parent/dvp/rbac.yaml)",
                    missing.join(", ")
                ),
            ),
            Err(e) => condition("permissions", false, e.to_string()),
        };
        let classes = match self.storage_classes().await {
            Ok(Some(c)) => condition("storage-classes", true, format!("{} StorageClasses in the parent", c.len())),
            Ok(None) => condition(
                "storage-classes",
                false,
                "not allowed to list the parent's StorageClasses (the optional grant in deploy/parent/dvp/rbac.yaml)",
            ),
            Err(e) => condition("storage-classes", false, e.to_string()),
        };
        Ok(vec![reachable, namespace, permissions, classes])
    }

    async fn cluster_disks(&self) -> Result<Vec<ClusterDisk>> {
        Ok(self
            .disks
            .list_disks()
            .await?
            .into_iter()
            .map(|d| ClusterDisk {
                id: d.id,
                name: d.name,
                metadata: d.metadata,
            })
            .collect())
    }
}
