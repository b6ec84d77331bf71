//! The DVP configuration: the parent cluster's kubeconfig and the namespace this
//! cluster's VMs are in. Read from the `--cloud-config` file (YAML: `namespace`, and
//! `kubeconfig` as text or `kubeconfigDataBase64`, as Deckhouse's DVPClusterConfiguration
//! carries it) and from the variables upstream's cloud-provider-dvp reads
//! (`DVP_KUBERNETES_CONFIG_BASE64`, `DVP_NAMESPACE`, `CLUSTER_UUID`), which win over the
//! file. The cluster's UUID (Deckhouse's `d8-cluster-uuid`) is optional: with it, the
//! volumes this cluster makes are labelled as dvp-csi-driver labels them and listings
//! read this cluster's disks and VMs only (without it, the namespace's every one).

use std::path::Path;

use base64::Engine as _;
use kube::config::Kubeconfig;
use overcast_cloud::config::{read_optional, serde_fields, yaml_and_unknown_keys, FileKeys};
use overcast_cloud::ConfigError;
use serde::Deserialize;

const CLOUD: &str = "dvp";
pub const ENV_KUBECONFIG: &str = "DVP_KUBERNETES_CONFIG_BASE64";
pub const ENV_NAMESPACE: &str = "DVP_NAMESPACE";
/// dvp-common's variable (`config.NewCloudConfig`), set from `d8-cluster-uuid`.
pub const ENV_CLUSTER_UUID: &str = "CLUSTER_UUID";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    namespace: Option<String>,
    kubeconfig: Option<String>,
    kubeconfig_data_base64: Option<String>,
    #[serde(rename = "clusterUUID")]
    cluster_uuid: Option<String>,
}

/// What the file and the variables take, for the configuration reference.
pub fn file_keys() -> FileKeys {
    FileKeys {
        format: "YAML (`kubeconfig` as text, or `kubeconfigDataBase64`)",
        sections: vec![(String::new(), serde_fields::<File>().to_vec())],
        env: vec![
            (ENV_KUBECONFIG, "kubeconfigDataBase64"),
            (ENV_NAMESPACE, "namespace"),
            (ENV_CLUSTER_UUID, "clusterUUID"),
        ],
    }
}

/// A complete DVP configuration.
#[derive(Clone)]
pub struct Config {
    /// The parent's namespace holding this cluster's VMs.
    pub namespace: String,
    /// The parent cluster's kubeconfig (its credentials: never logged).
    pub kubeconfig: Kubeconfig,
    /// This cluster's UUID, the value of `dvp.deckhouse.io/cluster-uuid` on its VMs and
    /// disks in the parent.
    pub cluster_uuid: Option<String>,
    /// Keys of the file this version does not know (the caller warns).
    pub unknown_keys: Vec<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("namespace", &self.namespace)
            .field("cluster_uuid", &self.cluster_uuid)
            .field("kubeconfig", &"<redacted>")
            .finish()
    }
}

impl Config {
    /// Reads `path` (absent or missing is fine when the variables say it all) and
    /// `env`; names everything missing at once.
    pub fn load(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let text = read_optional(CLOUD, path)?;
        let (file, unknown_keys): (File, _) = yaml_and_unknown_keys(CLOUD, path, text.as_deref())?;
        let nonempty = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        let namespace = nonempty(env(ENV_NAMESPACE)).or(nonempty(file.namespace));
        let kubeconfig = match (
            nonempty(env(ENV_KUBECONFIG)),
            nonempty(file.kubeconfig_data_base64),
            nonempty(file.kubeconfig),
        ) {
            (Some(b64), _, _) => Some(decode(&b64, ENV_KUBECONFIG, path)?),
            (None, Some(b64), _) => Some(decode(&b64, "kubeconfigDataBase64", path)?),
            (None, None, Some(text)) => Some(text),
            (None, None, None) => None,
        };
        let cluster_uuid = nonempty(env(ENV_CLUSTER_UUID))
            .or(nonempty(file.cluster_uuid))
            .map(|u| u.trim().to_owned());
        if let Some(u) = cluster_uuid.as_deref() {
            // A label's value on every disk and VM selected by it.
            if !overcast_cloud::is_label_value(u) {
                return Err(ConfigError::invalid(
                    CLOUD,
                    path,
                    format!("the cluster UUID {u:?} ({ENV_CLUSTER_UUID}, or clusterUUID) is no label value"),
                ));
            }
        }
        let mut missing = Vec::new();
        if namespace.is_none() {
            missing.push(format!(
                "the parent namespace of this cluster's VMs (namespace, or {ENV_NAMESPACE})"
            ));
        }
        let kubeconfig = match kubeconfig {
            None => {
                missing.push(format!(
                    "the parent cluster's kubeconfig (kubeconfig, kubeconfigDataBase64, or {ENV_KUBECONFIG})"
                ));
                None
            }
            Some(text) => {
                let k = Kubeconfig::from_yaml(&text).map_err(|e| {
                    ConfigError::invalid(
                        CLOUD,
                        path,
                        format!("the parent kubeconfig does not parse: {e}"),
                    )
                })?;
                if k.clusters.is_empty() {
                    missing.push("a cluster (server address) in the parent kubeconfig".into());
                }
                if k.auth_infos.is_empty() {
                    missing
                        .push("a user (its token or certificate) in the parent kubeconfig".into());
                }
                Some(k)
            }
        };
        match (namespace, kubeconfig) {
            (Some(namespace), Some(kubeconfig)) if missing.is_empty() => Ok(Self {
                namespace,
                kubeconfig,
                cluster_uuid,
                unknown_keys,
            }),
            _ => Err(ConfigError::Missing {
                cloud: CLOUD,
                file: path.map(Path::to_path_buf),
                missing,
            }),
        }
    }
}

