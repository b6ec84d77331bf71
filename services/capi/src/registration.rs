//! The Secret through which a cloud registers with Deckhouse's node-manager,
//! `kube-system/d8-node-manager-cloud-provider` (and, for DVP, its named twin
//! `d8-node-manager-cloud-provider-dvp`): which instance class, machine class and Cluster
//! API kinds to render, the region and zones, the SSH key, and a per-cloud object — the
//! fields and values of the cloud-provider modules' `registration.yaml`. Credentials go in
//! only where upstream puts them (zVirt's `zvirt`, OpenStack's `openstack.connection`,
//! vSphere's `vsphere`; DVP's carries none). Rendered from the provider's own
//! configuration and what the installer recorded (`d8-provider-cluster-configuration`),
//! applied when it differs.

mod connection;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

pub use connection::{
    dvp_connection, openstack_connection, vsphere_connection, zvirt_connection, VcenterLogin,
};

use crate::crd::Family;
use crate::Result;

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "d8-node-manager-cloud-provider";
/// What the installer recorded: the cluster configuration and the discovery data.
pub const INSTALLER_SECRET: &str = "d8-provider-cluster-configuration";
const FIELD_MANAGER: &str = "overcast-capi";

/// The cloud that registers: node-manager's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    Zvirt,
    Dvp,
    Openstack,
    Vsphere,
    /// Overcast's own: no Deckhouse module has it, so no instance or machine class;
    /// node-manager learns the type, region and zones (its nodes are static).
    Local,
}

impl Registered {
    pub fn type_name(self) -> &'static str {
        match self {
            Self::Zvirt => "zvirt",
            Self::Dvp => "dvp",
            Self::Openstack => "openstack",
            Self::Vsphere => "vsphere",
            Self::Local => "local",
        }
    }
}

impl From<Family> for Registered {
    fn from(f: Family) -> Self {
        match f {
            Family::Zvirt => Self::Zvirt,
            Family::Dvp => Self::Dvp,
        }
    }
}

/// What the Secret is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    pub cloud: Registered,
    /// The zones node-manager may place machines in. zVirt and DVP write `["default"]`
    /// when none are known, as their modules do; the others write what they are given.
    pub zones: Vec<String>,
    /// `region`: OpenStack's own; `default` for the clouds without regions. vSphere's
    /// module writes none (its region is inside the `vsphere` object).
    pub region: Option<String>,
    pub ssh_public_key: Option<String>,
    /// The per-cloud object (`zvirt`, `dvp`, `openstack`, `vsphere`, `local`).
    pub connection: Value,
}

/// What the installer recorded in `d8-provider-cluster-configuration`: the provider's
/// cluster configuration (`cloud-provider-cluster-configuration.yaml`) and the discovery
/// data (`cloud-provider-discovery-data.json`); `null` where absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstallerFacts {
    pub configuration: Value,
    pub discovery: Value,
}

impl InstallerFacts {
    /// The discovery data's zones.
    pub fn zones(&self) -> Vec<String> {
        strings(&self.discovery["zones"])
    }

    pub fn ssh_public_key(&self) -> Option<String> {
        self.configuration["sshPublicKey"]
            .as_str()
            .map(str::to_owned)
    }

    /// DVP's `provider.additionalVMLabels`.
    pub fn additional_vm_labels(&self) -> Option<Value> {
        let labels = &self.configuration["provider"]["additionalVMLabels"];
        (!labels.is_null()).then(|| labels.clone())
    }
}

