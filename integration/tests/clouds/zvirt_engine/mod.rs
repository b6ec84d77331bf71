//! The zVirt provider and the real `csi` binary against the faithful engine of
//! `sim/zvirt/src/` (no oVirt engine can run here): the provider
//! conformance suite; a volume's life through the binary to a real xfs mount of the
//! loop-backed disk the engine "plugs"; 16 concurrent creates of one name; the engine's
//! HTML error page and an expired token mid-run. Against a real engine the same provider
//! runs when `OVERCAST_TEST_ZVIRT_URL` (with `_USER`, `_PASSWORD`, `_STORAGE_DOMAIN`,
//! `_VM_ID`) is given: see `the_provider_passes_the_conformance_suite_on_a_real_engine`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use overcast_cloud::conformance::{self, DiskHarness, DiskState, DiskStates};
use overcast_cloud::{CloudError, DiskSpec, Disks, Zone};
use overcast_cloud_zvirt::{Config, EngineDisks, Waits};
use overcast_integration::zvirt_sim::{self, Engine, Latency};
use overcast_integration::{csi_v1 as csi, mount_cap, Csi};

const GIB: u64 = 1 << 30;

/// The provider against the engine's behaviour as its source has it.
mod engine_rules;
/// The provider's VMs for Cluster API.
mod machines;
/// `overcast-sim zvirt`, the program, as the quickstart runs it.
mod program;
/// An engine holding far more than this cluster: searched and paged, never read whole.
mod scale;
/// The engine hung, then refusing: the csi controller and the discoverer say so.
mod stalls;
/// A volume the oVirt CSI driver made, after the switch to ours.
mod upstream;
mod vm_lifecycle;

struct Sim {
    engine: Engine,
    url: String,
    by_id: std::path::PathBuf,
    dir: tempfile::TempDir,
}

impl Sim {
    /// The csi's, ccm's and discoverer's `--cloud-config` for this engine (upstream's YAML).
    fn cloud_config(&self) -> std::path::PathBuf {
        self.engine.cloud_config(self.dir.path())
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.engine.unplug_all();
    }
}

async fn sim(latency: Latency) -> Sim {
    let dir = tempfile::tempdir().unwrap();
    let by_id = dir.path().join("by-id");
    let disks = dir.path().join("disks");
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&disks).unwrap();
    let engine = Engine::new(&disks, &by_id, 200 * GIB, latency);
    let url = engine.start().await;
    Sim {
        engine,
        url,
        by_id,
        dir,
    }
}

fn config(url: &str, user: &str, password: &str) -> Config {
    let env = |k: &str| match k {
        "ZVIRT_API_URL" => Some(url.to_owned()),
        "ZVIRT_USERNAME" => Some(user.to_owned()),
        "ZVIRT_PASSWORD" => Some(password.to_owned()),
        _ => None,
    };
    Config::load(None, &env).unwrap()
}

fn disks(config: &Config) -> EngineDisks {
    let engine = overcast_cloud_zvirt::connect(config, None).unwrap();
    EngineDisks::new(
        engine,
        "overcast-it".into(),
        16,
        Waits {
            unlocked: Duration::from_secs(30),
            active: Duration::from_secs(30),
            gone: Duration::from_secs(30),
        },
    )
}

fn parameters(domain: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("storageDomainName".to_owned(), domain.to_owned()),
        ("thinProvisioning".to_owned(), "true".to_owned()),
    ])
}

/// The engine's in-between states for the conformance rules, as the engine shows them: a
/// disk `locked` while it is made (kept so past any deadline), `illegal` when making its
/// image failed, `locked` while it is removed (kept until released).
struct EngineStates(Engine);

#[async_trait::async_trait]
impl DiskStates for EngineStates {
    async fn hold_creates(&self, name: &str) -> bool {
        self.0.stick_locked(Some(name));
        true
    }
    async fn enter(&self, disk: &overcast_cloud::Disk, state: DiskState) -> bool {
        match state {
            DiskState::Creating => return false,
            DiskState::Failed => self.0.set_illegal(&disk.id),
            DiskState::Deleting => self.0.remove_held(&disk.id),
        }
        true
    }
    async fn release(&self, _disk: &overcast_cloud::Disk, state: DiskState) {
        match state {
            DiskState::Creating => {
                self.0.stick_locked(None);
                self.0.unstick_all();
            }
            DiskState::Deleting => self.0.finish_removals(),
            DiskState::Failed => {}
        }
    }
}

/// The conformance suite on the simulated engine (its latencies on: disks locked, and
/// attachments inactive, for a while).
#[tokio::test]
async fn the_provider_passes_the_conformance_suite_on_the_simulated_engine() {
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-0");
    let d = disks(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD));
    let h = DiskHarness {
        disks: Arc::new(d),
        node: vm,
        gone_node: "6f1c2d3e-4a5b-4c7d-8e9f-0a1b2c3d4e5f".into(),
        zone: Zone::default(),
        parameters: parameters("data"),
        prefix: "overcast-it-conf".into(),
        states: Some(Arc::new(EngineStates(s.engine.clone()))),
        held_for: Duration::from_secs(3),
    };
    conformance::disks(&h).await;
    assert!(s.engine.disks().is_empty(), "{:?}", s.engine.disks());
}

