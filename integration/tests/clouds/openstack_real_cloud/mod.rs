//! The OpenStack provider against real OpenStack services: Keystone, Nova (fake virt
//! driver), Cinder (fake volume driver), Neutron, Glance, as `../shared/sim/openstack/
//! ossim-up.sh` starts them on this machine. Runs when `OVERCAST_TEST_OPENSTACK_OPENRC`
//! names the `openrc` that script writes (`.ci/run` sets it); says it was skipped
//! otherwise.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use overcast_cloud::conformance::{self, DiskHarness};
use overcast_cloud::{Disks, Zone};
use overcast_cloud_openstack::{CinderDisks, Config, Service, Waits};
use serde_json::{json, Value};

const ENV: &str = "OVERCAST_TEST_OPENSTACK_OPENRC";

/// The tests of this file take turns: each sweeps what an earlier run left, and one
/// stops Cinder's API for a while.
static CLOUD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The real services' unhappy paths: a crashed node, Nova's refusals, types by id.
mod unhappy;

/// The ccm on Nova and Neutron, with the kit's API server.
mod ccm;
/// The ccm's load balancers on Octavia, with the kit's API server.
mod ccm_lb;
/// The cloud as the tests use it: its openrc, a cloud.conf, servers booted and deleted,
/// Cinder's states and its API process stopped and started.
mod cloud;
/// Discovery of what the services hold.
mod discovery;
/// Keystone's catalog with a region whose endpoint goes through a front.
mod keystone;
/// What the load-balancer tests share.
mod lb_help;
/// Listing by pages, and a stopped Cinder API.
mod listing;
/// Load balancers on Octavia, floating IPs on Neutron.
mod octavia;
/// Pod routes on a Neutron router, and the ccm's route controller.
mod routes;
/// Cinder snapshots, restores and clones; cinder-csi-plugin's snapshots after the switch.
mod snapshots;
/// A volume cinder-csi-plugin made, after the switch to ours.
mod upstream;

use cloud::*;

/// The provider conformance suite on Cinder + Nova: idempotent create (16 concurrent
/// creates of one name make one volume), attach and detach (twice, and from a server
/// that does not exist), refusing to delete an attached volume, expansion in use,
/// listing, deletion.
#[tokio::test]
async fn the_openstack_provider_passes_the_conformance_suite_on_real_services() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let server = cloud
        .boot(&format!("overcast-it-{}", std::process::id()))
        .await;
    let disks: Arc<dyn Disks> = Arc::new(cloud.disks());
    conformance::disks(&DiskHarness {
        disks: Arc::clone(&disks),
        node: server.clone(),
        gone_node: "00000000-0000-4000-8000-000000000000".into(),
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        prefix: format!("overcast-it-{}-", std::process::id()),
        states: Some(Arc::new(CinderStates::new(
            Arc::clone(&cloud.os),
            &cloud.env,
        ))),
        held_for: Duration::from_secs(3),
    })
    .await;
    // The instance rules, with providerIDs as OCCM writes them either way (plain, and
    // regional under OS_CCM_REGIONAL=true): each upstream form of the live server found.
    let name = format!("overcast-it-{}", std::process::id());
    let region = cloud.env.get("OS_REGION_NAME").cloned();
    for regional in [false, true] {
        let nova = overcast_cloud_openstack::NovaInstances::new(
            Arc::clone(&cloud.os),
            overcast_cloud_openstack::config::Networking::default(),
            region.clone(),
            regional,
        );
        conformance::instances(&nova, &name).await;
    }
    cloud.delete_server(&server).await;
    // Counted by request name, with OCCM's names under the `openstack` prefix.
    assert!(cloud.metrics.requests("identity_token_create") >= 1);
    assert!(cloud.metrics.requests("volume_create") >= 1);
    assert!(cloud.metrics.requests("server_volume_attach") >= 1);
}

/// A loop device standing in for the disk Nova's fake driver does not make, linked in
/// `by_id` as udev links a virtio disk (`virtio-<id[:20]>`); gone on drop.
struct GuestDisk {
    index: u32,
    file: std::path::PathBuf,
    link: std::path::PathBuf,
}

