//! OCCM's `cloud.conf` (gcfg INI), as cloud-provider-openstack's cinder-csi-plugin and
//! openstack-cloud-controller-manager read it, so an existing Secret works unchanged.
//! Unknown keys are reported (the caller warns); a malformed line fails with its number.

use std::path::Path;

use overcast_cloud::config::{read_ini, unknown_keys, IniSection, ANY_KEY};
use overcast_cloud::ConfigError;

mod clouds_yaml;
mod load_balancer;

use clouds_yaml::clouds_values;
pub use load_balancer::{parse_go_duration, LbClass, LoadBalancerOpts};

const CLOUD: &str = "openstack";

const GLOBAL_KEYS: &[&str] = &[
    "auth-url",
    "username",
    "user-id",
    "password",
    "user-domain-name",
    "user-domain-id",
    "tenant-id",
    "project-id",
    "tenant-name",
    "project-name",
    "tenant-domain-name",
    "tenant-domain-id",
    "project-domain-name",
    "project-domain-id",
    "domain-name",
    "domain-id",
    "region",
    "ca-file",
    "cert-file",
    "key-file",
    "tls-insecure",
    "application-credential-id",
    "application-credential-name",
    "application-credential-secret",
    "trust-id",
    "trustee-id",
    "trustee-password",
    "use-clouds",
    "clouds-file",
    "cloud",
    "os-endpoint-type",
];
const BLOCK_STORAGE_KEYS: &[&str] = &[
    "node-volume-attach-limit",
    "rescan-on-resize",
    "ignore-volume-az",
    "ignore-volume-microversion",
    "bs-version",
    "trust-device-path",
];
const NETWORKING_KEYS: &[&str] = &[
    "ipv6-support-disabled",
    "public-network-name",
    "internal-network-name",
    "address-sort-order",
];
/// Sections whose keys belong to parts of the CCM not built yet; read, not yet checked.
const LOAD_BALANCER_KEYS: &[&str] = &[
    // Older OCCMs' switch (Octavia is the only choice now); accepted and ignored.
    "use-octavia",
    "enabled",
    "lb-version",
    "subnet-id",
    "member-subnet-id",
    "network-id",
    "floating-network-id",
    "floating-subnet-id",
    "floating-subnet",
    "floating-subnet-tags",
    "lb-method",
    "lb-provider",
    "create-monitor",
    "monitor-delay",
    "monitor-timeout",
    "monitor-max-retries",
    "monitor-max-retries-down",
    "manage-security-groups",
    "internal-lb",
    "node-selector",
    "cascade-delete",
    "flavor-id",
    "availability-zone",
    "enable-ingress-hostname",
    "ingress-hostname-suffix",
    "max-shared-lb",
    "container-store",
    "default-tls-container-ref",
    "provider-requires-serial-api-calls",
];
const LB_CLASS_KEYS: &[&str] = &[
    "floating-network-id",
    "floating-subnet-id",
    "floating-subnet",
    "floating-subnet-tags",
    "network-id",
    "subnet-id",
    "member-subnet-id",
];
const ROUTE_KEYS: &[&str] = &["router-id"];
/// `[Metadata]`: OCCM's metadata-service settings, taken whole (this provider reads the
/// Node's providerID, not the metadata service).
const METADATA_KEYS: &[&str] = ANY_KEY;
/// The sections cloud.conf takes (gcfg's names, lower-cased) and their keys.
const SECTIONS: &[(&str, &[&str])] = &[
    ("global", GLOBAL_KEYS),
    ("blockstorage", BLOCK_STORAGE_KEYS),
    ("networking", NETWORKING_KEYS),
    ("loadbalancer", LOAD_BALANCER_KEYS),
    ("loadbalancerclass", LB_CLASS_KEYS),
    ("route", ROUTE_KEYS),
    ("metadata", METADATA_KEYS),
];

/// What cloud.conf and the variables take, for the configuration reference.
pub fn file_keys() -> overcast_cloud::config::FileKeys {
    overcast_cloud::config::FileKeys {
        format: "INI (gcfg, as OCCM and cinder-csi-plugin read `cloud.conf`; section and key \
                 names are case-insensitive; `[LoadBalancerClass \"name\"]` per class; \
                 `*`: any key taken)",
        sections: SECTIONS
            .iter()
            .map(|(name, keys)| (name.to_string(), keys.to_vec()))
            .collect(),
        env: vec![
            ("OS_CLOUD", "[Global] cloud (the clouds.yaml entry)"),
            ("OS_CLIENT_CONFIG_FILE", "the clouds.yaml looked at first"),
            (
                "OS_CCM_REGIONAL",
                "`true`: the ccm writes `openstack://<region>/<id>` providerIDs",
            ),
        ],
    }
}