/// Against a real engine, when one is given.
#[tokio::test]
async fn the_provider_passes_the_conformance_suite_on_a_real_engine() {
    let var = |k: &str| std::env::var(format!("OVERCAST_TEST_ZVIRT_{k}")).ok();
    let (Some(url), Some(user), Some(password), Some(domain), Some(vm)) = (
        var("URL"),
        var("USER"),
        var("PASSWORD"),
        var("STORAGE_DOMAIN"),
        var("VM_ID"),
    ) else {
        overcast_integration::say_skipped(
            "set OVERCAST_TEST_ZVIRT_URL, _USER, _PASSWORD, _STORAGE_DOMAIN and _VM_ID to run the zVirt provider against a real engine",
        );
        return;
    };
    let h = DiskHarness {
        disks: Arc::new(disks(&config(&url, &user, &password))),
        node: vm,
        gone_node: "6f1c2d3e-4a5b-4c7d-8e9f-0a1b2c3d4e5f".into(),
        zone: Zone::default(),
        parameters: parameters(&domain),
        prefix: "overcast-it-conf".into(),
        // A real engine's states are its own: not played here.
        states: None,
        held_for: Duration::from_secs(3),
    };
    conformance::disks(&h).await;
}

/// Bad credentials are UNAUTHENTICATED-like and never retried into "gone"; the engine's
/// HTML page while it is down is Unavailable with a clear message, and nothing changes;
/// a token that expires mid-run is renewed once and the call goes through.
#[tokio::test]
async fn html_answers_wrong_passwords_and_expired_tokens_are_typed_and_lose_nothing() {
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-0");
    let wrong = disks(&config(&s.url, zvirt_sim::USER, "not-the-password"));
    let e = wrong.probe().await.unwrap_err();
    assert!(matches!(e, CloudError::Unauthenticated(_)), "{e:?}");
    assert!(!e.to_string().contains("not-the-password"), "{e}");

    let d = disks(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD));
    let made = d
        .create_disk(DiskSpec {
            name: "overcast-it-html".into(),
            size_bytes: GIB,
            zone: Zone::default(),
            parameters: parameters("data"),
            metadata: BTreeMap::new(),
            source: None,
        })
        .await
        .unwrap();
    s.engine.set_html(true);
    for e in [
        d.disk(&made.id).await.map(|_| ()).unwrap_err(),
        d.delete_disk(&made.id).await.unwrap_err(),
        d.attach_disk(&made.id, &vm, false)
            .await
            .map(|_| ())
            .unwrap_err(),
        d.list_disks().await.map(|_| ()).unwrap_err(),
    ] {
        assert!(matches!(e, CloudError::Unavailable(_)), "{e:?}");
        assert!(e.to_string().contains("instead of its API"), "{e}");
    }
    s.engine.set_html(false);
    assert_eq!(s.engine.disks().len(), 1, "nothing removed");
    let logins = s.engine.logins();
    s.engine.expire_tokens();
    assert_eq!(d.disk(&made.id).await.unwrap().id, made.id);
    assert_eq!(s.engine.logins(), logins + 1, "one renewal");
    d.delete_disk(&made.id).await.unwrap();
    assert!(s.engine.disks().is_empty());
}