impl GuestDisk {
    fn new(dir: &std::path::Path, by_id: &std::path::Path, volume: &str, bytes: u64) -> Self {
        let file = dir.join(format!("{volume}.img"));
        std::fs::File::create(&file)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let index = overcast_cloud_local::loopdev::attach(&file, false, "overcast-it-openstack")
            .expect("loop device");
        let serial: String = volume.chars().take(20).collect();
        let link = by_id.join(format!("virtio-{serial}"));
        std::os::unix::fs::symlink(overcast_cloud_local::loopdev::device_path(index), &link)
            .unwrap();
        Self { index, file, link }
    }
}

impl Drop for GuestDisk {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.link);
        let _ = overcast_cloud_local::loopdev::detach(self.index, &self.file);
        let _ = std::fs::remove_file(&self.file);
    }
}

/// The real `csi` binary (`--cloud openstack`, controller and node in one process, the
/// node id the server's) against the real services: topology under both zone keys, 16
/// concurrent creates of one name make one volume, publish to a real Nova server, a real
/// xfs mount of the (loop-backed) disk found by its virtio serial once the node asked the
/// SCSI hosts to scan, expand in use and on the node after a size rescan,
/// unpublish twice, unpublish after the server was deleted, delete twice.
#[tokio::test]
async fn the_csi_driver_runs_a_volume_s_life_on_real_services() {
    use overcast_integration::{csi_v1 as csi, mount_cap, Csi};
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let server = cloud.boot(&format!("overcast-it-csi-{pid}")).await;
    let work = tempfile::tempdir().unwrap();
    let by_id = work.path().join("by-id");
    std::fs::create_dir_all(&by_id).unwrap();
    let conf = cloud_conf_through_login_cache(&cloud.env, work.path());
    // The node rescans a disk whose size lags its volume's, as this cloud.conf says.
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("rescan-on-resize = true\n");
    std::fs::write(&conf, text).unwrap();
    // The test plays the guest's kernel in this directory: the node's rescan requests
    // land here, and the disk appears (and grows) only when asked.
    let sysfs = work.path().join("sys");
    std::fs::create_dir_all(sysfs.join("class/scsi_host/host0")).unwrap();
    std::fs::write(sysfs.join("class/scsi_host/host0/scan"), "").unwrap();
    let port = overcast_integration::free_port();
    let driver = Csi::start(&[
        "--cloud=openstack",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={server}"),
        "--zone=nova",
        "--cluster=overcast-it",
        &format!("--device-by-id-dir={}", by_id.display()),
        &format!("--sysfs-dir={}", sysfs.display()),
        &format!("--metrics-address=127.0.0.1:{port}"),
    ])
    .await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);
    let info = n
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner();
    assert_eq!(info.node_id, server);
    assert_eq!(
        info.max_volumes_per_node, 60,
        "[BlockStorage] node-volume-attach-limit"
    );
    let topology = info.accessible_topology.unwrap();
    assert_eq!(
        topology.segments,
        [
            ("topology.kubernetes.io/zone".to_owned(), "nova".to_owned()),
            (
                "topology.cinder.csi.openstack.org/zone".to_owned(),
                "nova".to_owned()
            ),
        ]
        .into(),
        "both zone keys, so cinder-csi-plugin's PVs keep scheduling"
    );

    let name = format!("overcast-it-pvc-{pid}");
    let mut create = overcast_integration::create_request(&name, 1 << 30);
    create.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![topology.clone()],
        preferred: vec![topology.clone()],
    });
    create
        .parameters
        .insert("csi.storage.k8s.io/pvc/name".into(), "data".into());
    // 16 at once, as a restarted provisioner might: one volume, the others told to retry.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let mut c = driver.controller().await;
        let req = create.clone();
        tasks.spawn(async move { c.create_volume(req).await });
    }
    let mut ids = Vec::new();
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(v) => ids.push(v.into_inner().volume.unwrap().volume_id),
            Err(s) => assert_eq!(s.code(), tonic::Code::Aborted, "{s:?}"),
        }
    }
    let volume = c
        .create_volume(create.clone())
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap();
    ids.push(volume.volume_id.clone());
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = volume.volume_id.clone();
    assert_eq!(volume.capacity_bytes, 1 << 30);
    assert_eq!(volume.accessible_topology, vec![topology.clone()]);
    let named: Vec<_> = cloud
        .disks()
        .list_disks()
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.name == name)
        .collect();
    assert_eq!(named.len(), 1, "one Cinder volume carries the name");
    assert_eq!(
        named[0]
            .metadata
            .get("csi.storage.k8s.io/pvc/name")
            .map(String::as_str),
        Some("data")
    );
    // cinder-csi's description, as Cinder keeps it.
    let read = cloud
        .os
        .call(
            Service::BlockStorage,
            "volume_get",
            Method::GET,
            &format!("/volumes/{id}"),
            None,
            None,
        )
        .await
        .unwrap();
    let read: Value = serde_json::from_slice(&read.body).unwrap();
    assert_eq!(
        read["volume"]["description"], "Created by OpenStack Cinder CSI driver",
        "{read}"
    );

    // A clone (CLONE_VOLUME is advertised on OpenStack): Cinder's source_volid.
    let caps = c
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(format!("{caps:?}").contains("CloneVolume"), "{caps:?}");
    let source = |volume_id: &str| csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Volume(
            csi::volume_content_source::VolumeSource {
                volume_id: volume_id.to_owned(),
            },
        )),
    };
    let mut clone = overcast_integration::create_request(&format!("{name}-clone"), 1 << 30);
    clone.volume_content_source = Some(source(&id));
    let cloned = c
        .create_volume(clone.clone())
        .await
        .expect("clone")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(cloned.content_source, Some(source(&id)));
    let again = c
        .create_volume(clone)
        .await
        .expect("clone again")
        .into_inner();
    assert_eq!(again.volume.unwrap().volume_id, cloned.volume_id);
    let (_, raw) = {
        let r = cloud
            .os
            .call(
                Service::BlockStorage,
                "volume_get",
                Method::GET,
                &format!("/volumes/{}", cloned.volume_id),
                None,
                None,
            )
            .await
            .unwrap();
        (r.status, serde_json::from_slice::<Value>(&r.body).unwrap())
    };
    assert_eq!(raw["volume"]["source_volid"], id.as_str());
    let mut missing = overcast_integration::create_request(&format!("{name}-nosource"), 1 << 30);
    missing.volume_content_source = Some(source("00000000-0000-4000-8000-000000000000"));
    assert_eq!(
        c.create_volume(missing).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let mut small = overcast_integration::create_request(&format!("{name}-small"), 1 << 20);
    small.capacity_range.as_mut().unwrap().limit_bytes = 1 << 20;
    small.volume_content_source = Some(source(&id));
    assert_eq!(
        c.create_volume(small).await.unwrap_err().code(),
        tonic::Code::OutOfRange
    );
    let mut snap = overcast_integration::create_request(&format!("{name}-snap"), 1 << 30);
    snap.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: "s".into(),
            },
        )),
    });
    // Cinder snapshots are served (snapshots.rs): one that does not exist is NOT_FOUND.
    assert_eq!(
        c.create_volume(snap).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    c.delete_volume(overcast_integration::delete_request(&cloned.volume_id))
        .await
        .expect("delete the clone");

    let ctx = c
        .controller_publish_volume(overcast_integration::attach_request(
            &id,
            &server,
            mount_cap("xfs"),
        ))
        .await
        .expect("attach")
        .into_inner()
        .publish_context;
    assert_eq!(ctx.get("serial").map(String::len), Some(20));
    // Nova's fake driver plugs no disk: the "kernel" makes it once the node asks the
    // SCSI hosts to scan (without that scan, staging would wait in vain).
    let kernel = {
        let (work, by_id, id) = (work.path().to_owned(), by_id.clone(), id.clone());
        let scan = sysfs.join("class/scsi_host/host0/scan");
        std::thread::spawn(move || {
            for _ in 0..3000 {
                if std::fs::read_to_string(&scan).unwrap() == "- - -" {
                    return Some(GuestDisk::new(&work, &by_id, &id, 1 << 30));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        })
    };
    let staging = work.path().join("staging");
    let target = work.path().join("target");
    std::fs::create_dir_all(&staging).unwrap();
    let _unmount = Unmount(work.path().to_path_buf());
    let staged = n
        .node_stage_volume(overcast_integration::stage_request(
            &id,
            &ctx,
            &staging,
            mount_cap("xfs"),
        ))
        .await;
    // Joined first: the disk the "kernel" made is removed on the way out, whatever
    // staging said.
    let disk = kernel
        .join()
        .unwrap()
        .expect("the node asked the SCSI hosts to scan");
    staged.expect("stage");
    n.node_publish_volume(overcast_integration::node_publish_request(
        &id,
        &ctx,
        &staging,
        &target,
        mount_cap("xfs"),
    ))
    .await
    .expect("publish");
    std::fs::write(target.join("hello"), b"cinder").expect("write through the mount");
    // In use: Cinder ≥ 3.42 extends it attached.
    let grown = c
        .controller_expand_volume(overcast_integration::expand_request(&id, 2 << 30))
        .await
        .expect("expand in use")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 2 << 30);
    assert!(grown.node_expansion_required);
    // The guest still sees 1 GiB until the node asks its kernel to read the size again
    // (rescan-on-resize); then the filesystem grows to the new size.
    let resized = {
        let rescan = sysfs.join(format!("block/loop{}/device/rescan", disk.index));
        std::fs::create_dir_all(rescan.parent().unwrap()).unwrap();
        std::fs::write(&rescan, "").unwrap();
        let (index, file) = (disk.index, disk.file.clone());
        std::thread::spawn(move || {
            for _ in 0..3000 {
                if std::fs::read_to_string(&rescan).unwrap() == "1" {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&file)
                        .unwrap()
                        .set_len(2 << 30)
                        .unwrap();
                    overcast_cloud_local::loopdev::refresh_capacity(index, &file).unwrap();
                    return true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            false
        })
    };
    let expanded = n
        .node_expand_volume(csi::NodeExpandVolumeRequest {
            volume_id: id.clone(),
            volume_path: target.display().to_string(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 2 << 30,
                limit_bytes: 0,
            }),
            volume_capability: Some(mount_cap("xfs")),
            staging_target_path: staging.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("node expand after the rescan")
        .into_inner();
    assert!(resized.join().unwrap(), "the node asked for a size rescan");
    assert_eq!(expanded.capacity_bytes, 2 << 30);
    let stats = n
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: id.clone(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .expect("stats")
        .into_inner();
    let total = stats.usage[0].total;
    assert!(total > 3 << 29, "the filesystem grew: {total} bytes");
    assert_eq!(std::fs::read(target.join("hello")).unwrap(), b"cinder");
    n.node_unpublish_volume(overcast_integration::node_unpublish_request(&id, &target))
        .await
        .expect("unpublish");
    n.node_unstage_volume(overcast_integration::unstage_request(&id, &staging))
        .await
        .expect("unstage");
    drop(disk);
    let unpublish = overcast_integration::detach_request(&id, &server);
    for _ in 0..2 {
        c.controller_unpublish_volume(unpublish.clone())
            .await
            .expect("detach, twice");
    }
    // Detached means Nova's record of it is gone too, not only Cinder's (an attach in
    // between is refused "already attached", or left reserved).
    let (code, listed) = cloud
        .compute(
            "server_volume_get",
            Method::GET,
            &format!("/servers/{server}/os-volume_attachments/{id}"),
            None,
        )
        .await;
    assert_eq!(code, 404, "Nova still lists the detached volume: {listed}");
    // Attached again, then the server goes (a node lost): unpublish still succeeds.
    // Retried as external-attacher retries a call whose outcome is unknown: Nova under
    // load has left the volume `reserved` for two minutes (CI19) while its compute
    // service got to the attach; the next call finds it so and waits on.
    let attach = overcast_integration::attach_request(&id, &server, mount_cap("xfs"));
    let mut tries = 0;
    loop {
        tries += 1;
        match c.controller_publish_volume(attach.clone()).await {
            Ok(_) => break,
            Err(e)
                if tries < 3
                    && matches!(
                        e.code(),
                        tonic::Code::DeadlineExceeded | tonic::Code::Unavailable
                    ) =>
            {
                eprintln!("attach again: {} ({}), retried", e.code(), e.message());
            }
            Err(e) => panic!("attach again: {e:?}"),
        }
    }
    cloud.delete_server(&server).await;
    c.controller_unpublish_volume(unpublish.clone())
        .await
        .expect("detach from a deleted server");
    for _ in 0..2 {
        c.delete_volume(overcast_integration::delete_request(&id))
            .await
            .expect("delete, twice");
    }
    assert!(matches!(
        cloud.disks().disk(&id).await,
        Err(overcast_cloud::CloudError::NotFound { .. })
    ));
    let (status, body) = overcast_integration::http_get(port, "/metrics");
    assert_eq!(status, 200);
    // Two volumes made: the one of 16 concurrent creates, and its clone.
    for series in [
        "openstack_api_requests_total{request=\"volume_create\"} 2",
        "openstack_api_requests_total{request=\"server_volume_attach\"}",
    ] {
        assert!(body.contains(series), "{series} in\n{body}");
    }
    drop(driver);
}

/// Unmounts whatever a failed test left under `dir`.
struct Unmount(std::path::PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        overcast_integration::unmount_under(&self.0);
    }
}

/// The node plugin as the OpenStack overlay runs it — `--node-id` the Kubernetes node
/// name, no `--zone` — learns its server id from its Node's `openstack:///<id>` and its
/// zone from the label the ccm set, and reports the zone under both keys. Needs the
/// kit's API server (`OVERCAST_TEST_KUBECONFIG`), not OpenStack.
#[tokio::test]
async fn the_node_plugin_takes_its_server_id_and_zone_from_its_node() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{DeleteParams, PostParams};
    use overcast_integration::{csi_v1 as csi, Csi};
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(kubeconfig) = overcast_integration::real::kubeconfig("the OpenStack node plugin")
    else {
        return;
    };
    let client = overcast_integration::real::client(&kubeconfig).await;
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let name = format!("overcast-it-os-node-{}", std::process::id());
    let server = "6f1c2d3e-4a5b-4c7d-8e9f-0a1b2c3d4e5f";
    // A Node as kubelet registers it and the ccm initializes it (providerID is set
    // once: a test wanting another one makes the Node again).
    let make = async |provider: String| {
        let _ = nodes.delete(&name, &DeleteParams::default()).await;
        overcast_integration::real::wait_for("the Node made", Duration::from_secs(10), async || {
            nodes
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({
                        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "az-2"}},
                        "spec": {"providerID": provider},
                    }))
                    .unwrap(),
                )
                .await
                .ok()
        })
        .await;
    };
    make(format!("openstack:///{server}")).await;
    let driver = Csi::start(&[
        "--mode=node",
        "--cloud=openstack",
        &format!("--node-id={name}"),
        &format!("--kubeconfig={kubeconfig}"),
        "--node-zone-wait-seconds=5",
    ])
    .await;
    let info = driver
        .node()
        .await
        .node_get_info(csi::NodeGetInfoRequest {})
        .await;
    // A Node whose providerID is not an OpenStack server's: said, not guessed.
    make("dvp://vm-1".into()).await;
    let foreign = driver
        .node()
        .await
        .node_get_info(csi::NodeGetInfoRequest {})
        .await;
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
    let info = info.expect("NodeGetInfo").into_inner();
    assert_eq!(info.node_id, server);
    // No flag, no cloud-config: cinder-csi-plugin's default.
    assert_eq!(info.max_volumes_per_node, 256);
    assert_eq!(
        info.accessible_topology.unwrap().segments,
        [
            ("topology.kubernetes.io/zone".to_owned(), "az-2".to_owned()),
            (
                "topology.cinder.csi.openstack.org/zone".to_owned(),
                "az-2".to_owned()
            ),
        ]
        .into()
    );
    let err = foreign.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("set --node-id"), "{err:?}");
}
