//! `vsphere.conf` as cloud-provider-vsphere reads it, in both its formats (YAML first
//! in upstream's order; the INI form when the file opens a section), with upstream's
//! defaults and environment variables (`VSPHERE_*`, which win over the file). What a
//! vCenter lacks is named at once, before anything is contacted; values are never echoed.

mod raw;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use overcast_cloud::cidr::Cidr;
use overcast_cloud::config::read_optional;
use overcast_cloud::ConfigError;

pub use raw::{file_keys, Raw, RawVc};

const CLOUD: &str = "vsphere";
/// Upstream's default for `secret-namespace` is none (both or neither); a Secret named
/// without one is looked for in the controller's namespace, `kube-system` on Deckhouse.
const DEFAULT_SECRET_NAMESPACE: &str = "kube-system";

/// Where a vCenter's credentials come from.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    Inline {
        user: String,
        password: String,
    },
    /// A Kubernetes Secret (`secret-name`/`secret-namespace`) with upstream's keys
    /// `<server>.username` and `<server>.password`.
    Secret {
        name: String,
        namespace: String,
    },
    /// Files named by those keys in a directory (`secrets-directory`).
    Directory(PathBuf),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline { user, .. } => {
                write!(f, "Inline {{ user: {user:?}, password: <redacted> }}")
            }
            Self::Secret { name, namespace } => write!(f, "Secret {{ {namespace}/{name} }}"),
            Self::Directory(dir) => write!(f, "Directory({})", dir.display()),
        }
    }
}

/// The address families a node's addresses are taken from, in priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn matches(self, ip: IpAddr) -> bool {
        matches!(
            (self, ip),
            (Self::V4, IpAddr::V4(_)) | (Self::V6, IpAddr::V6(_))
        )
    }
}

#[derive(Debug, Clone)]
pub struct VirtualCenter {
    /// The name the file gives it: the host, or a tenant name when `server` is set.
    pub name: String,
    /// Where it answers.
    pub server: String,
    pub port: u16,
    pub credentials: Credentials,
    pub datacenters: Vec<String>,
    pub insecure: bool,
    pub ca_file: Option<PathBuf>,
    pub thumbprint: Option<String>,
    pub ip_family: Vec<IpFamily>,
}

/// `[Nodes]`: how a node's guest addresses become its InternalIP and ExternalIP.
#[derive(Debug, Clone, Default)]
pub struct Nodes {
    pub internal_subnets: Vec<Cidr>,
    pub external_subnets: Vec<Cidr>,
    pub exclude_internal_subnets: Vec<Cidr>,
    pub exclude_external_subnets: Vec<Cidr>,
    pub internal_network_name: Option<String>,
    pub external_network_name: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub vcenters: Vec<VirtualCenter>,
    /// `[Labels]`: the tag categories naming regions and zones.
    pub region_category: Option<String>,
    pub zone_category: Option<String>,
    /// `[Labels] topology-categories` (vsphere-csi-driver's newer form): the categories
    /// whose tags the CSI topology carries as `topology.csi.vmware.com/<category>`. Each
    /// is the zone or the region category (checked when read).
    pub topology_categories: Vec<String>,
    pub nodes: Nodes,
    /// `[Global] cluster-id`, vsphere-csi-driver's: the cluster id CNS volumes are made
    /// with and listed by, when set (else the binaries' `--cluster`), so that a cluster
    /// switched from that driver keeps its volumes and no other cluster's.
    pub cluster_id: Option<String>,
    /// `[Snapshot] global-max-snapshots-per-block-volume` (0: unset, upstream's 3).
    pub max_snapshots: u64,
    pub unknown: Vec<String>,
}

