//! The local cloud's `--cloud-config` file: the settings every service of one cluster
//! must agree on (zone, region, the extra machines, the load-balancer pool), read from the
//! one Secret the manifests mount into the CSI controller, the ccm and the discoverer.
//! A flag given on the command line wins over the file; the file wins over the defaults.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use overcast_cloud::Zone;

/// What the local cloud reads from its cloud-config file (YAML or JSON). Unknown keys
/// are refused so that a misspelt setting fails at start instead of being ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalCloudConfig {
    /// `topology.kubernetes.io/zone` of this host.
    pub zone: Option<String>,
    /// `topology.kubernetes.io/region` of this host.
    pub region: Option<String>,
    /// A JSON list of further machines (see `instances`).
    pub instances_file: Option<PathBuf>,
    /// Where load-balancer addresses come from (a CIDR).
    pub load_balancer_pool: Option<String>,
}

/// What the file takes, for the configuration reference.
pub fn file_keys() -> overcast_cloud::config::FileKeys {
    use overcast_cloud::config::serde_fields;
    overcast_cloud::config::FileKeys {
        format:
            "YAML or JSON; unknown keys are refused. `instancesFile` is a JSON list of machines",
        sections: vec![
            (String::new(), serde_fields::<LocalCloudConfig>().to_vec()),
            (
                "each machine of `instancesFile`".into(),
                crate::instances::file_instance_keys().to_vec(),
            ),
        ],
        env: Vec::new(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CloudConfigError {
    #[error("read cloud config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parse cloud config {path}: {message}")]
    Parse { path: PathBuf, message: String },
}

impl LocalCloudConfig {
    /// Reads the file, or gives the empty configuration when there is none.
    pub fn load(path: Option<&Path>) -> Result<Self, CloudConfigError> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| CloudConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|message| CloudConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses the file's text (the Secret's value).
    pub fn parse(text: &str) -> Result<Self, String> {
        // An empty file (a Secret key left blank) means "all defaults".
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    /// The zone: the flag if given, else the file, else `local`.
    pub fn zone(&self, flag: Option<&str>) -> String {
        pick(flag, self.zone.as_deref())
    }

    /// The region: the flag if given, else the file, else `local`.
    pub fn region(&self, flag: Option<&str>) -> String {
        pick(flag, self.region.as_deref())
    }
}

/// The local cloud's flags that the ccm and the discoverer share (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LocalFlags {
    /// The cloud's configuration file (for the local cloud: zone, region,
    /// instancesFile, loadBalancerPool); flags override it.
    #[arg(long, env = "CLOUD_CONFIG")]
    pub cloud_config: Option<PathBuf>,
    /// Local cloud: this host's zone (default: the cloud-config file's, else `local`).
    #[arg(long)]
    pub zone: Option<String>,
    /// Local cloud: this host's region (as --zone).
    #[arg(long)]
    pub region: Option<String>,
    /// Local cloud: the node name of this host (default: the hostname).
    #[arg(long, env = "KUBE_NODE_NAME")]
    pub node_name: Option<String>,
    /// Local cloud: a JSON list of further machines (name, addresses, state, …).
    #[arg(long)]
    pub instances_file: Option<PathBuf>,
    /// The cluster's name, as the CSI driver's `--cluster` recorded it on the disks
    /// (their orphans are found among this cluster's alone).
    /// `--cluster-name` is the upstream cloud-controller-manager's spelling (OCCM names
    /// its load balancers with it).
    #[arg(
        long,
        alias = "cluster-name",
        env = "CLUSTER_NAME",
        default_value = "kubernetes"
    )]
    pub cluster: String,
}

/// The flags and the file, resolved.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub file: LocalCloudConfig,
    pub zone: Zone,
    pub node_name: String,
    pub instances_file: Option<PathBuf>,
}