/// The real csi binary (controller and node in one process, node id the VM's) through a
/// volume's life: 16 concurrent creates of one name make one disk; publish waits for the
/// attachment to be active; the disk the engine plugged (a loop device under its
/// `scsi-0QEMU_QEMU_HARDDISK_<id[:20]>` link) is formatted and mounted for real;
/// expanded in use and on the node; unpublished twice, and after its VM was removed;
/// the engine's HTML page answers UNAVAILABLE and loses nothing; a token expiry is
/// invisible; deleted twice.
#[tokio::test]
async fn the_csi_driver_runs_a_volume_s_life_on_the_simulated_engine() {
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-0");
    let conf = s.cloud_config();
    // Traced to the last line: neither the password nor a token may reach the log.
    let driver = Csi::start_with_env(
        &[
            "--cloud=zvirt",
            &format!("--cloud-config={}", conf.display()),
            &format!("--node-id={vm}"),
            &format!("--zone={}", zvirt_sim::CLUSTER),
            &format!("--region={}", zvirt_sim::DATA_CENTER),
            "--cluster=overcast-it",
            &format!("--device-by-id-dir={}", s.by_id.display()),
        ],
        &[("RUST_LOG", "trace")],
    )
    .await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);
    let info = n
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, vm);
    assert_eq!(
        info.accessible_topology.unwrap().segments,
        topology(zvirt_sim::CLUSTER, zvirt_sim::DATA_CENTER).segments
    );
    let mut create = overcast_integration::create_request("pvc-zvirt-life", GIB as i64);
    create.parameters = parameters("data").into_iter().collect();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let mut c = driver.controller().await;
        let req = create.clone();
        tasks.spawn(async move { c.create_volume(req).await });
    }
    while let Some(r) = tasks.join_next().await {
        if let Err(st) = r.unwrap() {
            assert_eq!(st.code(), tonic::Code::Aborted, "{st:?}");
        }
    }
    let volume = c
        .create_volume(create.clone())
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap();
    let id = volume.volume_id.clone();
    // Its PV names the data center of its storage domain alone.
    assert_eq!(
        volume.accessible_topology,
        vec![region(zvirt_sim::DATA_CENTER)]
    );
    let named: Vec<_> = s
        .engine
        .disks()
        .into_iter()
        .filter(|(_, alias, _)| alias == "pvc-zvirt-life")
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");

    // GetCapacity answers for the class's domain ("data", 200 GiB less the disk made),
    // and without parameters for the largest domain.
    s.engine.add_storage_domain("small", 5 * GIB, "nfs");
    for (parameters, want) in [
        (create.parameters.clone(), 199 * GIB),
        (
            [("storageDomainName".to_owned(), "small".to_owned())].into(),
            5 * GIB,
        ),
        (Default::default(), 199 * GIB),
    ] {
        let got = c
            .get_capacity(csi::GetCapacityRequest {
                parameters,
                ..Default::default()
            })
            .await
            .expect("capacity")
            .into_inner()
            .available_capacity;
        assert_eq!(got, want as i64);
    }

    let mut bad = create.clone();
    bad.name = "pvc-zvirt-bad".into();
    bad.parameters.remove("storageDomainName");
    assert_eq!(
        c.create_volume(bad).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );

    let publish = overcast_integration::attach_request(&id, &vm, mount_cap("xfs"));
    let ctx = c
        .controller_publish_volume(publish.clone())
        .await
        .expect("attach")
        .into_inner()
        .publish_context;
    let work = s.dir.path().join("work");
    let (staging, target) = (work.join("staging"), work.join("target"));
    std::fs::create_dir_all(&staging).unwrap();
    let _unmount = Unmount(work.clone());
    n.node_stage_volume(overcast_integration::stage_request(
        &id,
        &ctx,
        &staging,
        mount_cap("xfs"),
    ))
    .await
    .expect("stage");
    n.node_publish_volume(overcast_integration::node_publish_request(
        &id,
        &ctx,
        &staging,
        &target,
        mount_cap("xfs"),
    ))
    .await
    .expect("publish");
    std::fs::write(target.join("hello"), b"zvirt").unwrap();

    // The engine's proxy page while it is down: every controller RPC is UNAVAILABLE.
    s.engine.set_html(true);
    for code in [
        c.create_volume({
            let mut r = create.clone();
            r.name = "pvc-zvirt-html".into();
            r
        })
        .await
        .map(|_| ())
        .unwrap_err()
        .code(),
        c.delete_volume(overcast_integration::delete_request(&id))
            .await
            .map(|_| ())
            .unwrap_err()
            .code(),
        c.controller_expand_volume(overcast_integration::expand_request(&id, 2 * GIB as i64))
            .await
            .map(|_| ())
            .unwrap_err()
            .code(),
    ] {
        assert_eq!(code, tonic::Code::Unavailable);
    }
    s.engine.set_html(false);
    s.engine.expire_tokens();

    let grown = c
        .controller_expand_volume(overcast_integration::expand_request(&id, 2 * GIB as i64))
        .await
        .expect("expand in use")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 2 * GIB as i64);
    let expanded = n
        .node_expand_volume(csi::NodeExpandVolumeRequest {
            volume_id: id.clone(),
            volume_path: target.display().to_string(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 2 * GIB as i64,
                limit_bytes: 0,
            }),
            volume_capability: Some(mount_cap("xfs")),
            ..Default::default()
        })
        .await
        .expect("node expand")
        .into_inner();
    assert_eq!(expanded.capacity_bytes, 2 * GIB as i64);
    assert_eq!(std::fs::read(target.join("hello")).unwrap(), b"zvirt");

    n.node_unpublish_volume(overcast_integration::node_unpublish_request(&id, &target))
        .await
        .expect("unpublish");
    n.node_unstage_volume(overcast_integration::unstage_request(&id, &staging))
        .await
        .expect("unstage");
    let unpublish = overcast_integration::detach_request(&id, &vm);
    for _ in 0..2 {
        c.controller_unpublish_volume(unpublish.clone())
            .await
            .expect("detach, twice");
    }
    c.controller_publish_volume(publish)
        .await
        .expect("attach again");
    s.engine.remove_vm(&vm);
    c.controller_unpublish_volume(unpublish)
        .await
        .expect("detach from a removed VM");
    for _ in 0..2 {
        c.delete_volume(overcast_integration::delete_request(&id))
            .await
            .expect("delete, twice");
    }
    assert!(s.engine.disks().is_empty(), "{:?}", s.engine.disks());
    let log = driver.log_text();
    let tokens = s.engine.issued_tokens();
    assert!(
        tokens.len() >= 2,
        "a login, and one after expiry: {tokens:?}"
    );
    assert!(log.len() > 10_000, "traced: {} bytes", log.len());
    assert!(
        !log.contains(zvirt_sim::PASSWORD),
        "the password is in the log"
    );
    for t in &tokens {
        assert!(!log.contains(t.as_str()), "a token is in the log");
    }
    drop(driver);
}

/// A node's topology: its cluster, in its data center.
fn topology(cluster: &str, data_center: &str) -> csi::Topology {
    csi::Topology {
        segments: [
            ("topology.kubernetes.io/zone".to_owned(), cluster.to_owned()),
            (
                "topology.kubernetes.io/region".to_owned(),
                data_center.to_owned(),
            ),
        ]
        .into(),
    }
}

/// A disk's topology: the data center of its storage domain.
fn region(data_center: &str) -> csi::Topology {
    csi::Topology {
        segments: [(
            "topology.kubernetes.io/region".to_owned(),
            data_center.to_owned(),
        )]
        .into(),
    }
}

