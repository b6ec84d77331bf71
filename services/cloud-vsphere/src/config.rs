//! `vsphere.conf` (gcfg INI) as cloud-provider-vsphere reads it: `[Global]` defaults,
//! one `[VirtualCenter "host"]` per vCenter (its own values over the defaults),
//! `[Labels] region/zone` (tag categories), `[Nodes]` subnet selection.

use std::path::Path;

use overcast_cloud::config::{read_ini, unknown_keys, IniSection};
use overcast_cloud::ConfigError;

const CLOUD: &str = "vsphere";

const VC_KEYS: &[&str] = &[
    "user",
    "password",
    "port",
    "insecure-flag",
    "datacenters",
    "ca-file",
    "thumbprint",
    "secret-name",
    "secret-namespace",
    "secrets-directory",
    "soap-roundtrip-count",
    "api-disable",
    "api-binding",
    "ip-family",
    "vcenter-ip",
    "server",
];
const LABEL_KEYS: &[&str] = &["region", "zone"];
const NODE_KEYS: &[&str] = &[
    "internal-network-subnet-cidr",
    "external-network-subnet-cidr",
    "internal-vm-network-name",
    "external-vm-network-name",
    "exclude-internal-network-subnet-cidr",
    "exclude-external-network-subnet-cidr",
];

/// Where a vCenter's credentials come from.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    Inline {
        user: String,
        password: String,
    },
    /// A Kubernetes Secret (`secret-name`/`secret-namespace`), read at run time.
    Secret {
        name: String,
        namespace: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline { user, .. } => {
                write!(f, "Inline {{ user: {user:?}, password: <redacted> }}")
            }
            Self::Secret { name, namespace } => write!(f, "Secret {{ {namespace}/{name} }}"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct VirtualCenter {
    pub host: String,
    pub credentials: Credentials,
    pub datacenters: Vec<String>,
    pub insecure: bool,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub vcenters: Vec<VirtualCenter>,
    /// `[Labels]`: the tag categories naming regions and zones.
    pub region_category: Option<String>,
    pub zone_category: Option<String>,
    pub unknown: Vec<String>,
}

impl Config {
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let sections = read_ini(CLOUD, path)?;
        let unknown = unknown_keys(&sections, |name| match name {
            "global" | "virtualcenter" => Some(VC_KEYS),
            "labels" => Some(LABEL_KEYS),
            "nodes" => Some(NODE_KEYS),
            _ => None,
        });
        let empty = IniSection {
            name: "global".into(),
            sub: None,
            line: 0,
            values: Vec::new(),
        };
        let global = sections
            .iter()
            .find(|s| s.name == "global")
            .unwrap_or(&empty);
        let labels = sections.iter().find(|s| s.name == "labels");
        let mut missing = Vec::new();
        let mut vcenters = Vec::new();
        let listed: Vec<&IniSection> = sections
            .iter()
            .filter(|s| s.name == "virtualcenter")
            .collect();
        if listed.is_empty() {
            missing.push(
                "a vCenter ([VirtualCenter \"host\"] with user and password, or secret-name)"
                    .to_owned(),
            );
        }
        for vc in listed {
            let Some(host) = vc.sub.clone().filter(|h| !h.is_empty()) else {
                return Err(ConfigError::Invalid {
                    cloud: CLOUD,
                    file: path.map(Path::to_path_buf),
                    line: Some(vc.line),
                    why: "[VirtualCenter] needs its host: [VirtualCenter \"vcenter.example.com\"]"
                        .into(),
                });
            };
            let get = |k: &str| {
                vc.get(k)
                    .or_else(|| global.get(k))
                    .filter(|v| !v.trim().is_empty())
                    .map(str::to_owned)
            };
            let credentials = match (get("user"), get("password"), get("secret-name")) {
                (Some(user), Some(password), _) => Some(Credentials::Inline { user, password }),
                (_, _, Some(name)) => Some(Credentials::Secret {
                    name,
                    namespace: get("secret-namespace").unwrap_or_else(|| "kube-system".into()),
                }),
                (user, password, None) => {
                    let mut lacks = Vec::new();
                    if user.is_none() {
                        lacks.push("user");
                    }
                    if password.is_none() {
                        lacks.push("password");
                    }
                    missing.push(format!(
                        "{} for vCenter {host:?} (in its section or [Global], or secret-name)",
                        lacks.join(" and ")
                    ));
                    None
                }
            };
            let datacenters: Vec<String> = get("datacenters")
                .unwrap_or_default()
                .split(',')
                .map(|d| d.trim().to_owned())
                .filter(|d| !d.is_empty())
                .collect();
            if datacenters.is_empty() {
                missing.push(format!("datacenters for vCenter {host:?}"));
            }
            if let Some(credentials) = credentials {
                vcenters.push(VirtualCenter {
                    host,
                    credentials,
                    datacenters,
                    insecure: get("insecure-flag").is_some_and(|v| v == "true" || v == "1"),
                });
            }
        }
        if !missing.is_empty() {
            return Err(ConfigError::Missing {
                cloud: CLOUD,
                file: path.map(Path::to_path_buf),
                missing,
            });
        }
        Ok(Self {
            vcenters,
            region_category: labels.and_then(|l| l.get("region")).map(str::to_owned),
            zone_category: labels.and_then(|l| l.get("zone")).map(str::to_owned),
            unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vsphere.conf");
        std::fs::write(&path, text).unwrap();
        Config::load(Some(&path))
    }

    #[test]
    fn global_defaults_fill_each_vcenter_and_secrets_stay_hidden() {
        let c = load(
            "[Global]\nuser = admin@vsphere.local\npassword = \"pa ss\"\ninsecure-flag = true\n\
             [VirtualCenter \"vc1\"]\ndatacenters = dc1, dc2\n\
             [VirtualCenter \"vc2\"]\nsecret-name = vc2-creds\ndatacenters = dc3\nuser=\npassword=\n\
             [Labels]\nregion = k8s-region\nzone = k8s-zone\n",
        )
        .unwrap();
        assert_eq!(c.vcenters.len(), 2);
        assert_eq!(c.vcenters[0].datacenters, vec!["dc1", "dc2"]);
        assert!(c.vcenters[0].insecure);
        assert_eq!(
            c.vcenters[1].credentials,
            Credentials::Secret {
                name: "vc2-creds".into(),
                namespace: "kube-system".into()
            }
        );
        assert_eq!(c.zone_category.as_deref(), Some("k8s-zone"));
        assert!(!format!("{c:?}").contains("pa ss"));
    }

    #[test]
    fn what_is_missing_is_named_per_vcenter() {
        let e = Config::load(None).unwrap_err().to_string();
        assert!(e.contains("a vCenter"), "{e}");
        let e = load("[VirtualCenter \"vc1\"]\nuser = u\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("password for vCenter \"vc1\"")
                && e.contains("datacenters for vCenter \"vc1\""),
            "{e}"
        );
        let e = load("[VirtualCenter]\nuser = u\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("needs its host"), "{e}");
    }
}
