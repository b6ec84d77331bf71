//! Discovery on DVP, for the Deckhouse contracts: `DVPCloudDiscoveryData` (the zones of
//! the parent's nodes — `["default"]` when it has none, as Deckhouse's hook fills in — and
//! the parent's StorageClasses with their binding mode, reclaim policy, expansion and
//! default), the instance types the VirtualMachineClasses allow and this cluster's VMs
//! have (the names the ccm labels the nodes with), the volumes made for this cluster (orphans are those no PV names), and
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
use crate::instances::{instance_type, shape_name};
use crate::machines::CLUSTER_UUID_LABEL;
use crate::parent::{Parent, PAGE};
use crate::zones::{zones_of, ParentNodes};

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
    // The zone a bound disk is in: its PVC names its PersistentVolume.
    ("", "persistentvolumeclaims", "get"),
];

pub struct DvpDiscovery {
    parent: Parent,
    disks: DvpDisks,
    nodes: ParentNodes,
}

impl DvpDiscovery {
    pub fn new(parent: Parent, disks: DvpDisks) -> Self {
        Self {
            parent,
            disks,
            nodes: ParentNodes::default(),
        }
    }

    /// The parent's VirtualMachineClasses (cluster-scoped); `None` when the account may
    /// not list them.
    async fn classes(&self) -> Result<Option<Vec<api::VirtualMachineClass>>> {
        let api: Api<api::VirtualMachineClass> =
            Api::all_with(self.parent.client.clone(), &api::virtual_machine_class());
        match self
            .parent
            .list_all("virtualmachineclass_list", &api, None)
            .await
        {
            Ok(classes) => Ok(Some(classes)),
            Err(CloudError::PermissionDenied(_)) => Ok(None),
            Err(e) => Err(e),
        }
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

/// How many shapes one sizing policy contributes at most: a class allowing 1 to 1,024
/// cores one by one would otherwise fill the catalog with a thousand entries.
const SHAPES_PER_POLICY: u32 = 32;

/// The shapes a VirtualMachineClass allows, as cluster-autoscaler's catalog lists
/// them: for each sizing policy, each core count its step allows (thinned to at most
/// [`SHAPES_PER_POLICY`], the largest always kept) with the least memory the policy
/// allows for it — `memory.min`, or `perCore.min` times the cores when larger, rounded
/// up to `memory.step`. A policy that bounds no memory names no shape; a class that
/// is not Ready (no node can run it) names none. Root disk: the class does not say (0).
pub fn class_shapes(class: &api::VirtualMachineClass) -> Vec<InstanceType> {
    let phase = class.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase.is_some_and(|p| p != "Ready") {
        return Vec::new();
    }
    let name = class.name_any();
    let mut out = Vec::new();
    for policy in &class.spec.sizing_policies {
        let (Some(cores), Some(memory)) = (&policy.cores, &policy.memory) else {
            continue;
        };
        let bytes = |v: &Option<serde_json::Value>| {
            v.as_ref().and_then(api::int_or_quantity_bytes).unwrap_or(0)
        };
        let (min, per_core, step) = (
            bytes(&memory.min),
            bytes(&memory.per_core.as_ref().and_then(|p| p.min.clone())),
            bytes(&memory.step),
        );
        if min == 0 && per_core == 0 {
            continue;
        }
        let step_cores = cores.step.unwrap_or(1).max(1);
        if cores.max < cores.min {
            continue;
        }
        let count = (cores.max - cores.min) / step_cores + 1;
        let stride = step_cores * count.div_ceil(SHAPES_PER_POLICY);
        let mut counts: Vec<u32> = (cores.min..=cores.max).step_by(stride as usize).collect();
        let largest = cores.min + (count - 1) * step_cores;
        if counts.last() != Some(&largest) {
            counts.push(largest);
        }
        for n in counts {
            let mut want = min.max(per_core.saturating_mul(u64::from(n)));
            if step > 0 {
                want = want.div_ceil(step).saturating_mul(step);
            }
            out.push(InstanceType {
                name: shape_name(&name, n, want),
                cpu: n,
                memory_mib: want >> 20,
                root_disk_gib: 0,
            });
        }
    }
    out
}

fn condition(name: &str, ok: bool, message: impl Into<String>) -> CloudCondition {
    CloudCondition::new(name, ok, message)
}

#[async_trait]
impl Discovery for DvpDiscovery {
    async fn discovery_data(&self) -> Result<serde_json::Value> {
        let nodes = self.nodes.list(&self.parent).await?;
        let names: std::collections::BTreeSet<String> = zones_of(nodes.iter().flatten())
            .into_iter()
            .map(|z| z.zone)
            .collect();
        let mut names: Vec<String> = names.into_iter().collect();
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
        // What the classes allow first; a VM's own shape (with its root disk) replaces
        // the class's entry of the same name.
        let mut out: BTreeMap<String, InstanceType> = BTreeMap::new();
        for class in self.classes().await?.iter().flatten() {
            for t in class_shapes(class) {
                out.insert(t.name.clone(), t);
            }
        }
        // Read a page at a time and folded: a VM's shape and the name of its root disk
        // (its first VirtualDisk), then those disks' sizes — a namespace of thousands of
        // VMs is never held whole (issue 70: the discoverer's memory).
        struct Shape {
            name: String,
            cpu: u32,
            memory: u64,
            root: Option<String>,
        }
        let mut shapes = Vec::new();
        let vms = self.parent.vms();
        // With the cluster's UUID, its VMs alone (capdvp and the layouts label each):
        // another cluster's VMs in the namespace are not this cluster's types.
        let ours = self
            .parent
            .cluster
            .as_ref()
            .map(|uuid| format!("{CLUSTER_UUID_LABEL}={uuid}"));
        let mut token: Option<String> = None;
        loop {
            let (page, next) = self
                .parent
                .list_page(
                    "virtualmachine_list",
                    &vms,
                    ours.as_deref(),
                    PAGE,
                    token.as_deref(),
                )
                .await?;
            shapes.extend(page.iter().map(|vm| {
                Shape {
                    name: instance_type(vm),
                    cpu: vm.spec.cpu.as_ref().map(|c| c.cores).unwrap_or(0),
                    memory: vm
                        .spec
                        .memory
                        .as_ref()
                        .and_then(|m| api::quantity_bytes(&m.size.0))
                        .unwrap_or(0),
                    root: vm
                        .spec
                        .block_device_refs
                        .iter()
                        .find(|r| r.kind == "VirtualDisk")
                        .map(|r| r.name.clone()),
                }
            }));
            match next {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        let roots: std::collections::BTreeSet<&str> =
            shapes.iter().filter_map(|s| s.root.as_deref()).collect();
        let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
        let disks = self.parent.disks();
        let size_of = |d: &api::VirtualDisk| {
            d.status
                .as_ref()
                .and_then(|s| s.capacity.as_deref())
                .and_then(api::quantity_bytes)
                .unwrap_or(0)
        };
        if ours.is_some() {
            // This cluster's root disks, each read alone: as many reads as its VMs.
            for root in &roots {
                if let Some(d) = self.parent.get_opt("virtualdisk_get", &disks, root).await? {
                    sizes.insert(d.name_any(), size_of(&d));
                }
            }
        } else {
            // Without the UUID the VMs are the namespace's: its disks read a page at a time.
            let mut token: Option<String> = None;
            loop {
                let (page, next) = self
                    .parent
                    .list_page("virtualdisk_list", &disks, None, PAGE, token.as_deref())
                    .await?;
                for d in page
                    .iter()
                    .filter(|d| roots.contains(d.name_any().as_str()))
                {
                    sizes.insert(d.name_any(), size_of(d));
                }
                match next {
                    Some(next) => token = Some(next),
                    None => break,
                }
            }
        }
        for shape in shapes {
            let root = shape
                .root
                .as_ref()
                .and_then(|r| sizes.get(r))
                .copied()
                .unwrap_or(0);
            let from_class = out.get(&shape.name).is_some_and(|t| t.root_disk_gib == 0);
            if from_class || !out.contains_key(&shape.name) {
                out.insert(
                    shape.name.clone(),
                    InstanceType {
                        name: shape.name,
                        cpu: shape.cpu,
                        memory_mib: shape.memory >> 20,
                        root_disk_gib: root.div_ceil(1 << 30),
                    },
                );
            }
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
        ClusterDisk::all_of(&self.disks).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(spec: serde_json::Value, phase: Option<&str>) -> api::VirtualMachineClass {
        let mut doc = json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2",
            "kind": "VirtualMachineClass",
            "metadata": {"name": "generic"},
            "spec": spec,
        });
        if let Some(p) = phase {
            doc["status"] = json!({"phase": p});
        }
        serde_json::from_value(doc).unwrap()
    }

    fn names(c: &api::VirtualMachineClass) -> Vec<String> {
        class_shapes(c).into_iter().map(|t| t.name).collect()
    }

    #[test]
    fn a_class_offers_each_core_count_with_the_least_memory_it_allows() {
        // Deckhouse's default `generic` class: 1–4 cores at 1–8Gi per core, then 5–8.
        let generic = class(
            json!({"sizingPolicies": [
                {"cores": {"min": 1, "max": 4}, "memory": {"min": "1Gi", "perCore": {"min": "1Gi", "max": "8Gi"}}},
                {"cores": {"min": 5, "max": 8}, "memory": {"perCore": {"min": "1Gi"}, "step": "512Mi"}},
            ]}),
            Some("Ready"),
        );
        assert_eq!(
            names(&generic),
            [
                "generic-1c-1gi",
                "generic-2c-2gi",
                "generic-3c-3gi",
                "generic-4c-4gi",
                "generic-5c-5gi",
                "generic-6c-6gi",
                "generic-7c-7gi",
                "generic-8c-8gi"
            ]
        );
        let four = &class_shapes(&generic)[3];
        assert_eq!(
            (four.cpu, four.memory_mib, four.root_disk_gib),
            (4, 4096, 0)
        );
        // A floor above perCore × cores, a step rounding up, integers as bytes.
        let stepped = class(
            json!({"sizingPolicies": [
                {"cores": {"min": 2, "max": 10, "step": 4},
                 "memory": {"min": 3221225472u64, "step": "2Gi"}},
            ]}),
            None,
        );
        assert_eq!(
            names(&stepped),
            ["generic-2c-4gi", "generic-6c-4gi", "generic-10c-4gi"]
        );
    }

    #[test]
    fn a_wide_class_is_thinned_and_one_that_cannot_run_offers_nothing() {
        let wide = class(
            json!({"sizingPolicies": [
                {"cores": {"min": 1, "max": 1024}, "memory": {"perCore": {"min": "1Gi"}}},
            ]}),
            Some("Ready"),
        );
        let shapes = class_shapes(&wide);
        assert!(
            shapes.len() <= SHAPES_PER_POLICY as usize + 1,
            "{}",
            shapes.len()
        );
        assert_eq!(shapes.first().unwrap().cpu, 1);
        assert_eq!(shapes.last().unwrap().cpu, 1024, "the largest is kept");
        let pending = class(
            json!({"sizingPolicies": [
                {"cores": {"min": 1, "max": 2}, "memory": {"min": "1Gi"}}]}),
            Some("Pending"),
        );
        assert!(class_shapes(&pending).is_empty());
        // No memory bound: no shape can be named.
        let unbounded = class(
            json!({"sizingPolicies": [{"cores": {"min": 1, "max": 2}}]}),
            Some("Ready"),
        );
        assert!(class_shapes(&unbounded).is_empty());
    }
}