/// A domain, by id or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Domain {
    Id(String),
    Name(String),
}

/// A user or a project as Keystone v3 takes it: its id alone, or its name within a
/// domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Id(String),
    Name { name: String, domain: Domain },
}

/// An application credential: its id alone, or its name and the user it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    Id(String),
    Name { name: String, user: Named },
}

/// How Keystone is asked for a token.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    Password {
        user: Named,
        password: String,
        project: Named,
    },
    ApplicationCredential {
        credential: Credential,
        secret: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Password { user, project, .. } => f
                .debug_struct("Password")
                .field("user", user)
                .field("project", project)
                .field("password", &"<redacted>")
                .finish(),
            Self::ApplicationCredential { credential, .. } => f
                .debug_struct("ApplicationCredential")
                .field("credential", credential)
                .field("secret", &"<redacted>")
                .finish(),
        }
    }
}

/// OCCM's `[Networking]`: how a server's addresses become its node's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Networking {
    /// `ipv6-support-disabled`: IPv6 addresses are left out.
    pub ipv6_disabled: bool,
    /// `public-network-name` (repeatable): these networks' addresses are ExternalIPs.
    pub public_networks: Vec<String>,
    /// `internal-network-name` (repeatable): only these networks' fixed addresses are
    /// InternalIPs (all when none is named).
    pub internal_networks: Vec<String>,
    /// `address-sort-order`: CIDRs, comma-separated; matching addresses first, in this order.
    pub address_sort_order: Vec<overcast_cloud::cidr::Cidr>,
}

impl Networking {
    fn read(s: &IniSection, path: Option<&Path>) -> Result<Self, ConfigError> {
        let all = |key: &str| -> Vec<String> {
            s.values
                .iter()
                .filter(|v| v.key.eq_ignore_ascii_case(key))
                .map(|v| v.value.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect()
        };
        let mut order = Vec::new();
        for item in s.get("address-sort-order").unwrap_or("").split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            // OCCM warns and skips an item that is not a CIDR; a typo silently reordering
            // every node's addresses is worse than a refusal to start.
            order.push(item.parse::<overcast_cloud::cidr::Cidr>().map_err(|e| {
                at(
                    s,
                    "address-sort-order",
                    path,
                    format!("address-sort-order item {item:?} is not a CIDR: {e}"),
                )
            })?);
        }
        Ok(Self {
            ipv6_disabled: boolean(s, "ipv6-support-disabled", path)?,
            public_networks: all("public-network-name"),
            internal_networks: all("internal-network-name"),
            address_sort_order: order,
        })
    }
}

/// A complete OpenStack configuration (what this build checks of it).
#[derive(Debug, Clone)]
pub struct Config {
    pub auth_url: String,
    pub auth: Auth,
    pub region: Option<String>,
    /// `ca-file`: the PEM bundle Keystone and the endpoints are signed by.
    pub ca_file: Option<std::path::PathBuf>,
    pub tls_insecure: bool,
    /// `[BlockStorage] node-volume-attach-limit` (cinder-csi's default 256).
    pub node_volume_attach_limit: u32,
    pub rescan_on_resize: bool,
    pub ignore_volume_az: bool,
    /// `[Networking]`: which of a server's addresses a node gets, and in what order.
    pub networking: Networking,
    /// `[LoadBalancer]` and its `[LoadBalancerClass "…"]`es.
    pub load_balancer: LoadBalancerOpts,
    /// `[Route] router-id`.
    pub router_id: Option<String>,
    /// `[Section] key (line n)` of every key or section this version does not know.
    pub unknown: Vec<String>,
}

fn boolean(s: &IniSection, key: &str, path: Option<&Path>) -> Result<bool, ConfigError> {
    match s.get(key) {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(_) => Err(at(s, key, path, format!("{key} must be true or false"))),
    }
}