/// Two data centers, each with a cluster and a storage domain: a disk goes where its
/// class's domain is and nowhere else. A create whose requisite topologies are all in the
/// other data center is refused before anything is made (RESOURCE_EXHAUSTED); one that
/// names the domain's data center is made there, its PV naming that region, and a retry
/// answers the same disk (the name asked in the other data center is ALREADY_EXISTS);
/// capacity per topology is the domain's where it reaches and nothing elsewhere; the
/// engine's refusal to attach across data centers is FAILED_PRECONDITION, not a retryable
/// code.
#[tokio::test]
async fn volumes_go_to_the_data_center_of_their_storage_domain() {
    let s = sim(Latency::default()).await;
    s.engine.add_data_center("dc2");
    s.engine.add_cluster("cluster2", "dc2");
    s.engine
        .add_storage_domain_in("data2", 50 * GIB, "iscsi", "dc2");
    let vm1 = s.engine.add_vm("worker-1");
    let vm2 = s.engine.add_vm_in("worker-2", "cluster2");
    let conf = s.cloud_config();
    let driver = Csi::start(&[
        "--cloud=zvirt",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={vm2}"),
        "--zone=cluster2",
        "--region=dc2",
        "--cluster=overcast-it",
        &format!("--device-by-id-dir={}", s.by_id.display()),
    ])
    .await;
    let mut c = driver.controller().await;
    let (dc1, dc2) = (
        topology(zvirt_sim::CLUSTER, zvirt_sim::DATA_CENTER),
        topology("cluster2", "dc2"),
    );
    let create = |name: &str, domain: &str, requisite: Vec<csi::Topology>| {
        let mut r = overcast_integration::create_request(name, GIB as i64);
        r.parameters = parameters(domain).into_iter().collect();
        r.accessibility_requirements = Some(csi::TopologyRequirement {
            preferred: requisite.clone(),
            requisite,
        });
        r
    };

    let refused = c
        .create_volume(create("pvc-dc-wrong", "data2", vec![dc1.clone()]))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(refused.message().contains("dc2"), "{}", refused.message());
    assert!(s.engine.disks().is_empty(), "{:?}", s.engine.disks());

    // A domain the engine does not have has no place: the engine's own refusal answers.
    let unknown = c
        .create_volume(create(
            "pvc-dc-nowhere",
            "no-such-domain",
            vec![dc1.clone()],
        ))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::InvalidArgument, "{unknown:?}");
    assert!(s.engine.disks().is_empty(), "{:?}", s.engine.disks());

    // A disk larger than its domain's free space: the engine's "Low disk space" fault is
    // RESOURCE_EXHAUSTED, and nothing is left behind.
    let mut huge = create("pvc-dc-huge", "data2", vec![dc2.clone()]);
    huge.capacity_range = Some(csi::CapacityRange {
        required_bytes: 60 * GIB as i64,
        limit_bytes: 0,
    });
    let full = c.create_volume(huge).await.unwrap_err();
    assert_eq!(full.code(), tonic::Code::ResourceExhausted, "{full:?}");
    assert!(s.engine.disks().is_empty(), "{:?}", s.engine.disks());

    let both = create("pvc-dc-right", "data2", vec![dc1.clone(), dc2.clone()]);
    let made = c
        .create_volume(both.clone())
        .await
        .expect("create in dc2")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(made.accessible_topology, vec![region("dc2")]);
    let again = c
        .create_volume(both)
        .await
        .expect("retry")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(again.volume_id, made.volume_id);
    assert_eq!(again.accessible_topology, vec![region("dc2")]);
    // The same name asked in dc1 alone names a disk that is elsewhere: the spec's
    // ALREADY_EXISTS (incompatible accessibility_requirements), not a new disk.
    assert_eq!(
        c.create_volume(create("pvc-dc-right", "data2", vec![dc1.clone()]))
            .await
            .unwrap_err()
            .code(),
        tonic::Code::AlreadyExists
    );
    let home = c
        .create_volume(create("pvc-dc-home", "data", vec![dc1.clone()]))
        .await
        .expect("create in Default")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(
        home.accessible_topology,
        vec![region(zvirt_sim::DATA_CENTER)]
    );

    // Capacity as external-provisioner asks it, per node topology.
    for (topology, domain, want) in [
        (&dc2, Some("data2"), 49 * GIB),
        (&dc1, Some("data2"), 0),
        (&dc2, Some("data"), 0),
        (&dc1, Some("data"), 199 * GIB),
        (&dc2, None, 49 * GIB),
        (&dc1, None, 199 * GIB),
    ] {
        let got = c
            .get_capacity(csi::GetCapacityRequest {
                parameters: domain
                    .map(|d| parameters(d).into_iter().collect())
                    .unwrap_or_default(),
                accessible_topology: Some(topology.clone()),
                ..Default::default()
            })
            .await
            .expect("capacity")
            .into_inner()
            .available_capacity;
        assert_eq!(got, want as i64, "{topology:?} {domain:?}");
    }

    let publish = |volume: &str, node: &str| {
        overcast_integration::attach_request(volume, node, mount_cap("xfs"))
    };
    let across = c
        .controller_publish_volume(publish(&made.volume_id, &vm1))
        .await
        .unwrap_err();
    assert_eq!(across.code(), tonic::Code::FailedPrecondition, "{across:?}");
    c.controller_publish_volume(publish(&made.volume_id, &vm2))
        .await
        .expect("attach in dc2");
    c.controller_unpublish_volume(overcast_integration::detach_request(&made.volume_id, &vm2))
        .await
        .expect("detach");
    for id in [&made.volume_id, &home.volume_id] {
        c.delete_volume(overcast_integration::delete_request(id))
            .await
            .expect("delete");
    }
    assert!(s.engine.disks().is_empty(), "{:?}", s.engine.disks());
    drop(driver);
}

/// Unmounts whatever a failed test left under `dir`.
struct Unmount(std::path::PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        overcast_integration::unmount_under(&self.0);
    }
}

