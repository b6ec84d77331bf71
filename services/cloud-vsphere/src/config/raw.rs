//! The two file formats cloud-provider-vsphere reads, both into one raw form: what the
//! file says, nothing defaulted yet. INI (gcfg): `[Global]`, `[VirtualCenter "host"]`,
//! `[Labels]`, `[Nodes]` with dashed keys; YAML: `global`, `vcenter: {name: …}`,
//! `labels`, `nodes` with camelCase keys.

use std::collections::BTreeMap;

use overcast_cloud::config::{parse_ini, serde_fields, unknown_keys, FileKeys, IniSection};
use serde::de::IgnoredAny;
use serde::Deserialize;

/// One vCenter's settings, or `[Global]`'s defaults for them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawVc {
    pub user: Option<String>,
    pub password: Option<String>,
    /// The vCenter's address, when the section's name is a tenant name rather than it.
    pub server: Option<String>,
    pub port: Option<u16>,
    pub insecure_flag: Option<bool>,
    pub datacenters: Option<Vec<String>>,
    pub ca_file: Option<String>,
    pub thumbprint: Option<String>,
    pub secret_name: Option<String>,
    pub secret_namespace: Option<String>,
    pub secrets_directory: Option<String>,
    #[serde(rename = "ipFamily")]
    pub ip_family: Option<Vec<String>>,
    #[serde(rename = "soapRoundtripCount")]
    pub soap_roundtrip_count: Option<u32>,
    /// `[Global] cluster-id` (vsphere-csi-driver's `csi-vsphere.conf`, INI alone): the
    /// cluster id its CNS volumes carry.
    #[serde(skip)]
    pub cluster_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RawLabels {
    pub zone: Option<String>,
    pub region: Option<String>,
    /// vsphere-csi-driver's `topology-categories` (comma-separated).
    #[serde(rename = "topologyCategories")]
    pub topology_categories: Option<String>,
}

/// `[Nodes]`: which guest addresses are internal and external.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawNodes {
    pub internal_network_subnet_cidr: Option<String>,
    pub external_network_subnet_cidr: Option<String>,
    pub internal_vm_network_name: Option<String>,
    pub external_vm_network_name: Option<String>,
    pub exclude_internal_network_subnet_cidr: Option<String>,
    pub exclude_external_network_subnet_cidr: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Raw {
    #[serde(default)]
    pub global: RawVc,
    /// By the name the file gives (the host, or a tenant name with `server`), in order.
    #[serde(default, deserialize_with = "in_order")]
    pub vcenter: Vec<(String, RawVc)>,
    #[serde(default)]
    pub labels: RawLabels,
    #[serde(default)]
    pub nodes: RawNodes,
    /// vsphere-csi-driver's `[Snapshot] global-max-snapshots-per-block-volume` (INI alone).
    #[serde(skip)]
    pub max_snapshots: Option<String>,
    /// Keys this version does not know (warned about, as upstream ignores them).
    #[serde(skip)]
    pub unknown: Vec<String>,
}

/// The YAML form's keys alone, to tell which of them no type reads.
#[derive(Default, Deserialize)]
struct Keys {
    #[serde(default)]
    global: BTreeMap<String, IgnoredAny>,
    #[serde(default)]
    vcenter: BTreeMap<String, BTreeMap<String, IgnoredAny>>,
    #[serde(default)]
    labels: BTreeMap<String, IgnoredAny>,
    #[serde(default)]
    nodes: BTreeMap<String, IgnoredAny>,
    #[serde(flatten)]
    other: BTreeMap<String, IgnoredAny>,
}

/// What the two forms take, for the configuration reference.
pub fn file_keys() -> FileKeys {
    FileKeys {
        format: "INI (gcfg, as cloud-provider-vsphere and vsphere-csi-driver read \
                 `vsphere.conf`: `[Global]`, `[VirtualCenter \"host\"]`, dashed keys), or \
                 YAML (`global`, `vcenter.<name>`, `labels`, `nodes`, camelCase keys)",
        sections: vec![
            (
                "[Global], [VirtualCenter \"host\"]".into(),
                VC_KEYS.to_vec(),
            ),
            (
                "[Global] alone (vsphere-csi-driver's)".into(),
                GLOBAL_ONLY_KEYS.to_vec(),
            ),
            ("[Labels]".into(), LABEL_KEYS.to_vec()),
            ("[Nodes]".into(), NODE_KEYS.to_vec()),
            ("YAML: top level".into(), serde_fields::<Raw>().to_vec()),
            (
                "YAML: `global`, `vcenter.<name>`".into(),
                serde_fields::<RawVc>().to_vec(),
            ),
            (
                "YAML: `labels`".into(),
                serde_fields::<RawLabels>().to_vec(),
            ),
            ("YAML: `nodes`".into(), serde_fields::<RawNodes>().to_vec()),
        ],
        env: Vec::new(),
    }
}

fn in_order<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(String, RawVc)>, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Vec<(String, RawVc)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of vCenters by name")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((k, v)) = m.next_entry::<String, RawVc>()? {
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_map(Visit)
}

/// Whether the text is the INI form: its first line that says anything opens a section.
pub fn is_ini(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .is_some_and(|l| l.starts_with('['))
}