/// The strings of a JSON list (none when it is not one).
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|z| {
            z.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The Secrets, in the order they are written.
pub fn render(r: &Registration) -> Vec<Secret> {
    let zones = match r.cloud {
        Registered::Zvirt | Registered::Dvp if r.zones.is_empty() => vec!["default".to_owned()],
        _ => r.zones.clone(),
    };
    let mut data: BTreeMap<&str, String> = BTreeMap::new();
    data.insert("type", r.cloud.type_name().to_owned());
    if let Some(region) = &r.region {
        data.insert("region", region.clone());
    }
    data.insert("zones", serde_json::to_string(&zones).unwrap_or_default());
    let group = "infrastructure.cluster.x-k8s.io";
    let mut labels = BTreeMap::new();
    let mut names = vec![NAME.to_owned()];
    match r.cloud {
        Registered::Zvirt => {
            data.insert("machineClassKind", String::new());
            data.insert("instanceClassKind", "ZvirtInstanceClass".into());
            data.insert("capiClusterKind", "ZvirtCluster".into());
            data.insert("capiClusterAPIVersion", format!("{group}/v1"));
            data.insert("capiClusterName", "zvirt".into());
            data.insert("capiMachineTemplateKind", "ZvirtMachineTemplate".into());
            data.insert("capiMachineTemplateAPIVersion", format!("{group}/v1"));
            data.insert("sshPublicKey", r.ssh_public_key.clone().unwrap_or_default());
        }
        Registered::Dvp => {
            data.insert("machineClassKind", String::new());
            data.insert("instanceClassAPIVersion", "v1alpha1".into());
            data.insert("instanceClassKind", "DVPInstanceClass".into());
            data.insert("capiClusterKind", "DeckhouseCluster".into());
            data.insert("capiClusterAPIVersion", format!("{group}/v1alpha1"));
            data.insert("capiClusterAPIGroup", group.into());
            data.insert("capiClusterName", "dvp".into());
            data.insert("capiMachineTemplateKind", "DeckhouseMachineTemplate".into());
            data.insert("capiMachineTemplateAPIVersion", format!("{group}/v1alpha1"));
            data.insert("capiMachineTemplateAPIGroup", group.into());
            if let Some(key) = r.ssh_public_key.as_ref().filter(|k| !k.is_empty()) {
                data.insert("sshPublicKey", key.clone());
            }
            labels.insert(
                "cloud-provider.deckhouse.io/registration".to_owned(),
                String::new(),
            );
            labels.insert(
                "cloud-provider.deckhouse.io/name".to_owned(),
                "dvp".to_owned(),
            );
            names.push(format!("{NAME}-dvp"));
        }
        // Machines through machine-controller-manager's classes, not Cluster API.
        Registered::Openstack => {
            data.insert("instanceClassKind", "OpenStackInstanceClass".into());
            data.insert("machineClassKind", "OpenStackMachineClass".into());
        }
        Registered::Vsphere => {
            data.insert("instanceClassKind", "VsphereInstanceClass".into());
            data.insert("machineClassKind", "VsphereMachineClass".into());
        }
        Registered::Local => {
            data.insert("instanceClassKind", String::new());
            data.insert("machineClassKind", String::new());
        }
    }
    data.insert(
        r.cloud.type_name(),
        serde_json::to_string(&r.connection).unwrap_or_default(),
    );
    let data: BTreeMap<String, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
        .collect();
    names
        .into_iter()
        .map(|name| Secret {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(NAMESPACE.to_owned()),
                labels: (!labels.is_empty()).then(|| labels.clone()),
                ..Default::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data.clone()),
            ..Default::default()
        })
        .collect()
}

/// What the installer recorded (nothing when it recorded nothing: a cluster not made by
/// dhctl).
pub async fn installer_facts(client: &Client) -> Result<InstallerFacts> {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let Some(secret) = api.get_opt(INSTALLER_SECRET).await? else {
        return Ok(InstallerFacts::default());
    };
    let data = secret.data.unwrap_or_default();
    let text = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    Ok(InstallerFacts {
        configuration: text("cloud-provider-cluster-configuration.yaml")
            .and_then(|t| serde_saphyr::from_str(&t).ok())
            .unwrap_or(Value::Null),
        discovery: text("cloud-provider-discovery-data.json")
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null),
    })
}