/// The real ccm against the simulated engine and a faithful in-process API server: Nodes
/// initialized from their VMs (providerID, addresses from the guest agent, instance type,
/// cluster as zone and data center as region), a `down` VM's Node tainted; while the
/// engine answers its HTML page nothing is deleted, and once it is back the Node of a
/// removed VM is.
#[tokio::test]
async fn the_ccm_initializes_nodes_from_vms_and_deletes_only_on_a_certain_answer() {
    use overcast_integration::fake_api::FakeApi;
    use serde_json::json;
    const NODES: &str = "/api/v1/nodes";
    let s = sim(Latency::default()).await;
    let w0 = s.engine.add_vm("worker-0");
    s.engine
        .set_vm_ips(&w0, &["10.1.0.10", "203.0.113.10", "fe80::1", "fd00::10"]);
    let w1 = s.engine.add_vm("worker-1");
    s.engine.set_vm_status(&w1, "down");
    s.engine.set_vm_instance_type(&w1, "Large");
    let gone = s.engine.add_vm("worker-gone");
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = s.dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    let node = |name: &str, ready: bool, uninitialized: bool| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"taints": if uninitialized {
                json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}])
            } else { json!([]) }},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
    };
    api.put(NODES, node("worker-0", true, true));
    api.put(NODES, node("worker-1", false, false));
    api.put(NODES, node("worker-gone", false, false));
    let conf = s.cloud_config();
    let log = s.dir.path().join("ccm.log");
    let port = overcast_integration::free_port();
    let _ccm = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("ccm"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--cloud=zvirt")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg("--controllers=node,node-lifecycle")
            .arg("--leader-elect=false")
            .arg("--node-sync-period=1")
            .arg("--node-deletion-max-percent=50")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let until = async |what: &str, f: &dyn Fn() -> bool| {
        assert!(
            overcast_integration::eventually(Duration::from_secs(20), f).await,
            "timed out waiting for {what}; ccm log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    // Initialization is two patches (metadata and spec, then status): both are waited for.
    until("worker-0 initialized", &|| {
        api.get(NODES, "worker-0").is_some_and(|n| {
            n["spec"]["providerID"] == format!("zvirt://{w0}")
                && n["status"]["addresses"].is_array()
        })
    })
    .await;
    let n0 = api.get(NODES, "worker-0").unwrap();
    let labels = &n0["metadata"]["labels"];
    assert_eq!(labels["topology.kubernetes.io/zone"], zvirt_sim::CLUSTER);
    assert_eq!(
        labels["topology.kubernetes.io/region"],
        zvirt_sim::DATA_CENTER
    );
    assert_eq!(
        labels["node.kubernetes.io/instance-type"],
        "zvirt-vm.cpu-2.mem-4gb"
    );
    assert_eq!(n0["spec"]["taints"], json!([]));
    let addresses: Vec<(String, String)> = n0["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["type"].as_str().unwrap().to_owned(),
                a["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for want in [
        ("InternalIP", "10.1.0.10"),
        ("ExternalIP", "203.0.113.10"),
        ("InternalIP", "fd00::10"),
        ("Hostname", "worker-0"),
    ] {
        assert!(
            addresses.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {addresses:?}"
        );
    }
    assert!(
        !addresses.iter().any(|(_, a)| a == "fe80::1"),
        "{addresses:?}"
    );
    until("worker-1 tainted as shut down", &|| {
        api.get(NODES, "worker-1").is_some_and(|n| {
            n["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["key"] == "node.cloudprovider.kubernetes.io/shutdown")
        })
    })
    .await;

    // The engine down behind its proxy, and a VM removed meanwhile: nothing is deleted
    // on answers that are not the engine's.
    s.engine.set_html(true);
    s.engine.remove_vm(&gone);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        api.get(NODES, "worker-gone").is_some(),
        "deleted on an HTML page"
    );
    assert!(api.get(NODES, "worker-0").is_some());
    s.engine.set_html(false);
    until("worker-gone deleted", &|| {
        api.get(NODES, "worker-gone").is_none()
    })
    .await;
    assert!(api.get(NODES, "worker-0").is_some());
    assert!(
        api.get(NODES, "worker-1").is_some(),
        "a down VM's Node stays"
    );
}

/// The real discoverer against the simulated engine and a faithful API server: the
/// discovery Secret's `ZvirtCloudProviderDiscoveryData` (the data domains by name, the
/// first the default, a domain the engine reports in error not enabled), the
/// InstanceTypesCatalog from the engine's instance types, the conditions, and this
/// cluster's disk no PV names reported as an orphan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discoverer_publishes_what_the_engine_holds() {
    use overcast_integration::fake_api::FakeApi;
    use serde_json::{json, Value};
    const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";
    const CATALOGS: &str = "/apis/deckhouse.io/v1alpha1/instancetypescatalogs";
    let s = sim(Latency::default()).await;
    s.engine.add_storage_domain("fast", 50 * GIB, "fcp");
    s.engine.add_storage_domain("broken", 50 * GIB, "iscsi");
    s.engine.set_storage_domain_status("broken", "error");
    let d = disks(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD));
    let orphan = d
        .create_disk(DiskSpec {
            name: "pvc-orphan".into(),
            size_bytes: GIB,
            zone: Zone::default(),
            parameters: parameters("data"),
            metadata: BTreeMap::from([(
                "csi.storage.k8s.io/pv/name".to_owned(),
                "pvc-orphan".to_owned(),
            )]),
            source: None,
        })
        .await
        .unwrap();
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = s.dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    let conf = s.cloud_config();
    let port = overcast_integration::free_port();
    let _discoverer = overcast_integration::KillOnDrop(
        std::process::Command::new(overcast_integration::binary("discoverer"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--cloud=zvirt")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg("--cluster=overcast-it")
            .arg("--discovery-period=1")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let document = || -> Option<Value> {
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(api.get(SECRETS, "d8-cloud-provider-discovery-data")?).ok()?;
        serde_json::from_slice(&secret.data?.get("discovery-data.json")?.0).ok()
    };
    assert!(
        overcast_integration::eventually(Duration::from_secs(20), || document().is_some()).await,
        "the discovery Secret"
    );
    let doc = document().unwrap();
    assert_eq!(doc["apiVersion"], "deckhouse.io/v1");
    assert_eq!(doc["kind"], "ZvirtCloudProviderDiscoveryData");
    assert_eq!(
        doc["storageDomains"],
        json!([
            {"name": "broken", "type": "iscsi", "isEnabled": false, "isDefault": true},
            {"name": "data", "type": "nfs", "isEnabled": true, "isDefault": false},
            {"name": "fast", "type": "fcp", "isEnabled": true, "isDefault": false},
        ])
    );
    assert!(
        overcast_integration::eventually(Duration::from_secs(10), || api
            .get(CATALOGS, "for-cluster-autoscaler")
            .is_some())
        .await
    );
    let catalog = api.get(CATALOGS, "for-cluster-autoscaler").unwrap();
    let names: Vec<&str> = catalog["instanceTypes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names.len(), zvirt_sim::INSTANCE_TYPES.len(), "{catalog}");
    let large = catalog["instanceTypes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Large")
        .unwrap();
    assert_eq!(large["memory"], "8192Mi", "{large}");
    let conditions = api.published_conditions().await;
    let ok = |name: &str| {
        conditions
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["ok"].clone())
    };
    assert_eq!(ok("auth"), Some(json!(true)), "{conditions:?}");
    assert_eq!(ok("engine-version"), Some(json!(true)), "{conditions:?}");
    assert_eq!(ok("storage-domains"), Some(json!(false)), "{conditions:?}");
    let metric = format!(
        "cloud_data_discovery_orphaned_disk_info{{id=\"{}\",name=\"pvc-orphan\"}} 1",
        orphan.id
    );
    assert!(
        overcast_integration::eventually(Duration::from_secs(10), || {
            overcast_integration::http_get(port, "/metrics")
                .1
                .contains(&metric)
        })
        .await,
        "{}",
        overcast_integration::http_get(port, "/metrics").1
    );
    d.delete_disk(&orphan.id).await.unwrap();
}

/// The engine's slow and stuck states: a disk that stays locked past the wait is a
/// retryable deadline, and the retry finds that disk instead of making another; answers
/// slower than an attempt's limit are retryable too; a token renewed before its expiry
/// never meets a 401.
#[tokio::test]
async fn a_stuck_disk_slow_answers_and_expiring_tokens_are_retried_and_make_nothing_twice() {
    let s = sim(Latency::default()).await;
    let cfg = config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD);
    let short = |attempt: Duration| {
        let mut settings = overcast_cloud_http::HttpSettings::new("zvirt");
        settings.attempt_timeout = attempt;
        settings.deadline = 3 * attempt;
        settings.retry_delay = Duration::from_millis(100);
        EngineDisks::new(
            overcast_cloud_zvirt::connect_with(&cfg, settings, None).unwrap(),
            "overcast-it".into(),
            16,
            Waits {
                unlocked: Duration::from_secs(1),
                active: Duration::from_secs(1),
                gone: Duration::from_secs(1),
            },
        )
    };
    let d = short(Duration::from_secs(2));
    let spec = DiskSpec {
        name: "pvc-stuck".into(),
        size_bytes: GIB,
        zone: Zone::default(),
        parameters: parameters("data"),
        metadata: BTreeMap::new(),
        source: None,
    };
    s.engine.stick_locked(Some("pvc-stuck"));
    for _ in 0..2 {
        let e = d.create_disk(spec.clone()).await.unwrap_err();
        assert!(
            matches!(e, CloudError::DeadlineExceeded(_)) && e.is_retryable(),
            "{e:?}"
        );
    }
    assert_eq!(s.engine.disks().len(), 1, "the retry found the locked disk");
    s.engine.unstick_all();
    let made = d.create_disk(spec).await.expect("unlocked at last");
    assert_eq!(s.engine.disks().len(), 1);

    // An attachment an admin deactivated is activated again by the next publish (the
    // engine would not by itself), not waited on until the deadline.
    let vm = s.engine.add_vm("worker-deactivated");
    d.attach_disk(&made.id, &vm, false).await.unwrap();
    s.engine.deactivate(&vm, &made.id);
    d.attach_disk(&made.id, &vm, false)
        .await
        .expect("activated again");
    d.detach_disk(&made.id, &vm).await.unwrap();

    s.engine.set_slow(Some(Duration::from_millis(800)));
    let e = short(Duration::from_millis(300))
        .disk(&made.id)
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    s.engine.set_slow(None);

    // Tokens of 61 s are renewed a minute early: after a second, the next call logs in
    // again first, and no call is answered 401.
    s.engine.set_token_ttl(Some(Duration::from_secs(61)));
    s.engine.expire_tokens();
    let fresh = short(Duration::from_secs(2));
    fresh.disk(&made.id).await.unwrap();
    let logins = s.engine.logins();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    fresh.disk(&made.id).await.unwrap();
    assert_eq!(s.engine.logins(), logins + 1, "renewed before it expired");
    assert_eq!(s.engine.unauthorized(), 0, "no 401 was needed");
    d.delete_disk(&made.id).await.unwrap();
}

/// The simulator's fidelity, checked by a client nobody here wrote: the official oVirt
/// Python SDK (`ovirt-engine-sdk-python` 4.6.3, XML) drives it through every call the
/// provider makes and must parse every answer (`tests/clouds/ovirt_sdk/drive.py`). Runs when
/// `OVERCAST_TEST_OVIRT_SDK` names the directory the SDK is installed in (`.ci/run`
/// builds it); says it was skipped otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_ovirt_sdk_parses_every_answer_of_the_simulated_engine() {
    let Ok(sdk) = std::env::var("OVERCAST_TEST_OVIRT_SDK") else {
        overcast_integration::say_skipped(
            "set OVERCAST_TEST_OVIRT_SDK to where ovirt-engine-sdk-python 4.6.3 is installed (.ci/run does) to check the engine simulator with the official SDK",
        );
        return;
    };
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("sdk-vm");
    s.engine.set_vm_ips(&vm, &["10.1.0.10", "fd00::10"]);
    s.engine.add_vm("sdk-vm-2");
    s.engine.add_template("sdk-template", 1 << 30);
    let profile = s.engine.add_vnic_profile("ovirtmgmt");
    let script = overcast_integration::package_dir().join("tests/clouds/ovirt_sdk/drive.py");
    let python =
        std::env::var("OVERCAST_TEST_OVIRT_SDK_PYTHON").unwrap_or("/usr/bin/python3".into());
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args([
            s.url.as_str(),
            zvirt_sim::USER,
            zvirt_sim::PASSWORD,
            "sdk-vm",
            "sdk-template",
            profile.as_str(),
        ])
        .env("PYTHONPATH", sdk)
        .output()
        .await
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("all calls parsed"),
        "the SDK failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = s.engine.calls();
    for route in [
        "GET /vms",
        "POST /disks",
        "PUT /disks/{id}",
        "POST /vms/{id}/diskattachments",
        "DELETE /vms/{id}/diskattachments/{id}",
        "GET /storagedomains",
        "GET /templates",
        "POST /vms",
        "POST /vms/{id}/nics",
        "POST /vms/{id}/start",
        "DELETE /vms/{id}",
    ] {
        assert!(calls.contains_key(route), "{route} not driven: {calls:?}");
    }
}

/// kubernetes-csi's csi-sanity against the real `csi` binary on the simulated engine,
/// mount and block mode, with the StorageClass parameters a zVirt class names: every spec
/// the driver's capabilities call for, with real attachments (loop devices) and mounts.
/// Runs when `OVERCAST_CSI_SANITY` names a csi-sanity binary.
#[tokio::test]
async fn csi_sanity_passes_on_the_simulated_engine() {
    let Ok(sanity) = std::env::var("OVERCAST_CSI_SANITY") else {
        overcast_integration::say_skipped(
            "set OVERCAST_CSI_SANITY to run csi-sanity against the zVirt provider",
        );
        return;
    };
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("sanity-vm");
    let conf = s.cloud_config();
    let params = s.dir.path().join("parameters.yaml");
    std::fs::write(
        &params,
        "storageDomainName: data\nthinProvisioning: \"true\"\n",
    )
    .unwrap();
    let csi = Csi::start(&[
        "--cloud=zvirt",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={vm}"),
        &format!("--zone={}", zvirt_sim::CLUSTER),
        &format!("--device-by-id-dir={}", s.by_id.display()),
    ])
    .await;
    let extra = [format!("--csi.testvolumeparameters={}", params.display())];
    for block in [false, true] {
        let run = overcast_integration::run_csi_sanity(&sanity, &csi, block, &extra, "zVirt").await;
        assert!(
            run.success && run.failures.is_empty(),
            "csi-sanity on zVirt (block {block}) failed: {:#?}\n{}",
            run.failures,
            run.tail
        );
        assert!(run.summary.contains(" 0 Failed"), "{}", run.summary);
    }
    drop(csi);
    assert!(s.engine.disks().is_empty(), "{:?}", s.engine.disks());
}

/// The instance rules of the conformance suite on the simulated engine, and the node
/// plugin as the zvirt overlay runs it — `--node-id` the Kubernetes node name, no
/// `--zone` — taking its VM id from its Node's `zvirt://<id>` and its zone from the label
/// the ccm set (a faithful in-process API server plays Kubernetes).
#[tokio::test]
async fn instances_conform_and_the_node_plugin_takes_its_vm_id_from_its_node() {
    use overcast_integration::fake_api::FakeApi;
    use serde_json::json;
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-7");
    s.engine.add_vm("worker-8");
    let engine =
        overcast_cloud_zvirt::connect(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD), None)
            .unwrap();
    let instances = overcast_cloud_zvirt::EngineInstances::new(engine);
    conformance::instances(&instances, "worker-7").await;

    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = s.dir.path().join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    api.put(
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "worker-7", "labels": {"topology.kubernetes.io/zone": zvirt_sim::CLUSTER}},
            "spec": {"providerID": format!("zvirt://{vm}")}}),
    );
    let driver = Csi::start(&[
        "--mode=node",
        "--cloud=zvirt",
        "--node-id=worker-7",
        &format!("--kubeconfig={}", kubeconfig.display()),
    ])
    .await;
    let info = driver
        .node()
        .await
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner();
    assert_eq!(info.node_id, vm, "the VM id, from the Node's providerID");
    assert_eq!(
        info.accessible_topology.unwrap().segments["topology.kubernetes.io/zone"],
        zvirt_sim::CLUSTER
    );
}

