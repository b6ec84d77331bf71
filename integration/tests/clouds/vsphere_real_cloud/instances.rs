use super::sim::{self, Guest, Rest};
use super::*;
use overcast_cloud::{AddressType, InstanceState, Instances};
use overcast_cloud_vsphere::config::Config;
use overcast_cloud_vsphere::instances::{Source, VsphereInstances};
use overcast_cloud_vsphere::inventory::View;
use overcast_cloud_vsphere::soap::Moref;
use overcast_cloud_vsphere::vms::{snapshot, VIEW_TYPES};

/// The cluster and the datacenter of vcsim's default inventory.
async fn places(vc: &Arc<Vcenter>) -> (Moref, Moref) {
    let snap = snapshot(&View::new(Arc::clone(vc), VIEW_TYPES))
        .await
        .unwrap();
    let pick = |kind: &str| {
        snap.entities
            .keys()
            .find(|m| m.kind == kind)
            .cloned()
            .unwrap_or_else(|| panic!("a {kind}"))
    };
    (pick("ClusterComputeResource"), pick("Datacenter"))
}

fn provider(sim: &Vcsim, dir: &std::path::Path, metrics: &Arc<ApiMetrics>) -> VsphereInstances {
    let conf = sim.conf(dir, "[Labels]\nzone = k8s-zone\nregion = k8s-region\n");
    let config = Config::load_with(Some(&conf), &|_| None).unwrap();
    let vc = &config.vcenters[0];
    let client = overcast_cloud_vsphere::provider::connect(vc, Some(Arc::clone(metrics))).unwrap();
    VsphereInstances::new(
        vec![Source::new(
            client,
            vc.datacenters.clone(),
            vc.ip_family.clone(),
        )],
        &config,
    )
}

/// Nodes as upstream's CPI names them: providerID from the BIOS UUID, the instance type
/// from the VM's shape and guest, the guest's addresses, zone and region from the tags
/// on its cluster and datacenter; a powered-off VM is shut down; a sync is one
/// PropertyCollector call and one tag call.
#[tokio::test]
async fn vms_become_instances_with_upstreams_identity_and_tag_zones() {
    let Some(sim) = Vcsim::start("instances", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let vms = sim::vms(&admin).await;
    let (cluster, dc) = places(&admin).await;
    let rest = Rest::login(&sim).await;
    let zones = rest.category("k8s-zone").await;
    let regions = rest.category("k8s-region").await;
    rest.tag(&zones, "zone-a", &cluster).await;
    rest.tag(&regions, "region-1", &dc).await;
    // The first VM of the cluster (`DC0_C0_RP0_VM0`) and of the standalone host.
    let in_cluster = vms
        .iter()
        .find(|(n, _)| n.contains("_C0_"))
        .unwrap()
        .1
        .clone();
    let standalone = vms
        .iter()
        .find(|(n, _)| n.contains("_H0_"))
        .unwrap()
        .1
        .clone();
    sim::reconfigure(
        &admin,
        &in_cluster,
        &Guest {
            host_name: "node-a",
            ip: "10.0.0.5",
            guest_id: "ubuntu64Guest",
            cpus: 2,
            memory_mb: 4096,
        },
    )
    .await;
    sim::power_off(&admin, &standalone).await;

    let dir = tempfile::tempdir().unwrap();
    let instances = provider(&sim, dir.path(), &metrics);
    let all = instances.list_instances().await.unwrap();
    assert_eq!(all.len(), 4, "{all:#?}");
    let a = all
        .iter()
        .find(|i| i.node_name == "node-a")
        .expect("node-a by its guest host name");
    assert!(
        a.provider_id.starts_with("vsphere://") && a.provider_id.len() == "vsphere://".len() + 36,
        "{}",
        a.provider_id
    );
    assert_eq!(a.provider_id, a.provider_id.to_lowercase());
    assert_eq!(a.instance_type, "vsphere-vm.cpu-2.mem-4gb.os-ubuntu");
    let kinds: Vec<(AddressType, &str)> = a
        .addresses
        .iter()
        .map(|x| (x.kind, x.address.as_str()))
        .collect();
    assert!(
        kinds.contains(&(AddressType::Hostname, "node-a")),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(AddressType::InternalIP, "10.0.0.5")),
        "{kinds:?}"
    );
    let z = a.zone.clone().expect("a zone from the cluster's tag");
    assert_eq!((z.zone.as_str(), z.region.as_str()), ("zone-a", "region-1"));
    assert_eq!(a.state, InstanceState::Running);
    let off = all
        .iter()
        .find(|i| i.state == InstanceState::Shutdown)
        .expect("the powered-off VM");
    let z = off.zone.clone().expect("the datacenter's region");
    assert_eq!(
        (z.zone.as_str(), z.region.as_str()),
        ("", "region-1"),
        "the standalone host is in no tagged cluster"
    );
    assert!(
        off.addresses.is_empty(),
        "no guest addresses reported: {:?}",
        off.addresses
    );

    // Warm: one PropertyCollector call and one tag call a sync.
    let before = metrics.total();
    instances.list_instances().await.unwrap();
    assert_eq!(metrics.total() - before, 2);
    assert_eq!(metrics.requests("RetrievePropertiesEx"), 2);
    // The instance rules of the conformance suite, for the node the CSI node plugin on
    // that VM reports (its guest host name).
    overcast_cloud::conformance::instances(&instances, "node-a").await;
}

