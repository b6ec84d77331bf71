//! Command-line flags, in the kubernetes-csi spelling; each also reads an environment
//! variable so manifests can set them either way.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use overcast_cloud::CloudName;
use overcast_runtime::LogFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Identity + Controller: runs next to the cloud credentials.
    Controller,
    /// Identity + Node: runs on every node, needs no cloud.
    Node,
    /// All three services in one process (a single-node cluster, tests).
    All,
}

impl Mode {
    pub fn controller(self) -> bool {
        matches!(self, Self::Controller | Self::All)
    }

    pub fn node(self) -> bool {
        matches!(self, Self::Node | Self::All)
    }
}

#[derive(Debug, Clone, Parser)]
#[command(name = "csi", version, about = "Overcast CSI driver")]
pub struct Options {
    /// Where to serve CSI: unix:///path/to/csi.sock.
    #[arg(long, env = "CSI_ENDPOINT", default_value = "unix:///csi/csi.sock")]
    pub endpoint: String,

    /// Which CSI services to serve.
    #[arg(long, env = "CSI_MODE", value_enum, default_value = "all")]
    pub mode: Mode,

    /// The driver's name (GetPluginInfo, CSIDriver object, StorageClass provisioner).
    /// Default: the cloud's upstream driver's, as its overlay sets it — local:
    /// local.csi.overcast.dev, dvp: csi.dvp.deckhouse.io, openstack:
    /// cinder.csi.openstack.org, vsphere: csi.vsphere.vmware.com, zvirt: csi.ovirt.org.
    #[arg(long, env = "CSI_DRIVER_NAME")]
    pub driver_name: Option<String>,

    /// This node's id as the cloud knows it; defaults to the hostname.
    #[arg(long, env = "KUBE_NODE_NAME")]
    pub node_id: Option<String>,

    /// Which cloud provider to use: local, dvp, openstack, vsphere, zvirt (the same
    /// name and variable in every binary; `CSI_CLOUD` is read when this is unset, as
    /// earlier manifests set it).
    #[arg(long, env = "OVERCAST_CLOUD")]
    pub cloud: Option<CloudName>,

    /// Local cloud: the directory holding disk files and the metadata store.
    #[arg(long, env = "CSI_STATE_DIR", default_value = "/var/lib/overcast/local")]
    pub state_dir: PathBuf,

    /// Controller: where what must outlive a restart of the process is kept (vSphere:
    /// the tasks of creates and snapshot cuts in flight, so a retry waits for them rather
    /// than making a second volume or snapshot; the snapshot each restored volume was made
    /// from, which CNS does not say back). The manifests mount an emptyDir, kept across
    /// container restarts.
    /// Unset: in memory only.
    #[arg(long, env = "CSI_CONTROLLER_STATE_DIR")]
    pub controller_state_dir: Option<PathBuf>,

    /// Node: where the node service records what it staged and published.
    #[arg(
        long,
        env = "CSI_NODE_STATE_DIR",
        default_value = "/var/lib/overcast/node"
    )]
    pub node_state_dir: PathBuf,

    /// Node: where disks are linked by their serial (udev's directory; a test's
    /// simulated cloud points elsewhere).
    #[arg(long, env = "CSI_DEVICE_BY_ID_DIR", default_value = "/dev/disk/by-id")]
    pub device_by_id_dir: PathBuf,

    /// Node: where the kernel takes rescan requests (`class/scsi_host/*/scan` when an
    /// attached disk does not appear, `block/*/device/rescan` on resize); a test stands
    /// in for the kernel elsewhere.
    #[arg(long, env = "CSI_SYSFS_DIR", default_value = "/sys")]
    pub sysfs_dir: PathBuf,

    /// Node: on NodeExpandVolume, ask the kernel to read the size of a disk still smaller
    /// than its volume (some hypervisors grow an attached disk without telling the
    /// guest). Default: the cloud's (OpenStack: `[BlockStorage] rescan-on-resize`), else
    /// false.
    #[arg(long, env = "CSI_RESCAN_ON_RESIZE", num_args = 0..=1, default_missing_value = "true")]
    pub rescan_on_resize: Option<bool>,

    /// Node: how long NodeStageVolume waits for an attached disk to appear.
    #[arg(long, env = "CSI_DEVICE_WAIT_SECONDS", default_value_t = 30)]
    pub device_wait_seconds: u64,

    /// The cloud's configuration file (the Secret the manifests mount); for the local
    /// cloud a YAML map of zone, region, instancesFile, loadBalancerPool.
    #[arg(long, env = "CLOUD_CONFIG")]
    pub cloud_config: Option<PathBuf>,

    /// The zone this host is in (topology.kubernetes.io/zone). Local cloud: overrides the
    /// cloud-config file, `local` when neither names one. OpenStack, zVirt: overrides the
    /// Node's labels.
    #[arg(long, env = "CSI_ZONE")]
    pub zone: Option<String>,

    /// Node: the kubeconfig to read this node's zone labels with (a cloud whose node
    /// plugin holds no credentials: DVP) and, on a cloud whose volume ids do not name
    /// their disks (vSphere, DVP), a volume's VolumeAttachment to this node when a mount
    /// has no record; in-cluster configuration when unset.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Node (DVP): how long NodeGetInfo waits for the cloud-controller-manager to
    /// initialize this node (and label its zone) before answering UNAVAILABLE.
    #[arg(long, env = "CSI_NODE_ZONE_WAIT_SECONDS", default_value_t = 60)]
    pub node_zone_wait_seconds: u64,

    /// The region this host is in (topology.kubernetes.io/region); as --zone (zVirt: the
    /// cluster's data center, read with --zone).
    #[arg(long, env = "CSI_REGION")]
    pub region: Option<String>,

    /// How many volumes one node can have attached (NodeGetInfo, and the local
    /// cloud's attach limit); default: the cloud's (OpenStack: `[BlockStorage]
    /// node-volume-attach-limit` of the cloud-config when given, else cinder-csi-plugin's
    /// 256), else 128.
    #[arg(long, env = "CSI_MAX_VOLUMES_PER_NODE")]
    pub max_volumes_per_node: Option<u64>,

    /// The cluster's name, recorded on the disks made for it (cinder-csi-plugin's
    /// `--cluster`: the `cinder.csi.openstack.org/cluster` metadata on OpenStack).
    #[arg(long, env = "CLUSTER_NAME", default_value = "kubernetes")]
    pub cluster: String,

    /// Size of a volume whose CreateVolume names no capacity.
    #[arg(long, env = "CSI_DEFAULT_VOLUME_SIZE", default_value_t = 1 << 30)]
    pub default_volume_size: u64,

    /// Log format: text or json.
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,

    /// Serve Prometheus metrics and /healthz on this address (off when unset).
    #[arg(long, env = "CSI_METRICS_ADDRESS")]
    pub metrics_address: Option<SocketAddr>,
}