/// The YAML form. Errors say where.
pub fn yaml(text: &str) -> Result<Raw, String> {
    let mut raw: Raw = if text.trim().is_empty() {
        Raw::default()
    } else {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())?
    };
    // Parsed again as bare maps: the keys the file has, against the keys the types read.
    let keys: Keys = if text.trim().is_empty() {
        Keys::default()
    } else {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())?
    };
    let not_in = |known: &[&str], keys: BTreeMap<String, IgnoredAny>, under: &str| {
        keys.into_keys()
            .filter(|k| !known.contains(&k.as_str()))
            .map(|k| format!("{under}{k}"))
            .collect::<Vec<_>>()
    };
    let mut unknown = not_in(serde_fields::<Raw>(), keys.other, "");
    unknown.extend(not_in(serde_fields::<RawVc>(), keys.global, "global."));
    for (name, vc) in keys.vcenter {
        unknown.extend(not_in(
            serde_fields::<RawVc>(),
            vc,
            &format!("vcenter.{name}."),
        ));
    }
    unknown.extend(not_in(serde_fields::<RawLabels>(), keys.labels, "labels."));
    unknown.extend(not_in(serde_fields::<RawNodes>(), keys.nodes, "nodes."));
    raw.unknown = unknown;
    Ok(raw)
}

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
/// `[Global]`'s own keys, beside a vCenter's defaults (`VC_KEYS`): vsphere-csi-driver's
/// cluster keys.
const GLOBAL_ONLY_KEYS: &[&str] = &[
    "cluster-id",
    // Recorded by vsphere-csi-driver with each volume; it filters on nothing.
    "cluster-distribution",
];
/// Every key `[Global]` takes.
static GLOBAL_KEYS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| [VC_KEYS, GLOBAL_ONLY_KEYS].concat());
const LABEL_KEYS: &[&str] = &["region", "zone", "topology-categories"];
const NODE_KEYS: &[&str] = &[
    "internal-network-subnet-cidr",
    "external-network-subnet-cidr",
    "internal-vm-network-name",
    "external-vm-network-name",
    "exclude-internal-network-subnet-cidr",
    "exclude-external-network-subnet-cidr",
];

/// `[Snapshot]`'s keys this version reads (vsphere-csi-driver's granular per-datastore
/// limits are warned about as unknown).
const SNAPSHOT_KEYS: &[&str] = &["global-max-snapshots-per-block-volume"];

/// The INI form. Errors carry their line.
pub fn ini(text: &str) -> Result<Raw, (usize, String)> {
    let sections = parse_ini(text)?;
    let unknown = unknown_keys(&sections, |name| match name {
        "global" => Some(GLOBAL_KEYS.as_slice()),
        "virtualcenter" => Some(VC_KEYS),
        "labels" => Some(LABEL_KEYS),
        "nodes" => Some(NODE_KEYS),
        "snapshot" => Some(SNAPSHOT_KEYS),
        _ => None,
    });
    let mut raw = Raw {
        unknown,
        ..Raw::default()
    };
    for s in &sections {
        match s.name.as_str() {
            "global" => raw.global = vc_of(s)?,
            "virtualcenter" => {
                let Some(name) = s.sub.clone().filter(|h| !h.is_empty()) else {
                    return Err((
                        s.line,
                        "[VirtualCenter] needs its host: [VirtualCenter \"vcenter.example.com\"]"
                            .into(),
                    ));
                };
                raw.vcenter.push((name, vc_of(s)?));
            }
            "labels" => {
                raw.labels = RawLabels {
                    zone: value(s, "zone"),
                    region: value(s, "region"),
                    topology_categories: value(s, "topology-categories"),
                }
            }
            "nodes" => {
                raw.nodes = RawNodes {
                    internal_network_subnet_cidr: value(s, "internal-network-subnet-cidr"),
                    external_network_subnet_cidr: value(s, "external-network-subnet-cidr"),
                    internal_vm_network_name: value(s, "internal-vm-network-name"),
                    external_vm_network_name: value(s, "external-vm-network-name"),
                    exclude_internal_network_subnet_cidr: value(
                        s,
                        "exclude-internal-network-subnet-cidr",
                    ),
                    exclude_external_network_subnet_cidr: value(
                        s,
                        "exclude-external-network-subnet-cidr",
                    ),
                }
            }
            "snapshot" => raw.max_snapshots = value(s, "global-max-snapshots-per-block-volume"),
            _ => {}
        }
    }
    Ok(raw)
}

/// A key's value; an empty one (`user =`) is no value, as gcfg's zero string is.
fn value(s: &IniSection, key: &str) -> Option<String> {
    s.get(key)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

fn list(v: Option<String>) -> Option<Vec<String>> {
    v.map(|v| {
        v.split(',')
            .map(|d| d.trim().trim_matches('"').to_owned())
            .filter(|d| !d.is_empty())
            .collect()
    })
}

fn vc_of(s: &IniSection) -> Result<RawVc, (usize, String)> {
    let port = value(s, "port")
        .map(|p| {
            p.parse::<u16>()
                .map_err(|_| (s.line, format!("port: {p:?} is not a port number")))
        })
        .transpose()?;
    let insecure = value(s, "insecure-flag")
        .map(|v| match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err((s.line, format!("insecure-flag: {v:?} is not a boolean"))),
        })
        .transpose()?;
    let soap = value(s, "soap-roundtrip-count")
        .map(|v| {
            v.parse::<u32>().map_err(|_| {
                (
                    s.line,
                    format!("soap-roundtrip-count: {v:?} is not a count"),
                )
            })
        })
        .transpose()?;
    Ok(RawVc {
        user: value(s, "user"),
        password: value(s, "password"),
        // `vcenter-ip` is the older spelling of `server`.
        server: value(s, "server").or_else(|| value(s, "vcenter-ip")),
        port,
        insecure_flag: insecure,
        datacenters: list(value(s, "datacenters")),
        ca_file: value(s, "ca-file"),
        thumbprint: value(s, "thumbprint"),
        secret_name: value(s, "secret-name"),
        secret_namespace: value(s, "secret-namespace"),
        secrets_directory: value(s, "secrets-directory"),
        ip_family: list(value(s, "ip-family")),
        soap_roundtrip_count: soap,
        cluster_id: value(s, "cluster-id"),
    })
}