/// The engine down (its proxy's HTML page): Probe says not ready, and `/healthz` — the
/// controller's liveness probe — stays 200, so kubelet does not restart a driver that
/// cannot mend the cloud; Probe is ready again once the engine is back.
#[tokio::test]
async fn an_engine_outage_is_not_ready_but_never_restarts_the_driver() {
    let s = sim(Latency::default()).await;
    let conf = s.cloud_config();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let driver = Csi::start(&[
        "--mode=controller",
        "--cloud=zvirt",
        &format!("--cloud-config={}", conf.display()),
        &format!("--metrics-address=127.0.0.1:{port}"),
    ])
    .await;
    let healthz = || {
        let out = std::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("http://127.0.0.1:{port}/healthz"),
            ])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ready = || async {
        driver
            .identity()
            .await
            .probe(csi::ProbeRequest {})
            .await
            .expect("Probe answers")
            .into_inner()
            .ready
    };
    assert_eq!(ready().await, Some(true));
    assert_eq!(healthz(), "200");
    s.engine.set_html(true);
    assert_eq!(ready().await, Some(false), "the engine is down");
    assert_eq!(
        healthz(),
        "200",
        "the liveness probe must not follow the cloud"
    );
    s.engine.set_html(false);
    assert_eq!(ready().await, Some(true));
}