fn at(s: &IniSection, key: &str, path: Option<&Path>, why: String) -> ConfigError {
    let line = s.values.iter().rev().find(|v| v.key == key).map(|v| v.line);
    ConfigError::Invalid {
        cloud: CLOUD,
        file: path.map(Path::to_path_buf),
        line,
        why,
    }
}

/// `[BlockStorage] node-volume-attach-limit` of the file, alone (the node plugin's
/// NodeGetInfo; it holds no credentials); `None` when the file or the key is missing or
/// not a positive number.
pub fn node_volume_attach_limit(path: Option<&Path>) -> Option<u32> {
    block_storage(path, "node-volume-attach-limit")?
        .parse::<u32>()
        .ok()
        .filter(|n| *n > 0)
}

/// `[BlockStorage] rescan-on-resize`, read alone like [`node_volume_attach_limit`] (the
/// node plugin's Secret may hold no credentials); false when absent or unreadable.
pub fn rescan_on_resize(path: Option<&Path>) -> bool {
    block_storage(path, "rescan-on-resize").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn block_storage(path: Option<&Path>, key: &str) -> Option<String> {
    let sections = read_ini(CLOUD, path).ok()?;
    let value = sections
        .iter()
        .find(|s| s.name == "blockstorage")?
        .get(key)?;
    Some(value.trim().to_owned())
}

impl Config {
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with_env(path, &|k| std::env::var(k).ok())
    }

    /// [`Config::load`], with the environment given (`OS_CLOUD`, `OS_CLIENT_CONFIG_FILE`,
    /// `HOME` locate clouds.yaml): OCCM's `use-clouds = true` (with `clouds-file`,
    /// `cloud`), or no cloud.conf at all and `OS_CLOUD` set, read the cloud's entry of
    /// clouds.yaml; a key cloud.conf sets itself wins, as OCCM's do.
    pub fn load_with_env(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut sections = read_ini(CLOUD, path)?;
        let use_clouds = sections
            .iter()
            .find(|s| s.name == "global")
            .and_then(|g| g.get("use-clouds"))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || (path.is_none() && env("OS_CLOUD").is_some());
        if use_clouds {
            let global_index = match sections.iter().position(|s| s.name == "global") {
                Some(i) => i,
                None => {
                    sections.push(IniSection {
                        name: "global".into(),
                        sub: None,
                        line: 0,
                        values: Vec::new(),
                    });
                    sections.len() - 1
                }
            };
            let g = &sections[global_index];
            let cloud = g
                .get("cloud")
                .map(str::to_owned)
                .or_else(|| env("OS_CLOUD"))
                .ok_or_else(|| ConfigError::Missing {
                    cloud: CLOUD,
                    file: path.map(Path::to_path_buf),
                    missing: vec![
                        "which cloud of clouds.yaml (cloud in [Global], or OS_CLOUD)".into(),
                    ],
                })?;
            let file = g.get("clouds-file").map(str::to_owned);
            let mut values = clouds_values(file.as_deref(), &cloud, env)?;
            // cloud.conf's own come later: the later value of a key wins.
            values.append(&mut sections[global_index].values);
            sections[global_index].values = values;
        }
        let unknown = unknown_keys(&sections, |name| {
            SECTIONS
                .iter()
                .find(|(section, _)| *section == name)
                .map(|(_, keys)| *keys)
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
        let block = sections.iter().find(|s| s.name == "blockstorage");
        let get = |k: &str| {
            global
                .get(k)
                .filter(|v| !v.trim().is_empty())
                .map(str::to_owned)
        };
        let any = |keys: &[&str]| keys.iter().find_map(|k| get(k));
        let mut missing = Vec::new();
        let auth_url = get("auth-url");
        if auth_url.is_none() {
            missing.push("Keystone's URL (auth-url in [Global])".to_owned());
        }
        // OCCM's (gophercloud's) rules: the specific domain keys first, then the
        // deprecated `domain-*` for both the user and the project.
        let domain = |id: &str, name: &str| match (get(id), get(name)) {
            (Some(id), _) => Some(Domain::Id(id)),
            (None, Some(name)) => Some(Domain::Name(name)),
            (None, None) => match (get("domain-id"), get("domain-name")) {
                (Some(id), _) => Some(Domain::Id(id)),
                (None, Some(name)) => Some(Domain::Name(name)),
                (None, None) => None,
            },
        };
        let user_domain = domain("user-domain-id", "user-domain-name");
        let project_domain = match (get("tenant-domain-id"), get("tenant-domain-name")) {
            (Some(id), _) if get("project-domain-id").is_none() => Some(Domain::Id(id)),
            (None, Some(name))
                if get("project-domain-id").is_none() && get("project-domain-name").is_none() =>
            {
                Some(Domain::Name(name))
            }
            _ => domain("project-domain-id", "project-domain-name"),
        };
        let user = match (get("user-id"), get("username")) {
            (Some(id), _) => Some(Named::Id(id)),
            (None, Some(name)) => match user_domain {
                Some(domain) => Some(Named::Name { name, domain }),
                None => {
                    missing.push(
                        "the user's domain (user-domain-name or user-domain-id, or domain-name)"
                            .into(),
                    );
                    None
                }
            },
            (None, None) => None,
        };
        let auth = match (
            get("application-credential-id"),
            get("application-credential-name"),
        ) {
            (id, name) if id.is_some() || name.is_some() => {
                let credential = match (id, name) {
                    (Some(id), _) => Some(Credential::Id(id)),
                    (None, Some(name)) => match user.clone() {
                        Some(user) => Some(Credential::Name { name, user }),
                        None => {
                            missing.push("the user an application-credential-name belongs to (user-id, or username with its domain)".into());
                            None
                        }
                    },
                    (None, None) => None,
                };
                let secret = get("application-credential-secret");
                if secret.is_none() {
                    missing.push("application-credential-secret in [Global]".into());
                }
                match (credential, secret) {
                    (Some(credential), Some(secret)) => {
                        Some(Auth::ApplicationCredential { credential, secret })
                    }
                    _ => None,
                }
            }
            _ => {
                if user.is_none() && get("username").is_none() {
                    missing.push("a user (username or user-id in [Global]) or an application credential (application-credential-id and -secret)".into());
                }
                if get("password").is_none() {
                    missing.push("password in [Global]".into());
                }
                let project = match (
                    any(&["project-id", "tenant-id"]),
                    any(&["project-name", "tenant-name"]),
                ) {
                    (Some(id), _) => Some(Named::Id(id)),
                    (None, Some(name)) => match project_domain {
                        Some(domain) => Some(Named::Name { name, domain }),
                        None => {
                            missing.push("the project's domain (project-domain-name or project-domain-id, or domain-name)".into());
                            None
                        }
                    },
                    (None, None) => {
                        missing.push("the project (project-id or project-name in [Global])".into());
                        None
                    }
                };
                match (user.clone(), get("password"), project) {
                    (Some(user), Some(password), Some(project)) => Some(Auth::Password {
                        user,
                        password,
                        project,
                    }),
                    _ => None,
                }
            }
        };
        let (Some(auth_url), Some(auth), true) = (auth_url, auth, missing.is_empty()) else {
            return Err(ConfigError::Missing {
                cloud: CLOUD,
                file: path.map(Path::to_path_buf),
                missing,
            });
        };
        if !(auth_url.starts_with("https://") || auth_url.starts_with("http://")) {
            return Err(at(
                global,
                "auth-url",
                path,
                format!("auth-url {auth_url:?} is not an http(s) URL"),
            ));
        }
        let tls_insecure = boolean(global, "tls-insecure", path)?;
        let (mut limit, mut rescan, mut ignore_az) = (256, false, false);
        if let Some(b) = block {
            if let Some(v) = b.get("node-volume-attach-limit") {
                limit = v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    at(
                        b,
                        "node-volume-attach-limit",
                        path,
                        format!("node-volume-attach-limit {v:?} is not a positive number"),
                    )
                })?;
            }
            rescan = boolean(b, "rescan-on-resize", path)?;
            ignore_az = boolean(b, "ignore-volume-az", path)?;
        }
        let networking = match sections.iter().find(|s| s.name == "networking") {
            Some(n) => Networking::read(n, path)?,
            None => Networking::default(),
        };
        Ok(Self {
            auth_url,
            auth,
            networking,
            load_balancer: LoadBalancerOpts::read(&sections, path)?,
            router_id: load_balancer::router_id(&sections),
            region: get("region"),
            ca_file: get("ca-file").map(std::path::PathBuf::from),
            tls_insecure,
            node_volume_attach_limit: limit,
            rescan_on_resize: rescan,
            ignore_volume_az: ignore_az,
            unknown,
        })
    }
}

#[cfg(test)]
mod tests;
