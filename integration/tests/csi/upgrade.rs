//! A release takes over what an earlier one left (issue 60): the local cloud's state
//! directory and the node plugin's records exactly as an earlier release's own `csi`
//! binary wrote them, with its volumes attached, staged and published
//! (`integration/fixtures/upgrade/<commit>/`, made by `make.sh` there with that
//! release's binary), served by this one.
//!
//! The fixture keeps files, not the kernel's state: this is an upgrade across a reboot
//! (no loop device, no mount survives), which the start-up repair and kubelet's
//! re-staging make whole again. A live handover, mounts kept, is the real node's rolling
//! upgrade, not built yet (docs/deploy.md says so).

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use overcast_integration::kubelet::Kubelet;
use overcast_integration::*;

/// Where `make.sh` ran the earlier release: the records name paths under it.
const ROOT: &str = "/run/overcast-it-upgrade";

/// An earlier release's records in place at [`ROOT`], removed (mounts, loop devices and
/// all) when dropped, also when the test fails.
struct Placed {
    /// The volumes `make.sh` made: `fs`, `block`, `idle` → their ids.
    ids: HashMap<String, String>,
    commit: String,
    /// One test at a time has [`ROOT`].
    _turn: std::sync::MutexGuard<'static, ()>,
}

static ROOT_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Placed {
    fn new(commit: &str) -> Self {
        // A test that failed holding it left nothing a cleaning does not remove.
        let turn = ROOT_TURN.lock().unwrap_or_else(|e| e.into_inner());
        clean();
        let fixture = overcast_integration::package_dir()
            .join("fixtures/upgrade")
            .join(commit);
        std::fs::create_dir_all(ROOT).unwrap();
        let status = Command::new("cp")
            .arg("-a")
            .arg("--sparse=always")
            .arg(fixture.join("state"))
            .arg(fixture.join("node"))
            .arg(ROOT)
            .status()
            .unwrap();
        assert!(status.success(), "copy {}", fixture.display());
        let ids = std::fs::read_to_string(fixture.join("volumes"))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self {
            ids,
            commit: commit.to_owned(),
            _turn: turn,
        }
    }

    fn id(&self, which: &str) -> String {
        self.ids[which].clone()
    }

    fn state(&self) -> PathBuf {
        Path::new(ROOT).join("state")
    }

    fn args(&self) -> Vec<String> {
        vec![
            format!("--state-dir={}", self.state().display()),
            format!("--node-state-dir={ROOT}/node"),
        ]
    }
}

impl Drop for Placed {
    fn drop(&mut self) {
        clean();
    }
}

async fn detach(k: &mut Kubelet, id: &str) {
    detach_as_the_attacher(&mut k.c, id).await
}

/// The driver's log on stderr when the test fails: what it did with the old records.
struct ShowLogOnFailure(PathBuf);

impl Drop for ShowLogOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "csi's log:\n{}",
                std::fs::read_to_string(&self.0).unwrap_or_default()
            );
        }
    }
}

fn clean() {
    unmount_under(Path::new(ROOT));
    detach_loops_under(&Path::new(ROOT).join("state"));
    let _ = std::fs::remove_dir_all(ROOT);
}

/// Each volume `make.sh` made, created again by its name and size as the provisioner
/// retries: the old release's disk is the answer, never a second one.
async fn created_again(c: &mut ControllerClient, placed: &Placed) {
    let mut block = create_request("pvc-upgrade-block", MIB);
    block.volume_capabilities = vec![block_cap()];
    for (req, which) in [
        (create_request("pvc-upgrade-fs", 4 * MIB), "fs"),
        (block, "block"),
        (create_request("pvc-upgrade-idle", 4 * MIB), "idle"),
    ] {
        let got = c
            .create_volume(req)
            .await
            .unwrap()
            .into_inner()
            .volume
            .unwrap();
        assert_eq!(
            got.volume_id,
            placed.id(which),
            "a retried create finds the old release's disk"
        );
    }
}

fn listed_ids(entries: &[csi_v1::list_volumes_response::Entry]) -> Vec<(String, bool)> {
    let mut ids: Vec<_> = entries
        .iter()
        .map(|e| {
            (
                e.volume.as_ref().unwrap().volume_id.clone(),
                !e.status.as_ref().unwrap().published_node_ids.is_empty(),
            )
        })
        .collect();
    ids.sort();
    ids
}

/// The release of 2026-11-27 (688adc9), the one issue 60 upgraded from: its disks have no
/// metadata files (they came after it), its node records no format. Everything it made is
/// listed and served; each create retried by name finds its disk — also once the store is
/// lost after this release's first start, the case that made a second disk before; the
/// data it wrote is read back through this release's mounts; then the whole life ends.
#[tokio::test]
async fn the_volumes_of_the_release_of_688adc9_are_served_and_keep_their_names() {
    an_earlier_release_s_volumes_are_served("688adc9", false).await;
}