/// A session the vCenter ended is logged into again (once) and the view made again; a
/// vCenter that stops answering fails the listing rather than shortening it.
#[tokio::test]
async fn an_ended_session_is_renewed_and_a_silent_vcenter_lists_nothing_gone() {
    let Some(mut sim) = Vcsim::start("session", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let dir = tempfile::tempdir().unwrap();
    let instances = provider(&sim, dir.path(), &metrics);
    assert_eq!(instances.list_instances().await.unwrap().len(), 4);
    assert_eq!(metrics.requests("Login"), 1);
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    sim::terminate_other_sessions(&admin).await;
    assert_eq!(instances.list_instances().await.unwrap().len(), 4);
    assert_eq!(
        metrics.requests("Login"),
        2,
        "logged in again after the session ended"
    );
    // The old view is unknown (ManagedObjectNotFound), making a new one in the ended
    // session is refused (NotAuthenticated), and after the login it is made: three.
    assert_eq!(
        metrics.requests("CreateContainerView"),
        3,
        "the view made again in the new session"
    );

    sim.stop();
    let e = instances.list_instances().await.unwrap_err();
    assert!(
        matches!(
            e,
            overcast_cloud::CloudError::Unavailable(_)
                | overcast_cloud::CloudError::DeadlineExceeded(_)
        ),
        "{e:?}"
    );
    // Back with a fresh inventory (vcsim keeps nothing): its sessions are new, ours is
    // unknown to it, and the listing recovers.
    sim.restart();
    assert_eq!(instances.list_instances().await.unwrap().len(), 4);
}

/// Credentials from a mounted Secret (`secrets-directory`, upstream's key format) are read
/// at each login: refused ones are Unauthenticated (never "gone"), and a rotated Secret is
/// used from the next login on.
#[tokio::test]
async fn credentials_from_a_secrets_directory_are_read_at_each_login() {
    let Some(sim) = Vcsim::start(
        "secrets-directory",
        &["-username", "k8s", "-password", "right"],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secret");
    std::fs::create_dir(&secrets).unwrap();
    std::fs::write(secrets.join("127.0.0.1.username"), "k8s\n").unwrap();
    std::fs::write(secrets.join("127.0.0.1.password"), "wrong\n").unwrap();
    let conf = dir.path().join("vsphere.conf");
    std::fs::write(
        &conf,
        format!(
            "global:\n  port: {}\n  caFile: {}\n  secretsDirectory: {}\nvcenter:\n  main:\n    server: 127.0.0.1\n    datacenters: [DC0]\n",
            sim.port,
            sim.ca_file.display(),
            secrets.display()
        ),
    )
    .unwrap();
    let config = Config::load_with(Some(&conf), &|_| None).unwrap();
    let vc = &config.vcenters[0];
    let client = overcast_cloud_vsphere::provider::connect(vc, None).unwrap();
    let instances = VsphereInstances::new(
        vec![Source::new(
            client,
            vc.datacenters.clone(),
            vc.ip_family.clone(),
        )],
        &config,
    );
    let e = instances.list_instances().await.unwrap_err();
    assert!(
        matches!(e, overcast_cloud::CloudError::Unauthenticated(_)),
        "{e:?}"
    );
    assert!(!e.to_string().contains("wrong"), "{e}");
    std::fs::write(secrets.join("127.0.0.1.password"), "right\n").unwrap();
    assert_eq!(instances.list_instances().await.unwrap().len(), 4);
}

/// An idle session is kept alive: once logged in, the client calls `CurrentTime` every
/// keep-alive period, and stops when it is dropped.
#[tokio::test]
async fn an_idle_session_is_kept_alive_until_the_client_goes() {
    let Some(sim) = Vcsim::start("keep-alive", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let mut settings = HttpSettings::new("vsphere");
    settings.ca_pem = Some(std::fs::read_to_string(&sim.ca_file).unwrap());
    let vc = Vcenter::new(
        Target {
            server: "127.0.0.1".into(),
            port: sim.port,
            login: Login::Password(Credential {
                user: "user".into(),
                password: "pass".into(),
            }),
            keepalive: Duration::from_millis(300),
        },
        settings,
        Some(Arc::clone(&metrics)),
    )
    .unwrap();
    assert_eq!(sim::vms(&vc).await.len(), 4);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let kept = metrics.requests("CurrentTime");
    assert!(kept >= 2, "{kept} keep-alive calls in 1.1 s at 300 ms");
    drop(vc);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let after = metrics.requests("CurrentTime");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(
        metrics.requests("CurrentTime"),
        after,
        "no calls once the client is gone"
    );
}