impl Config {
    /// Reads the file at `path` (none or absent: the environment alone) with the
    /// process's environment.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with(path, &|k| std::env::var(k).ok())
    }

    pub fn load_with(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let text = read_optional(CLOUD, path)?.unwrap_or_default();
        let file = path.map(Path::to_path_buf);
        let raw = if raw::is_ini(&text) {
            raw::ini(&text).map_err(|(line, why)| ConfigError::Invalid {
                cloud: CLOUD,
                file: file.clone(),
                line: Some(line),
                why,
            })?
        } else {
            raw::yaml(&text).map_err(|why| ConfigError::Invalid {
                cloud: CLOUD,
                file: file.clone(),
                line: None,
                why: format!("neither INI (no [Global] section first) nor YAML: {why}"),
            })?
        };
        resolve(raw, env).map_err(|e| match e {
            Resolve::Missing(missing) => ConfigError::Missing {
                cloud: CLOUD,
                file,
                missing,
            },
            Resolve::Invalid(why) => ConfigError::Invalid {
                cloud: CLOUD,
                file,
                line: None,
                why,
            },
        })
    }
}

/// vsphere-csi-driver's key for each `topology-categories` entry.
pub const CSI_TOPOLOGY_DOMAIN: &str = "topology.csi.vmware.com";
/// Its keys with `zone` and `region` alone (`[Labels]` without `topology-categories`).
pub const LEGACY_ZONE_KEY: &str = "failure-domain.beta.kubernetes.io/zone";
pub const LEGACY_REGION_KEY: &str = "failure-domain.beta.kubernetes.io/region";

impl Config {
    /// The keys under which vsphere-csi-driver's topology named the zone and the
    /// region with this configuration, so the PVs it made keep scheduling after a
    /// switch: `topology.csi.vmware.com/<category>` per `topology-categories` entry;
    /// else, with both `zone` and `region`, the beta failure-domain keys; else none.
    pub fn topology_aliases(&self) -> (Vec<String>, Vec<String>) {
        let (zone, region) = (
            self.zone_category.as_deref(),
            self.region_category.as_deref(),
        );
        if !self.topology_categories.is_empty() {
            let keys = |of: Option<&str>| -> Vec<String> {
                self.topology_categories
                    .iter()
                    .filter(|c| Some(c.as_str()) == of)
                    .map(|c| format!("{CSI_TOPOLOGY_DOMAIN}/{c}"))
                    .collect()
            };
            return (keys(zone), keys(region));
        }
        if zone.is_some() && region.is_some() {
            return (
                vec![LEGACY_ZONE_KEY.to_owned()],
                vec![LEGACY_REGION_KEY.to_owned()],
            );
        }
        (Vec::new(), Vec::new())
    }

    /// Whether volumes and nodes have a place: a zone or region category is set.
    pub fn zoned(&self) -> bool {
        self.zone_category.is_some() || self.region_category.is_some()
    }
}

enum Resolve {
    Missing(Vec<String>),
    Invalid(String),
}

fn cidrs(key: &str, v: Option<&str>) -> Result<Vec<Cidr>, Resolve> {
    v.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| {
            c.parse()
                .map_err(|e| Resolve::Invalid(format!("[Nodes] {key}: {e}")))
        })
        .collect()
}