/// The power state the ccm's fencing and shutdown taint read: only `down` is off. A VM on
/// a host the engine lost (`not_responding`, `unknown`) may still be writing to its
/// disks, so it is running — never fenced; the engine keeps a `not_responding` VM's guest
/// addresses and drops an `unknown` one's (its `ResourceManager.internalSetVmStatus`).
#[tokio::test]
async fn only_a_down_vm_is_off_and_a_vm_on_a_lost_host_is_running() {
    use overcast_cloud::{InstanceState, Instances};
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-0");
    s.engine.set_vm_ips(&vm, &["10.1.2.3"]);
    let engine =
        overcast_cloud_zvirt::connect(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD), None)
            .unwrap();
    let instances = overcast_cloud_zvirt::EngineInstances::new(engine);
    let read = || async {
        let list = instances.list_instances().await.expect("a listing");
        let i = list
            .into_iter()
            .find(|i| i.node_name == "worker-0")
            .expect("listed");
        let guest = i.addresses.iter().any(|a| a.address == "10.1.2.3");
        (i.state, guest)
    };
    for (status, state, guest) in [
        ("up", InstanceState::Running, true),
        ("not_responding", InstanceState::Running, true),
        ("unknown", InstanceState::Running, false),
        ("migrating", InstanceState::Running, false),
        ("down", InstanceState::Shutdown, false),
    ] {
        s.engine.set_vm_status(&vm, status);
        assert_eq!(read().await, (state, guest), "a VM {status}");
    }
}

