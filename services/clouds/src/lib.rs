//! The registry: the one place a cloud name becomes a provider. Each provider crate
//! exports one [`Provider`] value that answers everything that differs between clouds;
//! a new cloud is its crate (`services/cloud-<name>`) plus one line in [`provider`], and
//! touches no service.

use overcast_cloud::{Cloud, CloudName};

pub use overcast_provider::{
    LocalOptions, NodeIdentity, Provider, Role, Settings, TopologyAliases,
};

/// The provider of `cloud`.
pub fn provider(cloud: CloudName) -> &'static dyn Provider {
    match cloud {
        CloudName::Local => &overcast_cloud_local::PROVIDER,
        CloudName::Dvp => &overcast_cloud_dvp::PROVIDER,
        CloudName::Openstack => &overcast_cloud_openstack::PROVIDER,
        CloudName::Vsphere => &overcast_cloud_vsphere::PROVIDER,
        CloudName::Zvirt => &overcast_cloud_zvirt::PROVIDER,
    }
}

/// The capabilities `role` needs from the cloud `s` names. What its configuration lacks
/// is said here, before anything is contacted.
pub async fn open(role: Role, s: &Settings) -> anyhow::Result<Cloud> {
    provider(s.cloud).open(role, s).await
}

/// This node's identity as its cloud gives it (the node plugin never reads another
/// cloud's configuration).
pub fn node_identity(s: &Settings) -> anyhow::Result<NodeIdentity> {
    provider(s.cloud).node_identity(s)
}

/// The keys, beyond the well-known ones, under which a cloud's CSI topology repeats the
/// zone and the region (the upstream driver's, so the PVs it made keep scheduling).
pub fn topology_aliases(s: &Settings) -> anyhow::Result<TopologyAliases> {
    provider(s.cloud).topology_aliases(s)
}

/// How many volumes a node of this cloud takes when no flag says.
pub fn default_attach_limit(s: &Settings) -> Option<u64> {
    provider(s.cloud).default_attach_limit(s)
}

/// Whether a node of this cloud rescans a disk whose size lags its volume's when no flag
/// says.
pub fn default_rescan_on_resize(s: &Settings) -> bool {
    provider(s.cloud).default_rescan_on_resize(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cloud_has_its_own_provider() {
        for c in CloudName::ALL {
            assert_eq!(provider(c).name(), c);
        }
    }

    #[tokio::test]
    async fn each_role_gets_its_capabilities_and_missing_settings_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Settings::new(CloudName::Local);
        s.local.state_dir = dir.path().join("state");
        s.node_name = Some("n1".into());
        s.zone = Some("z1".into());
        let ccm = open(Role::Ccm, &s).await.unwrap();
        assert!(ccm.instances.is_some() && ccm.load_balancers.is_some());
        assert!(ccm.disks.is_none() && ccm.discovery.is_none());
        let disc = open(Role::Discoverer, &s).await.unwrap();
        assert!(disc.discovery.is_some() && disc.instances.is_none());
        let me = node_identity(&s).unwrap();
        assert_eq!(me.node_id, "n1");
        assert_eq!(me.zone.unwrap().zone, "z1");
        s.local.lb_pool = Some("not a pool".into());
        let err = open(Role::Ccm, &s).await.err().unwrap().to_string();
        assert!(err.contains("--lb-pool"), "{err}");
        // DVP: its node plugin needs no configuration.
        let mut dvp = Settings::new(CloudName::Dvp);
        dvp.node_name = Some("worker-1".into());
        let me = node_identity(&dvp).unwrap();
        assert_eq!((me.node_id.as_str(), me.zone), ("worker-1", None));
        // Without a configuration, every real cloud says what is missing first.
        for c in CloudName::ALL
            .into_iter()
            .filter(|c| *c != CloudName::Local)
        {
            let s = Settings::new(c);
            for role in [Role::CsiController, Role::Ccm, Role::Discoverer] {
                let err = open(role, &s).await.err().unwrap().to_string();
                assert!(err.contains("lacks credentials or settings"), "{c}: {err}");
            }
        }
        let os = Settings::new(CloudName::Openstack);
        assert_eq!(
            topology_aliases(&os).unwrap().zone,
            ["topology.cinder.csi.openstack.org/zone"]
        );
        assert_eq!(default_attach_limit(&os), Some(256));
        assert_eq!(default_attach_limit(&dvp), None);
    }
}
