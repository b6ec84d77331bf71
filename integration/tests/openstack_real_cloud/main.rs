//! The OpenStack provider against real OpenStack services: Keystone, Nova (fake virt
//! driver), Cinder (fake volume driver), Neutron, Glance, as `../shared/sim/openstack/
//! ossim-up.sh` starts them on this machine. Runs when `OVERCAST_TEST_OPENSTACK_OPENRC`
//! names the `openrc` that script writes (`.ci/run` sets it); says it was skipped
//! otherwise.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use overcast_cloud::conformance::{self, DiskHarness, DiskState, DiskStates};
use overcast_cloud::{Disks, Zone};
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_openstack::client::Microversion;
use overcast_cloud_openstack::{CinderDisks, Config, OpenStack, Service, Waits};
use serde_json::{json, Value};

const ENV: &str = "OVERCAST_TEST_OPENSTACK_OPENRC";

/// The tests of this file take turns: each sweeps what an earlier run left, and one
/// stops Cinder's API for a while.
static CLOUD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The real services' unhappy paths: a crashed node, Nova's refusals, types by id.
mod unhappy;

/// The `export K=V …` lines of the sim's openrc.
fn openrc() -> Option<BTreeMap<String, String>> {
    let Ok(path) = std::env::var(ENV) else {
        overcast_integration::say_skipped(&format!(
            "set {ENV} (the openrc of ../shared/sim/openstack/ossim-up.sh) to run the OpenStack provider against real services"
        ));
        return None;
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Some(
        text.lines()
            .filter_map(|l| l.strip_prefix("export "))
            .flat_map(|l| l.split_whitespace())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
            .collect(),
    )
}

/// A cloud.conf as an operator writes it for this cloud (OCCM's format).
fn cloud_conf(env: &BTreeMap<String, String>, dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("cloud.conf");
    std::fs::write(
        &path,
        format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\nuser-domain-id = {}\n\
             project-name = {}\nproject-domain-id = {}\nregion = {}\n\
             [BlockStorage]\nnode-volume-attach-limit = 60\n",
            env["OS_AUTH_URL"],
            env["OS_USERNAME"],
            env["OS_PASSWORD"],
            env["OS_USER_DOMAIN_ID"],
            env["OS_PROJECT_NAME"],
            env["OS_PROJECT_DOMAIN_ID"],
            env["OS_REGION_NAME"],
        ),
    )
    .unwrap();
    path
}

struct Cloud {
    os: Arc<OpenStack>,
    env: BTreeMap<String, String>,
    metrics: Arc<ApiMetrics>,
    _dir: tempfile::TempDir,
}

impl Cloud {
    fn new() -> Option<Self> {
        let env = openrc()?;
        let dir = tempfile::tempdir().unwrap();
        let config = Config::load(Some(&cloud_conf(&env, dir.path()))).expect("cloud.conf");
        let metrics = Arc::new(ApiMetrics::unregistered());
        let os =
            overcast_cloud_openstack::connect(&config, Some(Arc::clone(&metrics))).expect("client");
        Some(Self {
            os,
            env,
            metrics,
            _dir: dir,
        })
    }

    /// Removes what an earlier run's failed test left: its servers and volumes.
    async fn sweep(&self) {
        let (_, servers) = self
            .compute(
                "server_list",
                Method::GET,
                "/servers?name=^overcast-it-",
                None,
            )
            .await;
        for s in servers["servers"].as_array().into_iter().flatten() {
            if let Some(id) = s["id"].as_str() {
                self.delete_server(id).await;
            }
        }
        let disks = self.disks();
        for d in disks.list_disks().await.expect("list") {
            if d.name.starts_with("overcast-it-") {
                let _ = disks.delete_disk(&d.id).await;
            }
        }
    }

    fn disks(&self) -> CinderDisks {
        CinderDisks::new(
            Arc::clone(&self.os),
            "overcast-it".into(),
            self.env["OS_REGION_NAME"].clone(),
            Vec::new(),
            60,
            false,
            Waits {
                available: Duration::from_secs(60),
                attached: Duration::from_secs(60),
                detached: Duration::from_secs(60),
                extended: Duration::from_secs(60),
                deleted: Duration::from_secs(60),
            },
        )
    }

