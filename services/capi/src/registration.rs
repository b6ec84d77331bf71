//! The Secret through which a cloud registers with Deckhouse's node-manager,
//! `kube-system/d8-node-manager-cloud-provider` (and, for DVP, its named twin
//! `d8-node-manager-cloud-provider-dvp`): which instance class and Cluster API kinds to
//! render, the region and zones, the SSH key, and a per-cloud connection object — the
//! fields and values of the cloud-provider modules' `registration.yaml`. Credentials go in
//! only where upstream puts them (zVirt's `zvirt` object; DVP's carries none). Rendered
//! from the provider's own configuration and what the installer recorded
//! (`d8-provider-cluster-configuration`), applied when it differs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::crd::Family;
use crate::Result;

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "d8-node-manager-cloud-provider";
/// What the installer recorded: the cluster configuration and the discovery data.
pub const INSTALLER_SECRET: &str = "d8-provider-cluster-configuration";
const FIELD_MANAGER: &str = "overcast-capi";

/// What the Secret is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    pub family: Family,
    /// The zones node-manager may place machines in (`["default"]` when none are known).
    pub zones: Vec<String>,
    pub ssh_public_key: Option<String>,
    /// The per-cloud object (`zvirt`, `dvp`).
    pub connection: Value,
}

/// zVirt's connection object: the engine and the credentials capz's machinery reads.
pub fn zvirt_connection(
    config: &overcast_cloud_zvirt::Config,
    ssh_public_key: Option<&str>,
) -> Value {
    json!({
        "sshPublicKey": ssh_public_key.unwrap_or_default(),
        "server": config.api_url,
        "username": config.username,
        "password": config.password,
        "insecure": config.insecure,
    })
}

/// DVP's connection object: only the labels every VM gets, when the installer set them.
pub fn dvp_connection(additional_vm_labels: Option<Value>) -> Value {
    match additional_vm_labels {
        Some(labels) if !labels.is_null() => json!({"additionalVMLabels": labels}),
        _ => json!({}),
    }
}

/// The Secrets, in the order they are written.
pub fn render(r: &Registration) -> Vec<Secret> {
    let zones = if r.zones.is_empty() {
        vec!["default".to_owned()]
    } else {
        r.zones.clone()
    };
    let mut data: BTreeMap<&str, String> = BTreeMap::new();
    data.insert("type", r.family.provider().to_owned());
    // Neither cloud has regions; upstream names one.
    data.insert("region", "default".to_owned());
    data.insert("zones", serde_json::to_string(&zones).unwrap_or_default());
    data.insert("machineClassKind", String::new());
    let group = "infrastructure.cluster.x-k8s.io";
    let mut labels = BTreeMap::new();
    let mut names = vec![NAME.to_owned()];
    match r.family {
        Family::Zvirt => {
            data.insert("instanceClassKind", "ZvirtInstanceClass".into());
            data.insert("capiClusterKind", "ZvirtCluster".into());
            data.insert("capiClusterAPIVersion", format!("{group}/v1"));
            data.insert("capiClusterName", "zvirt".into());
            data.insert("capiMachineTemplateKind", "ZvirtMachineTemplate".into());
            data.insert("capiMachineTemplateAPIVersion", format!("{group}/v1"));
            data.insert("sshPublicKey", r.ssh_public_key.clone().unwrap_or_default());
        }
        Family::Dvp => {
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
    }
    let key = r.family.provider();
    data.insert(
        key,
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

/// What the installer recorded: (zones, SSH public key, DVP's additional VM labels).
pub async fn installer_facts(
    client: &Client,
) -> Result<(Vec<String>, Option<String>, Option<Value>)> {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let Some(secret) = api.get_opt(INSTALLER_SECRET).await? else {
        return Ok((Vec::new(), None, None));
    };
    let data = secret.data.unwrap_or_default();
    let text = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    let discovery: Value = text("cloud-provider-discovery-data.json")
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let zones = discovery["zones"]
        .as_array()
        .map(|z| {
            z.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let configuration: Value = text("cloud-provider-cluster-configuration.yaml")
        .and_then(|t| serde_saphyr::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let ssh = configuration["sshPublicKey"].as_str().map(str::to_owned);
    let labels = configuration["provider"]["additionalVMLabels"].clone();
    Ok((zones, ssh, (!labels.is_null()).then_some(labels)))
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
            family: Family::Zvirt,
            zones: vec![],
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
            family: Family::Dvp,
            zones: vec!["zone-a".into(), "zone-b".into()],
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
}
