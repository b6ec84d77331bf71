//! vSphere as the registry sees it: the vCenters of `vsphere.conf` — their VMs for the
//! ccm, CNS volumes for the CSI controller, Deckhouse's discovery data for the
//! discoverer. Nothing is contacted when opened: the first call logs in.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use overcast_cloud::{Cloud, CloudName, Zone};
use overcast_cloud_http::HttpSettings;
use overcast_provider::{NodeIdentity, Provider, Role, Settings, TopologyAliases};

use crate::cns::Cns;
use crate::config::{Config, Credentials, VirtualCenter};
use crate::credentials::{Credential, SecretSource};
use crate::discovery::VsphereDiscovery;
use crate::disks::{VsphereDisks, DEFAULT_MAX_VOLUMES};
use crate::instances::{Source, VsphereInstances};
use crate::session::{Login, Target, Vcenter};

/// What this crate gives the registry.
pub static PROVIDER: Vsphere = Vsphere;

pub struct Vsphere;

/// vCenter's default idle timeout is 30 minutes; a call every 10 keeps a quiet session.
const KEEPALIVE: Duration = Duration::from_secs(600);

/// A client of one configured vCenter, for a binary that holds no Kubernetes API token
/// (credentials from `secret-name` are refused, as vsphere-csi-driver reads none).
pub fn connect(
    vc: &VirtualCenter,
    metrics: Option<Arc<overcast_cloud_http::ApiMetrics>>,
) -> anyhow::Result<Arc<Vcenter>> {
    connect_via(vc, metrics, None)
}

/// The Kubernetes API a binary reads the credentials Secret from.
#[derive(Debug, Clone, Default)]
pub struct KubeAccess {
    /// Its `--kubeconfig`; in-cluster configuration when `None`.
    pub kubeconfig: Option<PathBuf>,
}

/// A client of one configured vCenter; `kube` is where `secret-name` is read (the ccm's
/// and the discoverer's API; `None` for the CSI driver).
pub fn connect_via(
    vc: &VirtualCenter,
    metrics: Option<Arc<overcast_cloud_http::ApiMetrics>>,
    kube: Option<&KubeAccess>,
) -> anyhow::Result<Arc<Vcenter>> {
    let login = match (&vc.credentials, kube) {
        (Credentials::Inline { user, password }, _) => Login::Password(Credential {
            user: user.clone(),
            password: password.clone(),
        }),
        (Credentials::Directory(dir), _) => Login::Directory(dir.clone()),
        (Credentials::Secret { name, namespace }, Some(kube)) => Login::Secret(Arc::new(
            SecretSource::new(namespace.clone(), name.clone(), kube.kubeconfig.clone()),
        )),
        (Credentials::Secret { name, namespace }, None) => anyhow::bail!(
            "vCenter {:?}: credentials from secret {namespace}/{name} are read through the \
             Kubernetes API, which the CSI driver does not talk to (nor does \
             vsphere-csi-driver): mount that Secret and name it with secrets-directory, or \
             give user and password in vsphere.conf (or VSPHERE_USER / VSPHERE_PASSWORD)",
            vc.name
        ),
    };
    let mut settings = HttpSettings::new("vsphere");
    settings.insecure = vc.insecure;
    if let Some(ca) = &vc.ca_file {
        settings.ca_pem = Some(std::fs::read_to_string(ca).map_err(|e| {
            anyhow::anyhow!("vCenter {:?}: ca-file {}: {e}", vc.name, ca.display())
        })?);
    }
    settings.thumbprint = vc.thumbprint.clone();
    Ok(Vcenter::new(
        Target {
            server: vc.server.clone(),
            port: vc.port,
            login,
            keepalive: KEEPALIVE,
        },
        settings,
        metrics,
    )?)
}

#[async_trait::async_trait]
impl Provider for Vsphere {
    fn name(&self) -> CloudName {
        CloudName::Vsphere
    }

    fn config_keys(&self) -> overcast_cloud::config::FileKeys {
        crate::config::file_keys()
    }

    /// The node id is the node name (the VM's guest host name, as the ccm names nodes).
    /// When the configuration names zone or region tag categories, the node's place is
    /// the one the ccm labelled its Node with from those tags (`--zone`/`--region` when
    /// given): the node plugin talks to no vCenter. Without them (or without the file),
    /// nodes and volumes have no place.
    fn node_identity(&self, s: &Settings) -> anyhow::Result<NodeIdentity> {
        let zoned = match s.cloud_config.as_deref() {
            Some(path) => Config::load(Some(path))?.zoned(),
            None => false,
        };
        Ok(NodeIdentity {
            node_id: s.node_name(),
            zone: match s.zone_flag() {
                Some(z) => Some(z),
                None if zoned => None,
                None => Some(Zone::default()),
            },
            instance_id_from: None,
            disk_of_volume: overcast_cloud::DiskOfVolume::Unknown,
        })
    }

    /// vsphere-csi-driver's keys for this configuration's `[Labels]` (see
    /// [`Config::topology_aliases`]); none without a configuration file.
    fn topology_aliases(&self, s: &Settings) -> anyhow::Result<TopologyAliases> {
        let Some(path) = s.cloud_config.as_deref() else {
            return Ok(TopologyAliases::default());
        };
        let (zone, region) = Config::load(Some(path))?.topology_aliases();
        Ok(TopologyAliases { zone, region })
    }

    /// Upstream's 59 volumes a node.
    fn default_attach_limit(&self, _s: &Settings) -> Option<u64> {
        Some(DEFAULT_MAX_VOLUMES)
    }