    async fn compute(
        &self,
        name: &'static str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let resp = self
            .os
            .call(
                Service::Compute,
                name,
                method,
                path,
                body,
                Some(Microversion(2, 79)),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let doc = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
        (resp.status.as_u16(), doc)
    }

    /// Boots a server (m1.small, the seeded image and network) and waits until ACTIVE.
    async fn boot(&self, name: &str) -> String {
        let (_, flavors) = self
            .compute("flavor_list", Method::GET, "/flavors", None)
            .await;
        let flavor = flavors["flavors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "m1.small")
            .expect("m1.small")["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let body = json!({"server": {
            "name": name, "imageRef": self.env["OSSIM_IMAGE_ID"], "flavorRef": flavor,
            "networks": [{"uuid": self.env["OSSIM_NET_ID"]}],
        }});
        // The simulator's services keep their databases in SQLite: under load a build can
        // fail with "database is locked" and the server goes to ERROR. Nothing of ours is
        // involved in a boot, so such a server is deleted and booted again, twice at most.
        for attempt in 1..=3 {
            let (status, made) = self
                .compute("server_create", Method::POST, "/servers", Some(&body))
                .await;
            assert_eq!(status, 202, "{made}");
            let id = made["server"]["id"].as_str().unwrap().to_owned();
            let mut failed = None;
            for _ in 0..120 {
                let (_, s) = self
                    .compute("server_get", Method::GET, &format!("/servers/{id}"), None)
                    .await;
                match s["server"]["status"].as_str() {
                    Some("ACTIVE") => return id,
                    Some("ERROR") => {
                        failed = Some(s);
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
            let Some(s) = failed else {
                panic!("server {id} not ACTIVE in 60 s");
            };
            if attempt == 3 {
                panic!("server {id} went to ERROR three times: {s}");
            }
            eprintln!(
                "server {id} went to ERROR (attempt {attempt}), booted again: {}",
                s["server"]["fault"]
            );
            self.delete_server(&id).await;
        }
        unreachable!("every attempt returns or panics")
    }

    async fn delete_server(&self, id: &str) {
        let _ = self
            .compute(
                "server_delete",
                Method::DELETE,
                &format!("/servers/{id}"),
                None,
            )
            .await;
        // The simulator's Nova on SQLite can take long under load (a CI run here: over 60 s).
        for _ in 0..360 {
            let (status, _) = self
                .compute("server_get", Method::GET, &format!("/servers/{id}"), None)
                .await;
            if status == 404 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("server {id} not deleted in 180 s");
    }
}

/// Cinder's in-between states for the conformance rules, as Cinder itself shows them:
/// `creating` and `error` put by its admin API (`os-reset_status`, what `cinder
/// reset-state` sends; Cinder refuses to reset to `deleting`); `deleting` by a real
/// DELETE while the cinder-volume service is paused (SIGSTOP), so the API has marked the
/// volume and the deletion waits in the queue until the service goes on (SIGCONT).
struct CinderStates {
    os: Arc<OpenStack>,
    /// The process group of the cinder-volume service `../shared/sim` started.
    volume_service: nix::unistd::Pid,
}

impl CinderStates {
    fn new(os: Arc<OpenStack>, env: &BTreeMap<String, String>) -> Self {
        let pid_file = std::path::Path::new(&env["OSSIM_STATE"]).join("pids/cinder-volume.pid");
        let pgid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
            .trim()
            .parse()
            .expect("a pid");
        Self {
            os,
            volume_service: nix::unistd::Pid::from_raw(pgid),
        }
    }

    async fn action(&self, method: Method, path: &str, body: Option<&Value>) -> (u16, String) {
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "volume_admin",
                method,
                path,
                body,
                None,
            )
            .await
            .expect("a Cinder call");
        (
            resp.status.as_u16(),
            String::from_utf8_lossy(&resp.body).into_owned(),
        )
    }

    async fn reset(&self, id: &str, status: &str) {
        let body = json!({"os-reset_status": {"status": status}});
        let (code, text) = self
            .action(Method::POST, &format!("/volumes/{id}/action"), Some(&body))
            .await;
        assert_eq!(code, 202, "reset {id} to {status}: {text}");
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::killpg(self.volume_service, signal).expect("signal cinder-volume");
    }
}

/// A test that fails while the service is paused must not leave it paused for the rest.
impl Drop for CinderStates {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(self.volume_service, nix::sys::signal::Signal::SIGCONT);
    }
}

#[async_trait::async_trait]
impl DiskStates for CinderStates {
    async fn enter(&self, disk: &overcast_cloud::Disk, state: DiskState) -> bool {
        match state {
            DiskState::Creating => self.reset(&disk.id, "creating").await,
            DiskState::Failed => self.reset(&disk.id, "error").await,
            DiskState::Deleting => {
                self.signal(nix::sys::signal::Signal::SIGSTOP);
                let (code, text) = self
                    .action(Method::DELETE, &format!("/volumes/{}", disk.id), None)
                    .await;
                if code != 202 {
                    self.signal(nix::sys::signal::Signal::SIGCONT);
                    panic!("delete {}: {code} {text}", disk.id);
                }
            }
        }
        true
    }
    async fn release(&self, disk: &overcast_cloud::Disk, state: DiskState) {
        match state {
            DiskState::Creating => self.reset(&disk.id, "available").await,
            DiskState::Deleting => self.signal(nix::sys::signal::Signal::SIGCONT),
            DiskState::Failed => {}
        }
    }
}

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
    let conf = cloud_conf(&cloud.env, work.path());
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
    assert_eq!(
        c.create_volume(snap).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
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
    // Attached again, then the server goes (a node lost): unpublish still succeeds.
    c.controller_publish_volume(overcast_integration::attach_request(
        &id,
        &server,
        mount_cap("xfs"),
    ))
    .await
    .expect("attach again");
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

/// Cinder's API process, stopped and started again as `ossim-up.sh` started it (its
/// command line, environment and directory read from /proc), keeping the pid file
/// `ossim-down.sh` stops it by.
struct CinderApi {
    pid_file: std::path::PathBuf,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: std::path::PathBuf,
}

impl CinderApi {
    fn find(env: &BTreeMap<String, String>) -> Self {
        let state = std::path::PathBuf::from(&env["OSSIM_STATE"]);
        let pid_file = state.join("pids/cinder-api.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .to_owned();
        let split = |path: String| -> Vec<String> {
            std::fs::read(path)
                .unwrap()
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        };
        Self {
            argv: split(format!("/proc/{pid}/cmdline")),
            env: split(format!("/proc/{pid}/environ"))
                .into_iter()
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                })
                .collect(),
            cwd: std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
            pid_file,
        }
    }

    fn answers() -> bool {
        std::net::TcpStream::connect("127.0.0.1:8776").is_ok()
    }

    async fn stop(&self) {
        let pgid: i32 = std::fs::read_to_string(&self.pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("stop cinder-api");
        for _ in 0..100 {
            if !Self::answers() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("cinder-api still answers 10 s after SIGTERM");
    }

    async fn start(&self) {
        // `-f`: setsid forks and returns at once; the service leads its own group.
        let started = std::process::Command::new("setsid")
            .arg("-f")
            .arg("sh")
            .arg("-c")
            .arg("echo $$ > \"$0\"; exec \"$@\"")
            .arg(&self.pid_file)
            .args(&self.argv)
            .env_clear()
            .envs(self.env.iter().cloned())
            .current_dir(&self.cwd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("start cinder-api");
        assert!(started.success(), "setsid: {started}");
        for _ in 0..600 {
            if Self::answers() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("cinder-api does not answer 60 s after its start");
    }
}

/// Listing pages through Cinder by marker; with Cinder's API stopped every call — the
/// provider's, and the real csi binary's RPCs — is a retryable error (never "not found":
/// nothing is taken as gone, nothing half-done), and once it is back every volume is
/// there and the retried RPCs do what was asked.
#[tokio::test]
async fn listing_pages_and_a_stopped_cinder_is_retryable_and_loses_nothing() {
    use overcast_cloud::{CloudError, DiskSpec};
    use overcast_integration::csi_v1 as csi;
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let disks = cloud.disks().with_page_size(2);
    let mut made = Vec::new();
    for i in 0..5 {
        let d = disks
            .create_disk(DiskSpec {
                name: format!("overcast-it-page-{pid}-{i}"),
                size_bytes: 1 << 30,
                zone: Zone::default(),
                parameters: BTreeMap::new(),
                metadata: BTreeMap::new(),
                source: None,
            })
            .await
            .expect("create");
        made.push(d.id);
    }
    let before = cloud.metrics.requests("volume_list");
    let listed: Vec<String> = disks
        .list_disks()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert!(
        cloud.metrics.requests("volume_list") - before >= 3,
        "pages of 2"
    );
    for id in &made {
        assert_eq!(listed.iter().filter(|l| *l == id).count(), 1, "{id} once");
    }

    // Outage: a client with short deadlines, so the test does not wait minutes.
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load(Some(&cloud_conf(&cloud.env, dir.path()))).unwrap();
    let mut settings = overcast_cloud_http::HttpSettings::new("openstack");
    settings.attempt_timeout = Duration::from_secs(2);
    settings.deadline = Duration::from_secs(6);
    settings.retry_delay = Duration::from_millis(200);
    let os = overcast_cloud_openstack::connect_with(&config, settings, None).unwrap();
    let short = CinderDisks::new(
        os,
        "overcast-it".into(),
        String::new(),
        Vec::new(),
        60,
        false,
        Waits::default(),
    );
    short.probe().await.expect("a session before the outage");
    // The real csi binary too, as a controller with its default deadlines and retries.
    let conf = cloud_conf(&cloud.env, dir.path());
    let driver = overcast_integration::Csi::start(&[
        "--mode=controller",
        "--cloud=openstack",
        &format!("--cloud-config={}", conf.display()),
        "--cluster=overcast-it",
    ])
    .await;
    let mut c = driver.controller().await;
    c.list_volumes(csi::ListVolumesRequest::default())
        .await
        .expect("the csi lists before the outage");
    let api = CinderApi::find(&cloud.env);
    api.stop().await;
    // Each answer within a minute (the sidecars' own deadlines are shorter still), and
    // each one a sidecar retries.
    let outage_name = format!("overcast-it-csi-outage-{pid}");
    let answers: Vec<(&str, tonic::Code)> = {
        let within = Duration::from_secs(60);
        let code = |r: Result<(), tonic::Status>| r.err().map_or(tonic::Code::Ok, |s| s.code());
        let mut out = Vec::new();
        let create = overcast_integration::create_request(&outage_name, 1 << 30);
        let r = tokio::time::timeout(within, c.create_volume(create)).await;
        out.push(("CreateVolume", code(r.expect("in time").map(|_| ()))));
        let r = tokio::time::timeout(
            within,
            c.delete_volume(overcast_integration::delete_request(&made[2])),
        )
        .await;
        out.push(("DeleteVolume", code(r.expect("in time").map(|_| ()))));
        let r = tokio::time::timeout(
            within,
            c.controller_expand_volume(overcast_integration::expand_request(&made[3], 2 << 30)),
        )
        .await;
        out.push((
            "ControllerExpandVolume",
            code(r.expect("in time").map(|_| ())),
        ));
        let r =
            tokio::time::timeout(within, c.list_volumes(csi::ListVolumesRequest::default())).await;
        out.push(("ListVolumes", code(r.expect("in time").map(|_| ()))));
        let r =
            tokio::time::timeout(within, c.get_capacity(csi::GetCapacityRequest::default())).await;
        out.push(("GetCapacity", code(r.expect("in time").map(|_| ()))));
        out
    };
    let results = [
        short.disk(&made[0]).await.map(|_| ()),
        short.list_disks().await.map(|_| ()),
        short.delete_disk(&made[1]).await,
        short
            .create_disk(DiskSpec {
                name: format!("overcast-it-outage-{pid}"),
                size_bytes: 1 << 30,
                zone: Zone::default(),
                parameters: BTreeMap::new(),
                metadata: BTreeMap::new(),
                source: None,
            })
            .await
            .map(|_| ()),
    ];
    api.start().await;
    for r in results {
        let e = r.expect_err("Cinder is down");
        assert!(
            matches!(
                e,
                CloudError::Unavailable(_) | CloudError::DeadlineExceeded(_)
            ),
            "{e:?}"
        );
        assert!(e.is_retryable(), "{e:?}");
    }
    for (rpc, code) in answers {
        assert!(
            matches!(
                code,
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
            ),
            "{rpc} with Cinder down answered {code:?}"
        );
    }
    // Back: everything is there at its size, the csi's retries do what was asked (one
    // volume of the name), and the provider carries on.
    let retried = c
        .create_volume(overcast_integration::create_request(&outage_name, 1 << 30))
        .await
        .expect("create, retried")
        .into_inner()
        .volume
        .unwrap();
    let named: Vec<_> = disks
        .list_disks()
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.name == outage_name || d.name.starts_with("overcast-it-outage-"))
        .collect();
    assert_eq!(named.len(), 1, "one volume of the retried name: {named:?}");
    assert_eq!(
        disks.disk(&made[3]).await.unwrap().size_bytes,
        1 << 30,
        "not grown while Cinder was down"
    );
    c.controller_expand_volume(overcast_integration::expand_request(&made[3], 2 << 30))
        .await
        .expect("expand, retried");
    c.delete_volume(overcast_integration::delete_request(&retried.volume_id))
        .await
        .expect("delete");
    drop(driver);
    for id in &made {
        disks.disk(id).await.expect("still there");
        disks.delete_disk(id).await.expect("delete");
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

/// Discovery against what the services hold: the seeded flavors, image, zone, networks
/// (the external one left out), the default volume type; the catalog from the flavors;
/// conditions; this cluster's volumes only. Then the real `discoverer` binary publishes
/// it to the kit's API server (when `OVERCAST_TEST_KUBECONFIG` is set too) and reports a
/// volume of this cluster that no PV names as an orphan.
#[tokio::test]
async fn discovery_reports_what_the_services_hold() {
    use overcast_cloud::discovery::Discovery;
    use overcast_cloud::DiskSpec;
    use overcast_cloud_openstack::OpenStackDiscovery;
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let discovery =
        OpenStackDiscovery::new(Arc::clone(&cloud.os), cloud.disks(), "overcast-it".into());
    let doc = discovery.discovery_data().await.expect("discovery data");
    assert_eq!(doc["apiVersion"], "deckhouse.io/v1alpha1");
    assert_eq!(doc["kind"], "OpenStackCloudProviderDiscoveryData");
    assert!(
        doc["flavors"]
            .as_array()
            .unwrap()
            .contains(&json!("m1.small")),
        "{doc}"
    );
    let small = doc["flavorsDetails"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "m1.small")
        .expect("m1.small details")
        .clone();
    let (_, flavor) = cloud
        .compute("flavor_list", Method::GET, "/flavors/detail", None)
        .await;
    let truth = flavor["flavors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "m1.small")
        .unwrap()
        .clone();
    assert_eq!(
        small,
        json!({"name": "m1.small", "ram": truth["ram"], "vcpus": truth["vcpus"], "disk": truth["disk"]})
    );
    assert!(
        doc["imagesDetails"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] == cloud.env["OSSIM_IMAGE_ID"].as_str()),
        "{doc}"
    );
    assert!(
        doc["zones"].as_array().unwrap().contains(&json!("nova")),
        "{doc}"
    );
    let (_, net) = {
        let resp = cloud
            .os
            .call(
                Service::Network,
                "network_get",
                Method::GET,
                &format!("/v2.0/networks/{}", cloud.env["OSSIM_NET_ID"]),
                None,
                None,
            )
            .await
            .unwrap();
        (
            resp.status,
            serde_json::from_slice::<Value>(&resp.body).unwrap(),
        )
    };
    let net_name = net["network"]["name"].as_str().unwrap();
    let networks = doc["additionalNetworks"].as_array().unwrap();
    assert!(networks.contains(&json!(net_name)), "{doc}");
    assert!(
        !networks.contains(&json!("public")),
        "the external network is no node network: {doc}"
    );
    let default = doc["volumeTypes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["isDefault"] == true)
        .count();
    assert_eq!(default, 1, "one default volume type: {doc}");
    let types = discovery.instance_types().await.expect("instance types");
    let t = types
        .iter()
        .find(|t| t.name == "m1.small")
        .expect("m1.small");
    assert_eq!(u64::from(t.cpu), truth["vcpus"].as_u64().unwrap());
    assert_eq!(t.memory_mib, truth["ram"].as_u64().unwrap());
    let conditions = discovery.conditions().await.expect("conditions");
    assert!(conditions.iter().all(|c| c.ok), "{conditions:?}");

    // This cluster's volume with a PV name no PV has, and another cluster's.
    let ours = cloud
        .disks()
        .create_disk(DiskSpec {
            name: format!("overcast-it-orphan-{pid}"),
            size_bytes: 1 << 30,
            zone: Zone::default(),
            parameters: BTreeMap::new(),
            metadata: [(
                "csi.storage.k8s.io/pv/name".to_owned(),
                format!("pvc-gone-{pid}"),
            )]
            .into(),
            source: None,
        })
        .await
        .unwrap();
    let theirs = CinderDisks::new(
        Arc::clone(&cloud.os),
        "another-cluster".into(),
        String::new(),
        Vec::new(),
        60,
        false,
        Waits::default(),
    )
    .create_disk(DiskSpec {
        name: format!("overcast-it-theirs-{pid}"),
        size_bytes: 1 << 30,
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        metadata: BTreeMap::new(),
        source: None,
    })
    .await
    .unwrap();
    let listed: Vec<String> = discovery
        .cluster_disks()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert!(
        listed.contains(&ours.id) && !listed.contains(&theirs.id),
        "{listed:?}"
    );

    if let Ok(kubeconfig) = std::env::var("OVERCAST_TEST_KUBECONFIG") {
        use k8s_openapi::api::core::v1::Secret;
        let admin = overcast_integration::real::client(&kubeconfig).await;
        let secrets: kube::Api<Secret> = kube::Api::namespaced(admin, "kube-system");
        let _ = secrets
            .delete("d8-cloud-provider-discovery-data", &Default::default())
            .await;
        // What the installer knew: kept where discovery says nothing, replaced where it does.
        let _ = secrets
            .delete("d8-provider-cluster-configuration", &Default::default())
            .await;
        let installer = json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "OpenStackCloudProviderDiscoveryData",
            "mainNetwork": "net-from-installer", "defaultImageName": "ubuntu-22-04", "zones": ["stale"]});
        secrets
            .create(
                &Default::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": "d8-provider-cluster-configuration", "namespace": "kube-system"},
                    "stringData": {"cloud-provider-discovery-data.json": installer.to_string()},
                }))
                .unwrap(),
            )
            .await
            .expect("the installer's Secret");
        let dir = tempfile::tempdir().unwrap();
        let conf = cloud_conf(&cloud.env, dir.path());
        let port = overcast_integration::free_port();
        let _d = overcast_integration::KillOnDrop(
            std::process::Command::new(overcast_integration::binary("discoverer"))
                .arg(format!("--kubeconfig={kubeconfig}"))
                .arg("--cloud=openstack")
                .arg(format!("--cloud-config={}", conf.display()))
                .arg("--cluster=overcast-it")
                .arg("--discovery-period=2")
                .arg(format!("--metrics-address=127.0.0.1:{port}"))
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let secret = overcast_integration::real::wait_for(
            "the discovery Secret",
            Duration::from_secs(60),
            async || {
                secrets
                    .get_opt("d8-cloud-provider-discovery-data")
                    .await
                    .ok()?
            },
        )
        .await;
        let published: Value =
            serde_json::from_slice(&secret.data.unwrap()["discovery-data.json"].0).unwrap();
        assert_eq!(published["kind"], "OpenStackCloudProviderDiscoveryData");
        assert_eq!(published["flavorsDetails"], doc["flavorsDetails"]);
        assert_eq!(published["mainNetwork"], "net-from-installer");
        assert_eq!(published["defaultImageName"], "ubuntu-22-04");
        assert_eq!(
            published["zones"], doc["zones"],
            "the cloud's zones replace the installer's"
        );
        let _ = secrets
            .delete("d8-provider-cluster-configuration", &Default::default())
            .await;
        overcast_integration::real::wait_for(
            "the orphan reported",
            Duration::from_secs(60),
            async || {
                let (_, body) = overcast_integration::http_get(port, "/metrics");
                body.lines()
                    .any(|l| {
                        l.starts_with("cloud_data_discovery_orphaned_disk_info{")
                            && l.contains(&ours.id)
                    })
                    .then_some(())
            },
        )
        .await;
        let (_, body) = overcast_integration::http_get(port, "/metrics");
        assert!(
            !body.contains(&theirs.id),
            "another cluster's volume is none of ours"
        );
        assert!(
            body.contains("openstack_api_requests_total{request=\"flavor_list\"}"),
            "{body}"
        );
    } else {
        overcast_integration::say_skipped("set OVERCAST_TEST_KUBECONFIG too to run the OpenStack discoverer binary against the kit");
    }
    let disks = cloud.disks();
    disks.delete_disk(&ours.id).await.unwrap();
    disks.delete_disk(&theirs.id).await.unwrap();
}
