//! `deploy/` rendered and read back as typed Kubernetes objects: every object must parse
//! as the type its apiVersion and kind claim and serialize back to exactly what was
//! written, so a misspelt or misplaced field (which serde would otherwise skip) fails.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::kustomize::{render, Rendered};

/// The repository's `deploy/` directory.
pub fn deploy_dir() -> PathBuf {
    crate::package_dir().join("../deploy")
}

/// The directories under `deploy/<group>` (`base` or `overlays`), sorted.
pub fn kustomizations(group: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(deploy_dir().join(group))
        .expect("deploy dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("kustomization.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// A workload's pod: where it comes from and what it runs.
#[derive(Debug, Clone)]
pub struct Pod {
    pub kind: &'static str,
    pub name: String,
    pub namespace: String,
    pub labels: std::collections::BTreeMap<String, String>,
    /// The workload's selector (`matchLabels`).
    pub selector: std::collections::BTreeMap<String, String>,
    pub spec: PodSpec,
}

impl Pod {
    pub fn container(&self, name: &str) -> &Container {
        self.spec
            .containers
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{} {} has no container {name}", self.kind, self.name))
    }
}

#[derive(Debug, Default)]
pub struct Manifests {
    pub dir: PathBuf,
    pub all: Vec<Rendered>,
    pub deployments: Vec<Deployment>,
    pub daemon_sets: Vec<DaemonSet>,
    pub services: Vec<Service>,
    pub service_accounts: Vec<ServiceAccount>,
    pub secrets: Vec<Secret>,
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
    pub csi_drivers: Vec<CSIDriver>,
    pub storage_classes: Vec<StorageClass>,
    pub crds: Vec<CustomResourceDefinition>,
    pub namespaces: Vec<Namespace>,
}

/// Parses `r` as `T` and insists that `T` serializes back to the same JSON.
fn typed<T: DeserializeOwned + Serialize>(r: &Rendered) -> Result<T, String> {
    let what = format!("{} {} ({})", r.kind(), r.name(), r.source.display());
    let t: T = serde_json::from_value(r.object.clone()).map_err(|e| format!("{what}: {e}"))?;
    let back = serde_json::to_value(&t).map_err(|e| format!("{what}: {e}"))?;
    match first_difference(&r.object, &back, String::new()) {
        None => Ok(t),
        Some(path) => Err(format!(
            "{what}: `{path}` is not what the API type reads (unknown field, or a wrong type)"
        )),
    }
}

fn first_difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x.keys().chain(y.keys()).find_map(|k| {
            first_difference(
                x.get(k).unwrap_or(&Value::Null),
                y.get(k).unwrap_or(&Value::Null),
                format!("{path}.{k}"),
            )
        }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(if path.is_empty() { ".".into() } else { path }),
    }
}

impl Manifests {
    /// Renders `dir` and parses every object as its API type.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let all = render(dir)?;
        let mut m = Self {
            dir: dir.to_owned(),
            ..Default::default()
        };
        for r in &all {
            let api_version = r.object["apiVersion"].as_str().unwrap_or_default();
            match (api_version, r.kind()) {
                ("apps/v1", "Deployment") => m.deployments.push(typed(r)?),
                ("apps/v1", "DaemonSet") => m.daemon_sets.push(typed(r)?),
                ("v1", "Service") => m.services.push(typed(r)?),
                ("v1", "ServiceAccount") => m.service_accounts.push(typed(r)?),
                ("v1", "Secret") => m.secrets.push(typed(r)?),
                ("rbac.authorization.k8s.io/v1", "ClusterRole") => m.cluster_roles.push(typed(r)?),
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                    m.cluster_role_bindings.push(typed(r)?)
                }
                ("rbac.authorization.k8s.io/v1", "Role") => m.roles.push(typed(r)?),
                ("rbac.authorization.k8s.io/v1", "RoleBinding") => m.role_bindings.push(typed(r)?),
                ("storage.k8s.io/v1", "CSIDriver") => m.csi_drivers.push(typed(r)?),
                ("storage.k8s.io/v1", "StorageClass") => m.storage_classes.push(typed(r)?),
                ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => m.crds.push(typed(r)?),
                ("v1", "Namespace") => m.namespaces.push(typed(r)?),
                (v, k) => {
                    return Err(format!(
                        "{}: {v} {k} is not an API type these tests know",
                        r.source.display()
                    ))
                }
            }
        }
        m.all = all;
        Ok(m)
    }

    /// Every workload's pod.
    pub fn pods(&self) -> Vec<Pod> {
        let deployments = self.deployments.iter().map(|d| {
            let spec = d.spec.as_ref().expect("deployment spec");
            ("Deployment", &d.metadata, &spec.template, &spec.selector)
        });
        let daemon_sets = self.daemon_sets.iter().map(|d| {
            let spec = d.spec.as_ref().expect("daemonset spec");
            ("DaemonSet", &d.metadata, &spec.template, &spec.selector)
        });
        deployments
            .chain(daemon_sets)
            .map(|(kind, meta, template, selector)| Pod {
                kind,
                name: meta.name.clone().unwrap_or_default(),
                namespace: meta.namespace.clone().unwrap_or_default(),
                labels: template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.clone())
                    .unwrap_or_default(),
                selector: selector.match_labels.clone().unwrap_or_default(),
                spec: template.spec.clone().expect("pod spec"),
            })
            .collect()
    }

    pub fn pod(&self, name: &str) -> Pod {
        self.pods()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{}: no workload {name}", self.dir.display()))
    }
}

/// The value of `--flag=value` in a container's args.
pub fn flag(c: &Container, name: &str) -> Option<String> {
    let prefix = format!("--{name}=");
    c.args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
}

/// Whether a container's args carry `--flag` (bare) or `--flag=…`.
pub fn has_flag(c: &Container, name: &str) -> bool {
    let bare = format!("--{name}");
    c.args
        .iter()
        .flatten()
        .any(|a| *a == bare || a.starts_with(&format!("{bare}=")))
}

/// A literal environment value of a container.
pub fn env(c: &Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// The field path an environment variable is taken from (`spec.nodeName`).
pub fn env_field(c: &Container, name: &str) -> Option<String> {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone())
}

/// A memory quantity (`64Mi`, `1Gi`, `512Ki`, bytes) in KiB; panics on what our manifests
/// never use (decimal suffixes, exponents), so a new spelling is noticed.
pub fn memory_kib(q: &str) -> u64 {
    let (n, unit) = q.split_at(q.find(|c: char| c.is_alphabetic()).unwrap_or(q.len()));
    let n: u64 = n.parse().unwrap_or_else(|_| panic!("quantity {q}"));
    match unit {
        "Ki" => n,
        "Mi" => n << 10,
        "Gi" => n << 20,
        "" => n >> 10,
        other => panic!("unit {other} in {q}"),
    }
}