fn decode(b64: &str, from: &str, path: Option<&Path>) -> Result<String, ConfigError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| ConfigError::invalid(CLOUD, path, format!("{from} is not base64: {e}")))?;
    String::from_utf8(bytes)
        .map_err(|_| ConfigError::invalid(CLOUD, path, format!("{from} is not UTF-8 text")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: parent\n  cluster: {server: 'https://parent:6443'}\nusers:\n- name: sa\n  user: {token: s3cr3t-token}\ncontexts:\n- name: c\n  context: {cluster: parent, user: sa}\ncurrent-context: c\n";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn nothing_given_names_both_settings_and_where_they_come_from() {
        let e = Config::load(None, &no_env).unwrap_err();
        assert!(e.is_missing());
        let text = e.to_string();
        assert!(text.contains("namespace, or DVP_NAMESPACE"), "{text}");
        assert!(text.contains("DVP_KUBERNETES_CONFIG_BASE64"), "{text}");
    }

    #[test]
    fn the_file_or_upstreams_variables_configure_it_and_no_secret_is_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud-config");
        let indented: String = KUBECONFIG.lines().map(|l| format!("  {l}\n")).collect();
        std::fs::write(
            &path,
            format!("namespace: vms\nextra: 1\nkubeconfig: |\n{indented}"),
        )
        .unwrap();
        let c = Config::load(Some(&path), &no_env).unwrap();
        assert_eq!(c.namespace, "vms");
        assert_eq!(c.unknown_keys, vec!["extra".to_owned()]);
        assert_eq!(c.kubeconfig.clusters[0].name, "parent");
        assert!(!format!("{c:?}").contains("s3cr3t"));

        let b64 = base64::engine::general_purpose::STANDARD.encode(KUBECONFIG);
        let env = move |k: &str| match k {
            ENV_KUBECONFIG => Some(b64.clone()),
            ENV_NAMESPACE => Some("from-env".into()),
            _ => None,
        };
        let c = Config::load(Some(&dir.path().join("absent")), &env).unwrap();
        assert_eq!(c.namespace, "from-env");
        assert_eq!(c.cluster_uuid, None);
    }

    #[test]
    fn the_cluster_uuid_comes_from_upstreams_variable_or_the_file_and_must_be_a_label_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud-config");
        let indented: String = KUBECONFIG.lines().map(|l| format!("  {l}\n")).collect();
        let file = |uuid: &str| {
            std::fs::write(
                &path,
                format!("namespace: vms\nclusterUUID: '{uuid}'\nkubeconfig: |\n{indented}"),
            )
            .unwrap()
        };
        file("6b4e0b5c-1d0a-4f6e-9a43-2f4b7f0c9d11");
        let c = Config::load(Some(&path), &no_env).unwrap();
        assert_eq!(
            c.cluster_uuid.as_deref(),
            Some("6b4e0b5c-1d0a-4f6e-9a43-2f4b7f0c9d11")
        );
        assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
        let env = |k: &str| (k == ENV_CLUSTER_UUID).then(|| "from-env".to_owned());
        assert_eq!(
            Config::load(Some(&path), &env)
                .unwrap()
                .cluster_uuid
                .as_deref(),
            Some("from-env")
        );
        file("a b");
        let e = Config::load(Some(&path), &no_env).unwrap_err().to_string();
        assert!(
            e.contains("no label value") && e.contains("CLUSTER_UUID"),
            "{e}"
        );
    }

    #[test]
    fn a_kubeconfig_without_a_cluster_or_user_is_missing_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud-config");
        std::fs::write(&path, "namespace: vms\nkubeconfig: |\n  apiVersion: v1\n  kind: Config\n  clusters: []\n  users: []\n").unwrap();
        let e = Config::load(Some(&path), &no_env).unwrap_err().to_string();
        assert!(
            e.contains("a cluster (server address)") && e.contains("a user"),
            "{e}"
        );
        std::fs::write(&path, "namespace: [").unwrap();
        let e = Config::load(Some(&path), &no_env).unwrap_err();
        assert!(!e.is_missing(), "{e}");
    }
}