/// The release of 2026-11-28 (1c81bb4), the one issue 71's upgrades went from: it wrote a
/// metadata file beside each disk, which 688adc9 did not. The same life as 688adc9's.
#[tokio::test]
async fn the_volumes_of_the_release_of_1c81bb4_are_served_and_keep_their_names() {
    an_earlier_release_s_volumes_are_served("1c81bb4", true).await;
}

/// `commit`'s fixture started by this release: listed and served, names kept (also once
/// the store is lost after the first start), its data read back, then the whole life
/// ended. `wrote_metadata`: whether that release wrote each disk's metadata file.
async fn an_earlier_release_s_volumes_are_served(commit: &str, wrote_metadata: bool) {
    let placed = Placed::new(commit);
    let (fs, block, idle) = (placed.id("fs"), placed.id("block"), placed.id("idle"));
    let disks = placed.state().join("disks");
    for (id, name) in [
        (&fs, "pvc-upgrade-fs"),
        (&block, "pvc-upgrade-block"),
        (&idle, "pvc-upgrade-idle"),
    ] {
        assert!(
            disks.join(format!("{id}.img")).exists(),
            "{id}: its disk file"
        );
        let meta = disks.join(format!("{id}.json"));
        if wrote_metadata {
            let written: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&meta).expect("its metadata file")).unwrap();
            assert_eq!(written["name"], name, "{commit} wrote {written}");
        } else {
            assert!(!meta.exists(), "{id}: that release wrote no metadata file");
        }
    }
    let args = placed.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut csi = Csi::start(&args).await;
    let _log = ShowLogOnFailure(csi.log.clone());

    // Brought forward at start: the directory says its format, each disk has its
    // metadata from the store (one that release wrote is read as it is: no `format`
    // field is format 1), the node's records say theirs.
    assert_eq!(
        std::fs::read_to_string(placed.state().join("FORMAT")).unwrap(),
        "overcast-local-state 1\n"
    );
    for (id, name) in [
        (&fs, "pvc-upgrade-fs"),
        (&block, "pvc-upgrade-block"),
        (&idle, "pvc-upgrade-idle"),
    ] {
        let meta = csi
            .disk_meta(id)
            .unwrap_or_else(|| panic!("{id}: metadata written"));
        assert_eq!(meta["name"], name);
        if wrote_metadata {
            let fixture = overcast_integration::package_dir()
                .join("fixtures/upgrade")
                .join(commit)
                .join(format!("state/disks/{id}.json"));
            assert_eq!(
                std::fs::read(disks.join(format!("{id}.json"))).unwrap(),
                std::fs::read(fixture).unwrap(),
                "{id}: that release's metadata file is left as it wrote it"
            );
        } else {
            assert_eq!(meta["format"], 1);
        }
    }
    let records: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{ROOT}/node/volumes.json")).unwrap())
            .unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("{ROOT}/node/FORMAT")).unwrap(),
        "overcast-node-state 3\n"
    );
    let mut k = Kubelet::new(&csi).await;
    k.root = Path::new(ROOT).join("kubelet");
    for id in [&fs, &block] {
        assert_eq!(
            records[id.as_str()]["staging"],
            k.staging(id).display().to_string(),
            "{records}"
        );
    }

    // Listed with their attachments (re-made at start: the machine rebooted under the
    // upgrade), none reported abnormal.
    let mut c = csi.controller().await;
    let entries = c
        .list_volumes(csi_v1::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    let mut want = vec![
        (fs.clone(), true),
        (block.clone(), true),
        (idle.clone(), false),
    ];
    want.sort();
    assert_eq!(listed_ids(&entries), want);
    for e in &entries {
        let condition = e.status.as_ref().unwrap().volume_condition.clone().unwrap();
        assert!(!condition.abnormal, "{condition:?}");
    }
    assert_eq!(csi.loops().len(), 2, "the attached two, each on one device");

    // Creates retried by name find their disks.
    created_again(&mut c, &placed).await;

    // kubelet stages and publishes again at the paths the old release recorded: its
    // filesystem (its mkfs) and its bytes are there.
    let ctx = k.attach(&fs).await;
    k.stage(&fs, &ctx, mount_cap("ext4")).await.unwrap();
    k.publish(&fs, &ctx, mount_cap("ext4"), false)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(k.target(&fs).join("data")).unwrap(),
        format!("written by {}\n", placed.commit)
    );
    let ctx_block = k.attach(&block).await;
    k.stage(&block, &ctx_block, block_cap()).await.unwrap();
    k.publish(&block, &ctx_block, block_cap(), false)
        .await
        .unwrap();
    let want = format!("block written by {}", placed.commit);
    let mut got = vec![0u8; want.len()];
    let mut device = std::fs::File::open(k.target(&block)).unwrap();
    device.seek(SeekFrom::Start(8 * 512)).unwrap();
    device.read_exact(&mut got).unwrap();
    drop(device);
    assert_eq!(String::from_utf8_lossy(&got), want);

    // The store lost after this release's first start: the names outlive it.
    csi.kill9();
    for f in ["store.log", "store.snapshot"] {
        let _ = std::fs::remove_file(placed.state().join(f));
    }
    csi.resume().await;
    let mut c = csi.controller().await;
    let got = c
        .create_volume(create_request("pvc-upgrade-idle", 4 * MIB))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(
        got.volume_id, idle,
        "a retried create finds the old release's disk"
    );
    let entries = c
        .list_volumes(csi_v1::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    let mut want = vec![
        (fs.clone(), true),
        (block.clone(), true),
        (idle.clone(), false),
    ];
    want.sort();
    assert_eq!(listed_ids(&entries), want);

    // And the whole life ends.
    let mut k = Kubelet::new(&csi).await;
    k.root = Path::new(ROOT).join("kubelet");
    for id in [&fs, &block] {
        k.unpublish(id).await;
        k.unstage(id).await;
        detach(&mut k, id).await;
    }
    for id in [&fs, &block, &idle] {
        k.c.delete_volume(delete_request(id)).await.unwrap();
    }
    assert!(csi.loops().is_empty());
    assert!(csi.disk_files().is_empty());
}