/// Writes the Secrets that differ from `want`; how many were written.
pub async fn publish(client: &Client, want: &[Secret]) -> Result<usize> {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let mut written = 0;
    for secret in want {
        let name = secret.metadata.name.clone().unwrap_or_default();
        if let Some(have) = api.get_opt(&name).await? {
            let same_labels = secret
                .metadata
                .labels
                .iter()
                .flatten()
                .all(|(k, v)| have.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v));
            if have.data == secret.data && same_labels {
                continue;
            }
        }
        let mut body = serde_json::to_value(secret).unwrap_or_default();
        body["apiVersion"] = json!("v1");
        body["kind"] = json!("Secret");
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?;
        written += 1;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(s: &Secret, k: &str) -> Option<String> {
        s.data
            .as_ref()?
            .get(k)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    }

    #[test]
    fn zvirt_registers_as_its_module_does() {
        let config = overcast_cloud_zvirt::Config {
            api_url: "https://engine/ovirt-engine/api".into(),
            username: "admin@internal".into(),
            password: "s3cret".into(),
            insecure: true,
            ca_bundle: None,
            unknown_keys: Vec::new(),
        };
        let r = Registration {
            cloud: Registered::Zvirt,
            zones: vec![],
            region: Some("default".into()),
            ssh_public_key: Some("ssh-ed25519 AAAA".into()),
            connection: zvirt_connection(&config, Some("ssh-ed25519 AAAA")),
        };
        let secrets = render(&r);
        assert_eq!(secrets.len(), 1);
        let s = &secrets[0];
        assert_eq!(s.metadata.name.as_deref(), Some(NAME));
        assert_eq!(field(s, "type").as_deref(), Some("zvirt"));
        assert_eq!(field(s, "region").as_deref(), Some("default"));
        assert_eq!(field(s, "zones").as_deref(), Some("[\"default\"]"));
        assert_eq!(
            field(s, "instanceClassKind").as_deref(),
            Some("ZvirtInstanceClass")
        );
        assert_eq!(field(s, "machineClassKind").as_deref(), Some(""));
        assert_eq!(field(s, "capiClusterKind").as_deref(), Some("ZvirtCluster"));
        assert_eq!(
            field(s, "capiMachineTemplateAPIVersion").as_deref(),
            Some("infrastructure.cluster.x-k8s.io/v1")
        );
        assert_eq!(field(s, "capiClusterName").as_deref(), Some("zvirt"));
        let zvirt: Value = serde_json::from_str(&field(s, "zvirt").unwrap()).unwrap();
        assert_eq!(
            zvirt,
            json!({"sshPublicKey": "ssh-ed25519 AAAA", "server": "https://engine/ovirt-engine/api",
                   "username": "admin@internal", "password": "s3cret", "insecure": true})
        );
    }

    #[test]
    fn dvp_registers_twice_with_its_labels_and_no_credentials() {
        let r = Registration {
            cloud: Registered::Dvp,
            zones: vec!["zone-a".into(), "zone-b".into()],
            region: Some("default".into()),
            ssh_public_key: None,
            connection: dvp_connection(Some(json!({"team": "infra"}))),
        };
        let secrets = render(&r);
        let names: Vec<_> = secrets
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        assert_eq!(names, [NAME, "d8-node-manager-cloud-provider-dvp"]);
        for s in &secrets {
            assert_eq!(
                field(s, "zones").as_deref(),
                Some("[\"zone-a\",\"zone-b\"]")
            );
            assert_eq!(
                field(s, "capiClusterKind").as_deref(),
                Some("DeckhouseCluster")
            );
            assert_eq!(
                field(s, "instanceClassAPIVersion").as_deref(),
                Some("v1alpha1")
            );
            assert_eq!(field(s, "sshPublicKey"), None);
            assert_eq!(
                field(s, "dvp").as_deref(),
                Some("{\"additionalVMLabels\":{\"team\":\"infra\"}}")
            );
            let labels = s.metadata.labels.clone().unwrap();
            assert_eq!(labels["cloud-provider.deckhouse.io/name"], "dvp");
        }
    }

    #[test]
    fn openstack_vsphere_and_local_name_their_classes_as_their_modules_do() {
        let r = |cloud, region: Option<&str>| Registration {
            cloud,
            zones: vec!["z1".into()],
            region: region.map(str::to_owned),
            ssh_public_key: None,
            connection: json!({"k": "v"}),
        };
        let os = &render(&r(Registered::Openstack, Some("RegionOne")))[0];
        assert_eq!(field(os, "type").as_deref(), Some("openstack"));
        assert_eq!(field(os, "region").as_deref(), Some("RegionOne"));
        assert_eq!(field(os, "zones").as_deref(), Some("[\"z1\"]"));
        assert_eq!(
            field(os, "instanceClassKind").as_deref(),
            Some("OpenStackInstanceClass")
        );
        assert_eq!(
            field(os, "machineClassKind").as_deref(),
            Some("OpenStackMachineClass")
        );
        assert_eq!(field(os, "openstack").as_deref(), Some("{\"k\":\"v\"}"));
        assert_eq!(field(os, "capiClusterKind"), None);
        let vs = &render(&r(Registered::Vsphere, None))[0];
        assert_eq!(field(vs, "type").as_deref(), Some("vsphere"));
        assert_eq!(
            field(vs, "region"),
            None,
            "vSphere's module writes no region key"
        );
        assert_eq!(
            field(vs, "instanceClassKind").as_deref(),
            Some("VsphereInstanceClass")
        );
        assert_eq!(
            field(vs, "machineClassKind").as_deref(),
            Some("VsphereMachineClass")
        );
        assert!(field(vs, "vsphere").is_some());
        let no_zones = Registration {
            zones: vec![],
            ..r(Registered::Vsphere, None)
        };
        assert_eq!(field(&render(&no_zones)[0], "zones").as_deref(), Some("[]"));
        let local = &render(&r(Registered::Local, Some("local")))[0];
        assert_eq!(field(local, "type").as_deref(), Some("local"));
        assert_eq!(field(local, "instanceClassKind").as_deref(), Some(""));
        assert_eq!(field(local, "local").as_deref(), Some("{\"k\":\"v\"}"));
    }
}