    async fn open(&self, role: Role, s: &Settings) -> anyhow::Result<Cloud> {
        let config = Config::load(s.cloud_config.as_deref())?;
        if !config.unknown.is_empty() {
            tracing::warn!(cloud = "vsphere", keys = ?config.unknown, "the cloud config has keys this version does not know; ignored");
        }
        let kube = KubeAccess {
            kubeconfig: s.kubeconfig.clone(),
        };
        // The cluster id CNS volumes carry: vsphere-csi-driver's `[Global] cluster-id`
        // when the file carries it over, else `--cluster`. Volumes of any other id are
        // another cluster's: never listed nor touched.
        let cluster_id = config
            .cluster_id
            .clone()
            .unwrap_or_else(|| s.cluster.clone());
        if matches!(role, Role::CsiController | Role::Discoverer) && cluster_id != s.cluster {
            tracing::info!(
                cluster_id = %cluster_id,
                cluster = %s.cluster,
                "CNS volumes are this cluster's by [Global] cluster-id, not --cluster"
            );
        }
        match role {
            Role::Ccm => {
                let mut sources = Vec::new();
                for vc in &config.vcenters {
                    let client = connect_via(vc, Some(Arc::clone(&s.api_metrics)), Some(&kube))?;
                    sources.push(Source::new(
                        client,
                        vc.datacenters.clone(),
                        vc.ip_family.clone(),
                    ));
                }
                Ok(Cloud {
                    name: CloudName::Vsphere.as_str(),
                    instances: Some(Arc::new(VsphereInstances::new(sources, &config))),
                    ..Cloud::default()
                })
            }
            // CNS volumes on the first vCenter (CNS volumes live in one vCenter; several
            // are not served by the CSI driver yet), recorded with the cluster's name.
            Role::CsiController => {
                let vc = &config.vcenters[0];
                if config.vcenters.len() > 1 {
                    tracing::warn!(vcenter = %vc.name, "several vCenters configured: the CSI driver uses the first");
                }
                let client = connect(vc, Some(Arc::clone(&s.api_metrics)))?;
                let disks =
                    VsphereDisks::new(Cns::new(client), cluster_id, s.max_attachments_per_node)
                        .with_topology(&config)
                        .with_max_snapshots(config.max_snapshots);
                Ok(Cloud {
                    name: CloudName::Vsphere.as_str(),
                    disks: Some(Arc::new(match &s.controller_state_dir {
                        Some(dir) => disks.with_state_dir(dir.clone()),
                        None => disks,
                    })),
                    ..Cloud::default()
                })
            }
            // Deckhouse's discovery data for the first vCenter's first datacenter.
            Role::Discoverer => {
                let vc = &config.vcenters[0];
                let client = connect_via(vc, Some(Arc::clone(&s.api_metrics)), Some(&kube))?;
                Ok(Cloud {
                    name: CloudName::Vsphere.as_str(),
                    discovery: Some(Arc::new(VsphereDiscovery::new(
                        client,
                        vc.datacenters[0].clone(),
                        config.zone_category.clone(),
                        cluster_id,
                    ))),
                    ..Cloud::default()
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_reads_its_place_from_its_node_only_when_tags_name_zones() {
        let dir = tempfile::tempdir().unwrap();
        let conf = |labels: &str| {
            let path = dir.path().join("vsphere.conf");
            std::fs::write(
                &path,
                format!("[Global]\nuser = u\npassword = p\n[VirtualCenter \"vc\"]\ndatacenters = DC0\n{labels}"),
            )
            .unwrap();
            let mut s = Settings::new(CloudName::Vsphere);
            s.cloud_config = Some(path);
            s
        };
        let zoned = conf("[Labels]\nzone = k8s-zone\nregion = k8s-region\ntopology-categories = k8s-zone,k8s-region\n");
        assert_eq!(PROVIDER.node_identity(&zoned).unwrap().zone, None);
        let aliases = PROVIDER.topology_aliases(&zoned).unwrap();
        assert_eq!(aliases.zone, ["topology.csi.vmware.com/k8s-zone"]);
        assert_eq!(aliases.region, ["topology.csi.vmware.com/k8s-region"]);
        // `--zone` wins; no categories, or no file: no place, and no API asked.
        let mut flagged = zoned.clone();
        flagged.zone = Some("z".into());
        assert_eq!(
            PROVIDER.node_identity(&flagged).unwrap().zone.unwrap().zone,
            "z"
        );
        let plain = conf("");
        assert_eq!(
            PROVIDER.node_identity(&plain).unwrap().zone,
            Some(Zone::default())
        );
        let none = Settings::new(CloudName::Vsphere);
        assert_eq!(
            PROVIDER.node_identity(&none).unwrap().zone,
            Some(Zone::default())
        );
        assert_eq!(
            PROVIDER.topology_aliases(&none).unwrap(),
            TopologyAliases::default()
        );
    }

    #[test]
    fn a_secret_named_in_the_config_is_read_where_the_binary_has_the_api_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vsphere.conf");
        std::fs::write(
            &path,
            "[Global]\nsecret-name = vc-creds\nsecret-namespace = kube-system\n\
             [VirtualCenter \"vc.example.com\"]\ndatacenters = DC0\n",
        )
        .unwrap();
        let config = Config::load_with(Some(&path), &|_| None).unwrap();
        let vc = &config.vcenters[0];
        // The CSI driver holds no API token: refused, saying what to do instead.
        let e = connect(vc, None).unwrap_err().to_string();
        assert!(
            e.contains("kube-system/vc-creds") && e.contains("secrets-directory"),
            "{e}"
        );
        // The ccm and the discoverer read it (nothing is contacted until the first login).
        let client = connect_via(vc, None, Some(&KubeAccess::default())).unwrap();
        assert!(format!("{client:?}").contains("Secret { kube-system/vc-creds }"));
    }
}