/// Names with the search language's characters (`*`, spaces, `=`) are found again
/// exactly, never by a wildcard match (names it cannot express at all:
/// `engine_rules::names_the_engine_cannot_search_make_one_disk_each`).
#[tokio::test]
async fn wildcards_in_names_match_nothing_else() {
    let s = sim(Latency::default()).await;
    let d = disks(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD));
    let spec = |name: &str| DiskSpec {
        name: name.into(),
        size_bytes: GIB,
        zone: Zone::default(),
        parameters: parameters("data"),
        metadata: BTreeMap::new(),
        source: None,
    };
    let star = d.create_disk(spec("pvc*")).await.unwrap();
    let plain = d.create_disk(spec("pvc-1 = x")).await.unwrap();
    for (name, id) in [("pvc*", &star.id), ("pvc-1 = x", &plain.id)] {
        let again = d.create_disk(spec(name)).await.unwrap();
        assert_eq!(&again.id, id, "{name} found again");
        assert_eq!(d.disk_by_name(name).await.unwrap().unwrap().id, *id);
    }
    assert_eq!(s.engine.disks().len(), 2);
    for id in [star.id, plain.id] {
        d.delete_disk(&id).await.unwrap();
    }
}

/// The engine over HTTPS with a certificate of its own CA, as a real one serves: the
/// provider trusts it through `ZVIRT_CA_BUNDLE` (upstream's PEM), refuses it without
/// (Unavailable, never "not found"), and takes it with `ZVIRT_INSECURE=true`.
#[tokio::test]
async fn the_engine_s_certificate_is_trusted_through_the_ca_bundle_only() {
    let dir = tempfile::tempdir().unwrap();
    overcast_integration::self_signed_cert(dir.path(), "engine");
    let (cert, key) = (dir.path().join("engine.crt"), dir.path().join("engine.key"));
    let tls =
        overcast_rbac_proxy::tls::Certificates::watch(cert.clone(), key, Duration::from_secs(3600))
            .unwrap()
            .acceptor();
    let by_id = dir.path().join("by-id");
    std::fs::create_dir_all(&by_id).unwrap();
    let engine = Engine::new(dir.path(), &by_id, 10 * GIB, Latency::default());
    let url = engine.start_tls(tls).await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let pem = std::fs::read_to_string(&cert).unwrap();
    let load = |extra: &[(&str, &str)]| {
        let mut vars: BTreeMap<String, String> = BTreeMap::from([
            ("ZVIRT_API_URL".to_owned(), url.clone()),
            ("ZVIRT_USERNAME".to_owned(), zvirt_sim::USER.to_owned()),
            ("ZVIRT_PASSWORD".to_owned(), zvirt_sim::PASSWORD.to_owned()),
        ]);
        for (k, v) in extra {
            vars.insert(k.to_string(), v.to_string());
        }
        let env = move |k: &str| vars.get(k).cloned();
        disks(&Config::load(None, &env).unwrap())
    };
    load(&[("ZVIRT_CA_BUNDLE", &pem)])
        .probe()
        .await
        .expect("trusted through the CA bundle");
    let e = load(&[]).probe().await.unwrap_err();
    assert!(matches!(e, CloudError::Unavailable(_)), "{e:?}");
    assert!(!e.to_string().contains(zvirt_sim::PASSWORD), "{e}");
    load(&[("ZVIRT_INSECURE", "true")])
        .probe()
        .await
        .expect("insecure, as asked");
}