impl Options {
    /// The cloud: `--cloud`/`OVERCAST_CLOUD`, else the older `CSI_CLOUD`, else local.
    pub fn cloud(&self) -> Result<CloudName, String> {
        match (&self.cloud, std::env::var("CSI_CLOUD")) {
            (Some(c), _) => Ok(*c),
            (None, Ok(old)) => old.parse(),
            (None, Err(_)) => Ok(CloudName::Local),
        }
    }

    /// The driver's name: `--driver-name`, else the cloud's upstream name.
    pub fn driver_name(&self) -> Result<String, String> {
        match &self.driver_name {
            Some(name) => Ok(name.clone()),
            None => Ok(default_driver_name(self.cloud()?).to_owned()),
        }
    }

    pub fn node_id(&self) -> String {
        self.node_id
            .clone()
            .unwrap_or_else(overcast_runtime::host::hostname_or_localhost)
    }
}

/// Each cloud's driver name when `--driver-name` is not given: the upstream driver's a
/// cluster switching to Overcast already has PersistentVolumes of (the overlays set the
/// same; a test holds them equal).
pub fn default_driver_name(cloud: CloudName) -> &'static str {
    match cloud {
        CloudName::Local => "local.csi.overcast.dev",
        // Deckhouse's cloud-provider-dvp.
        CloudName::Dvp => "csi.dvp.deckhouse.io",
        // cloud-provider-openstack's cinder-csi-plugin.
        CloudName::Openstack => "cinder.csi.openstack.org",
        // vsphere-csi-driver.
        CloudName::Vsphere => "csi.vsphere.vmware.com",
        // ovirt-csi-driver, whose name Deckhouse's zVirt module keeps.
        CloudName::Zvirt => "csi.ovirt.org",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names each overlay gives `CSI_DRIVER_NAME`.
    fn overlay_names(cloud: CloudName) -> Vec<String> {
        let path =
            std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
                .join("../../deploy/overlays")
                .join(cloud.as_str())
                .join("kustomization.yaml");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        lines
            .windows(2)
            .filter(|w| w[0] == "- name: CSI_DRIVER_NAME")
            .map(|w| w[1].trim_start_matches("value:").trim().to_owned())
            .collect()
    }

    #[test]
    fn without_the_flag_each_cloud_is_its_upstream_driver_as_its_overlay_says() {
        for cloud in CloudName::ALL {
            let options = Options::parse_from(["csi", "--cloud", cloud.as_str()]);
            let name = options.driver_name().unwrap();
            assert_eq!(name, default_driver_name(cloud), "{cloud}");
            if cloud == CloudName::Local {
                continue;
            }
            let overlay = overlay_names(cloud);
            // The controller's and the node's.
            assert_eq!(overlay.len(), 2, "{cloud}: {overlay:?}");
            assert!(overlay.iter().all(|o| *o == name), "{cloud}: {overlay:?}");
        }
        let named = Options::parse_from(["csi", "--cloud", "openstack", "--driver-name", "x.y"]);
        assert_eq!(named.driver_name().unwrap(), "x.y");
    }
}