/// Upstream's `FromEnv`: these win over the file's `[Global]`.
fn apply_env(
    global: &mut RawVc,
    raw: &mut Raw,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Resolve> {
    let get = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(v) = get("VSPHERE_VCENTER") {
        global.server = Some(v);
    }
    if let Some(v) = get("VSPHERE_VCENTER_PORT") {
        global.port =
            Some(v.parse().map_err(|_| {
                Resolve::Invalid("VSPHERE_VCENTER_PORT is not a port number".into())
            })?);
    }
    if let Some(v) = get("VSPHERE_USER") {
        global.user = Some(v);
    }
    if let Some(v) = get("VSPHERE_PASSWORD") {
        global.password = Some(v);
    }
    if let Some(v) = get("VSPHERE_DATACENTER") {
        global.datacenters = Some(v.split(',').map(|d| d.trim().to_owned()).collect());
    }
    if let Some(v) = get("VSPHERE_SECRET_NAME") {
        global.secret_name = Some(v);
    }
    if let Some(v) = get("VSPHERE_SECRET_NAMESPACE") {
        global.secret_namespace = Some(v);
    }
    if let Some(v) = get("VSPHERE_INSECURE") {
        global.insecure_flag = Some(matches!(v.as_str(), "1" | "true" | "True" | "TRUE"));
    }
    if let Some(v) = get("VSPHERE_SECRETS_DIRECTORY") {
        global.secrets_directory = Some(v);
    }
    if let Some(v) = get("VSPHERE_CAFILE") {
        global.ca_file = Some(v);
    }
    if let Some(v) = get("VSPHERE_THUMBPRINT") {
        global.thumbprint = Some(v);
    }
    if let Some(v) = get("VSPHERE_LABEL_REGION") {
        raw.labels.region = Some(v);
    }
    if let Some(v) = get("VSPHERE_LABEL_ZONE") {
        raw.labels.zone = Some(v);
    }
    let nodes = &mut raw.nodes;
    for (var, field) in [
        (
            "VSPHERE_NODES_INTERNAL_NETWORK_SUBNET_CIDR",
            &mut nodes.internal_network_subnet_cidr,
        ),
        (
            "VSPHERE_NODES_EXTERNAL_NETWORK_SUBNET_CIDR",
            &mut nodes.external_network_subnet_cidr,
        ),
        (
            "VSPHERE_NODES_INTERNAL_VM_NETWORK_NAME",
            &mut nodes.internal_vm_network_name,
        ),
        (
            "VSPHERE_NODES_EXTERNAL_VM_NETWORK_NAME",
            &mut nodes.external_vm_network_name,
        ),
    ] {
        if let Some(v) = get(var) {
            *field = Some(v);
        }
    }
    Ok(())
}

fn resolve(mut raw: Raw, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Resolve> {
    let mut global = std::mem::take(&mut raw.global);
    apply_env(&mut global, &mut raw, env)?;
    let mut listed = std::mem::take(&mut raw.vcenter);
    // `[Global] server` (or VSPHERE_VCENTER) names one more vCenter with the global
    // values, unless a section already names it.
    if let Some(server) = global.server.clone() {
        if !listed.iter().any(|(name, _)| *name == server) {
            listed.push((server, RawVc::default()));
        }
    }
    let mut missing = Vec::new();
    if listed.is_empty() {
        missing.push(
            "a vCenter ([VirtualCenter \"host\"] or `vcenter:` with user and password, or \
             secret-name; or VSPHERE_VCENTER)"
                .to_owned(),
        );
    }
    let mut vcenters = Vec::new();
    for (name, vc) in listed {
        let server = vc.server.clone().unwrap_or_else(|| name.clone());
        let pick = |own: &Option<String>, global: &Option<String>| {
            own.clone()
                .or_else(|| global.clone())
                .filter(|v| !v.is_empty())
        };
        let user = pick(&vc.user, &global.user);
        let password = pick(&vc.password, &global.password);
        let namespace = pick(&vc.secret_namespace, &global.secret_namespace)
            .unwrap_or_else(|| DEFAULT_SECRET_NAMESPACE.into());
        // A vCenter's own Secret, then its own user and password, then the global
        // Secret or directory, then user and password from either (upstream's order).
        let credentials = if let Some(name) = vc.secret_name.clone() {
            Some(Credentials::Secret { name, namespace })
        } else if let (Some(user), Some(password)) = (vc.user.clone(), vc.password.clone()) {
            Some(Credentials::Inline { user, password })
        } else if let Some(name) = global.secret_name.clone() {
            Some(Credentials::Secret { name, namespace })
        } else if let Some(dir) = pick(&vc.secrets_directory, &global.secrets_directory) {
            Some(Credentials::Directory(PathBuf::from(dir)))
        } else if let (Some(user), Some(password)) = (user.clone(), password.clone()) {
            Some(Credentials::Inline { user, password })
        } else {
            let mut lacks = Vec::new();
            if user.is_none() {
                lacks.push("user");
            }
            if password.is_none() {
                lacks.push("password");
            }
            missing.push(format!(
                "{} for vCenter {name:?} (in its section or [Global], VSPHERE_USER / \
                 VSPHERE_PASSWORD, or secret-name)",
                lacks.join(" and ")
            ));
            None
        };
        let datacenters: Vec<String> = vc
            .datacenters
            .clone()
            .or_else(|| global.datacenters.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|d| !d.is_empty())
            .collect();
        if datacenters.is_empty() {
            missing.push(format!("datacenters for vCenter {name:?}"));
        }
        let families = vc
            .ip_family
            .clone()
            .or_else(|| global.ip_family.clone())
            .unwrap_or_else(|| vec!["ipv4".into()]);
        let ip_family = families
            .iter()
            .map(|f| match f.to_ascii_lowercase().as_str() {
                "ipv4" => Ok(IpFamily::V4),
                "ipv6" => Ok(IpFamily::V6),
                other => Err(Resolve::Invalid(format!(
                    "ip-family of vCenter {name:?}: {other:?} is neither ipv4 nor ipv6"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(credentials) = credentials {
            vcenters.push(VirtualCenter {
                server,
                port: vc.port.or(global.port).unwrap_or(443),
                credentials,
                datacenters,
                insecure: vc.insecure_flag.or(global.insecure_flag).unwrap_or(false),
                ca_file: pick(&vc.ca_file, &global.ca_file).map(PathBuf::from),
                thumbprint: pick(&vc.thumbprint, &global.thumbprint),
                ip_family,
                name,
            });
        }
    }
    if !missing.is_empty() {
        return Err(Resolve::Missing(missing));
    }
    let n = &raw.nodes;
    let nodes = Nodes {
        internal_subnets: cidrs(
            "internal-network-subnet-cidr",
            n.internal_network_subnet_cidr.as_deref(),
        )?,
        external_subnets: cidrs(
            "external-network-subnet-cidr",
            n.external_network_subnet_cidr.as_deref(),
        )?,
        exclude_internal_subnets: cidrs(
            "exclude-internal-network-subnet-cidr",
            n.exclude_internal_network_subnet_cidr.as_deref(),
        )?,
        exclude_external_subnets: cidrs(
            "exclude-external-network-subnet-cidr",
            n.exclude_external_network_subnet_cidr.as_deref(),
        )?,
        internal_network_name: n.internal_vm_network_name.clone(),
        external_network_name: n.external_vm_network_name.clone(),
    };
    let region_category = raw.labels.region.clone().filter(|v| !v.is_empty());
    let zone_category = raw.labels.zone.clone().filter(|v| !v.is_empty());
    let topology_categories = topology_categories(
        raw.labels.topology_categories.as_deref(),
        zone_category.as_deref(),
        region_category.as_deref(),
    )
    .map_err(Resolve::Invalid)?;
    // Upstream's limit (`ErrClusterIDCharLimit`): CNS records at most 64 characters.
    if let Some(id) = global.cluster_id.as_deref().filter(|id| id.len() > 64) {
        return Err(Resolve::Invalid(format!(
            "[Global] cluster-id {id:?} is longer than 64 characters, which CNS records"
        )));
    }
    let max_snapshots = match raw.max_snapshots.as_deref() {
        None => 0,
        Some(v) => v.parse::<u64>().map_err(|_| {
            Resolve::Invalid(format!(
                "[Snapshot] global-max-snapshots-per-block-volume: {v:?} is not a number"
            ))
        })?,
    };
    Ok(Config {
        vcenters,
        region_category,
        zone_category,
        topology_categories,
        nodes,
        cluster_id: global.cluster_id.clone(),
        max_snapshots,
        unknown: raw.unknown,
    })
}

/// `topology-categories`, each of which must be the zone or the region category: a
/// volume's place here is a zone and a region (upstream takes up to five categories of
/// any meaning; a third level is refused, saying so, rather than dropped).
fn topology_categories(
    list: Option<&str>,
    zone: Option<&str>,
    region: Option<&str>,
) -> Result<Vec<String>, String> {
    let list: Vec<String> = list
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    if list.is_empty() {
        return Ok(list);
    }
    if zone.is_none() && region.is_none() {
        return Err(format!(
            "[Labels] topology-categories {list:?} needs zone = and region = too (the \
             categories of zone and region tags, as the ccm reads them), so that each \
             category is known to be a zone or a region"
        ));
    }
    if let Some(other) = list
        .iter()
        .find(|c| Some(c.as_str()) != zone && Some(c.as_str()) != region)
    {
        return Err(format!(
            "[Labels] topology-categories names {other:?}, which is neither the zone \
             category ({zone:?}) nor the region category ({region:?}): topology here is a \
             zone and a region"
        ));
    }
    Ok(list)
}

#[cfg(test)]
mod tests;