impl LocalFlags {
    /// The registry's settings for `cloud` from these shared flags (the ccm's and the
    /// discoverer's).
    pub fn settings(&self, cloud: overcast_cloud::CloudName) -> overcast_provider::Settings {
        let mut s = overcast_provider::Settings::new(cloud);
        s.cloud_config = self.cloud_config.clone();
        s.node_name = self.node_name.clone();
        s.zone = self.zone.clone();
        s.region = self.region.clone();
        s.local.instances_file = self.instances_file.clone();
        s.cluster = self.cluster.clone();
        s
    }

    pub fn resolve(&self) -> Result<LocalSettings, CloudConfigError> {
        let file = LocalCloudConfig::load(self.cloud_config.as_deref())?;
        Ok(LocalSettings {
            zone: Zone {
                zone: file.zone(self.zone.as_deref()),
                region: file.region(self.region.as_deref()),
            },
            node_name: self
                .node_name
                .clone()
                .unwrap_or_else(overcast_runtime::host::hostname_or_localhost),
            instances_file: self.instances_file.clone().or(file.instances_file.clone()),
            file,
        })
    }
}

fn pick(flag: Option<&str>, file: Option<&str>) -> String {
    flag.or(file).unwrap_or("local").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_yaml_and_json() {
        let yaml = "zone: z1\nregion: r1\ninstancesFile: /etc/overcast/instances.json\nloadBalancerPool: 127.241.0.0/16\n";
        let c = LocalCloudConfig::parse(yaml).expect("yaml");
        assert_eq!(c.zone.as_deref(), Some("z1"));
        assert_eq!(c.region.as_deref(), Some("r1"));
        assert_eq!(
            c.instances_file.as_deref(),
            Some(Path::new("/etc/overcast/instances.json"))
        );
        assert_eq!(c.load_balancer_pool.as_deref(), Some("127.241.0.0/16"));
        let json = LocalCloudConfig::parse(r#"{"zone": "z2"}"#).expect("json");
        assert_eq!(json.zone.as_deref(), Some("z2"));
        assert_eq!(json.region, None);
        assert_eq!(
            LocalCloudConfig::parse("\n").expect("empty"),
            LocalCloudConfig::default()
        );
    }

    #[test]
    fn refuses_unknown_keys() {
        let err = LocalCloudConfig::parse("zone: z1\nzones: [a]\n").expect_err("typo");
        assert!(err.contains("zones"), "{err}");
    }

    #[test]
    fn flag_beats_file_beats_default() {
        let c = LocalCloudConfig {
            zone: Some("from-file".into()),
            ..Default::default()
        };
        assert_eq!(c.zone(Some("from-flag")), "from-flag");
        assert_eq!(c.zone(None), "from-file");
        assert_eq!(c.region(None), "local");
    }

    #[test]
    fn shared_flags_resolve_against_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud-config");
        std::fs::write(
            &path,
            "zone: z-file\nregion: r-file\ninstancesFile: /from/file.json\n",
        )
        .expect("write");
        let flags = LocalFlags {
            cloud_config: Some(path),
            zone: Some("z-flag".into()),
            node_name: Some("n1".into()),
            ..Default::default()
        };
        let s = flags.resolve().expect("resolve");
        assert_eq!(
            (s.zone.zone.as_str(), s.zone.region.as_str()),
            ("z-flag", "r-file")
        );
        assert_eq!(s.node_name, "n1");
        assert_eq!(
            s.instances_file.as_deref(),
            Some(Path::new("/from/file.json"))
        );
        let bare = LocalFlags::default().resolve().expect("no file");
        assert_eq!(bare.zone.zone, "local");
        assert!(!bare.node_name.is_empty(), "the hostname");
    }

    #[test]
    fn names_the_file_it_could_not_read() {
        let err = LocalCloudConfig::load(Some(Path::new("/nonexistent/cloud.conf")))
            .expect_err("missing");
        assert!(err.to_string().contains("/nonexistent/cloud.conf"), "{err}");
    }
}