/// The same release's state with its store lost across the upgrade (the new release never
/// saw it): its disks have no metadata files, so their names come from that release's last
/// `inventory.json` — every one is listed as healthy, and a retried create finds it
/// instead of making a second disk (the case issue 60 found). Then it is used and ended.
#[tokio::test]
async fn the_store_of_688adc9_lost_across_the_upgrade_loses_no_name() {
    let placed = Placed::new("688adc9");
    let (fs, block, idle) = (placed.id("fs"), placed.id("block"), placed.id("idle"));
    assert!(
        placed.state().join("inventory.json").exists(),
        "that release wrote it"
    );
    for f in ["store.log", "store.snapshot"] {
        let _ = std::fs::remove_file(placed.state().join(f));
    }
    let args = placed.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let csi = Csi::start(&args).await;
    let _log = ShowLogOnFailure(csi.log.clone());
    let mut c = csi.controller().await;
    let entries = c
        .list_volumes(csi_v1::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    let mut want = vec![
        (fs.clone(), false),
        (block.clone(), false),
        (idle.clone(), false),
    ];
    want.sort();
    assert_eq!(
        listed_ids(&entries),
        want,
        "nothing attached: the machine rebooted"
    );
    for e in &entries {
        let condition = e.status.as_ref().unwrap().volume_condition.clone().unwrap();
        assert!(!condition.abnormal, "adopted under its name: {condition:?}");
    }
    created_again(&mut c, &placed).await;
    assert_eq!(csi.disk_files().len(), 3, "no second disk");
    assert_eq!(csi.disk_meta(&fs).unwrap()["name"], "pvc-upgrade-fs");

    let mut k = Kubelet::new(&csi).await;
    k.root = Path::new(ROOT).join("kubelet");
    let ctx = k.attach(&fs).await;
    k.stage(&fs, &ctx, mount_cap("ext4")).await.unwrap();
    k.publish(&fs, &ctx, mount_cap("ext4"), false)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(k.target(&fs).join("data")).unwrap(),
        format!("written by {}\n", placed.commit)
    );
    k.unpublish(&fs).await;
    k.unstage(&fs).await;
    detach(&mut k, &fs).await;
    for id in [&fs, &block, &idle] {
        k.c.delete_volume(delete_request(id)).await.unwrap();
    }
    assert!(csi.disk_files().is_empty());
}

/// A state directory a newer release wrote is refused whole, with what wrote it and what
/// to do, and nothing in it is read or changed.
#[tokio::test]
async fn a_state_directory_of_a_newer_format_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(state.join("disks")).unwrap();
    std::fs::write(state.join("FORMAT"), "overcast-local-state 2\n").unwrap();
    // A store this release could not read as its own.
    std::fs::write(state.join("store.log"), b"a newer release's log").unwrap();
    let mut child = Command::new(binary("csi"))
        .arg(format!("--state-dir={}", state.display()))
        .arg(format!(
            "--node-state-dir={}",
            dir.path().join("node").display()
        ))
        .arg(format!(
            "--endpoint=unix://{}",
            dir.path().join("csi.sock").display()
        ))
        .arg(format!("--node-id={NODE_ID}"))
        .arg(format!("--zone={ZONE}"))
        .arg(format!("--region={REGION}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("csi.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "csi kept running on a newer format"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log = std::fs::read_to_string(dir.path().join("csi.log")).unwrap();
    assert!(
        log.contains("is in format 2, written by a newer release of Overcast")
            && log.contains("Run that release (or a newer one)"),
        "{log}"
    );
    assert_eq!(
        std::fs::read(state.join("store.log")).unwrap(),
        b"a newer release's log"
    );
    assert_eq!(
        std::fs::read_to_string(state.join("FORMAT")).unwrap(),
        "overcast-local-state 2\n"
    );
}
