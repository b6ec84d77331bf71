//! The driver's own state lost or half-written, with the real binary on real loop
//! devices, filesystems and mounts: a lost metadata store loses no disk, a first
//! format killed mid-way is made again, and lost or damaged node records leave no mount
//! behind — while a mount of anything else is still refused and kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use overcast_integration::csi_v1 as csi;
use overcast_integration::kubelet::Kubelet;
use overcast_integration::*;
use tonic::Code;

fn blkid_type(device: &str) -> String {
    let out = Command::new("blkid")
        .args(["-p", "-s", "TYPE", "-o", "value", device])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Loop devices whose backing file is `file` (by name: a device bound through a gone
/// mount shows the path from that mount's root).
pub(crate) fn devices_of(file: &Path) -> Vec<String> {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let out = Command::new("losetup").arg("-a").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("/{name})")))
        .map(|l| l.split(':').next().unwrap().to_owned())
        .collect()
}

pub(crate) async fn volume(c: &mut ControllerClient, name: &str, bytes: i64) -> String {
    c.create_volume(create_request(name, bytes))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id
}

async fn listed(c: &mut ControllerClient) -> Vec<csi::list_volumes_response::Entry> {
    c.list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries
}

/// The store gone, the disks directory intact: every disk comes back with its CSI name,
/// size and attachment — the mounted one keeps its one loop device — and a repeated
/// CreateVolume finds its disk. (Before: every file was removed, `removed_files: 3`.)
#[tokio::test]
async fn a_lost_store_is_rebuilt_from_the_disks_and_nothing_is_deleted() {
    let mut csi = Csi::start(&[]).await;
    let mut k = Kubelet::new(&csi).await;
    let mounted = k.create("pvc-mounted", 16 * MIB).await;
    let attached = k.create("pvc-attached", 8 * MIB).await;
    let idle = k.create("pvc-idle", 4 * MIB).await;
    let ctx = k.attach(&mounted).await;
    k.stage(&mounted, &ctx, mount_cap("ext4")).await.unwrap();
    k.publish(&mounted, &ctx, mount_cap("ext4"), false)
        .await
        .unwrap();
    std::fs::write(k.target(&mounted).join("data"), b"still here").unwrap();
    k.attach(&attached).await;
    let loops_before = csi.loops();
    assert_eq!(loops_before.len(), 2);

    csi.kill9();
    for f in ["store.log", "store.snapshot"] {
        let _ = std::fs::remove_file(csi.state_dir.join(f));
    }
    csi.resume().await;

    assert_eq!(csi.disk_files().len(), 3, "no disk file was removed");
    assert_eq!(csi.loops(), loops_before, "the same devices, none added");
    let mut c = csi.controller().await;
    let entries = listed(&mut c).await;
    assert_eq!(entries.len(), 3);
    for (id, bytes, published) in [
        (&mounted, 16 * MIB, true),
        (&attached, 8 * MIB, true),
        (&idle, 4 * MIB, false),
    ] {
        let e = entries
            .iter()
            .find(|e| e.volume.as_ref().unwrap().volume_id == *id)
            .unwrap_or_else(|| panic!("{id} listed"));
        assert_eq!(e.volume.as_ref().unwrap().capacity_bytes, bytes);
        let status = e.status.as_ref().unwrap();
        assert_eq!(!status.published_node_ids.is_empty(), published, "{id}");
        assert!(!status.volume_condition.as_ref().unwrap().abnormal, "{id}");
    }
    // The CSI names came back with the disks: a retried create finds its disk.
    assert_eq!(volume(&mut c, "pvc-idle", 4 * MIB).await, idle);
    assert_eq!(
        std::fs::read(k.target(&mounted).join("data")).unwrap(),
        b"still here"
    );

    // And the whole life goes on from there.
    let mut k = Kubelet::new(&csi).await;
    k.unpublish(&mounted).await;
    k.unstage(&mounted).await;
    for id in [&mounted, &attached] {
        k.detach(id).await;
    }
    for id in [&mounted, &attached, &idle] {
        k.c.delete_volume(delete_request(id)).await.unwrap();
    }
    assert!(csi.loops().is_empty());
    assert!(csi.all_disk_dir_files().is_empty());
}

/// What the disks directory holds after crashes and older versions, at start: a disk
/// file shorter than its metadata says, an empty one (a create never gave either its
/// size: never acknowledged), a temporary metadata file and one beside no disk are
/// removed; a disk file with neither record nor metadata is kept, listed under its id as
/// abnormal, and deletable; a recorded disk whose metadata is missing gets it back.
#[tokio::test]
async fn files_nothing_explains_are_kept_and_reported_and_leftovers_removed() {
    let mut csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let old = volume(&mut c, "pvc-old", 4 * MIB).await;
    let cut = volume(&mut c, "pvc-cut-short", 4 * MIB).await;
    let cut_meta = csi.disk_meta(&cut).expect("a disk has its metadata file");
    csi.kill9();
    let disks = csi.disks_dir();
    let tmp = disks.join("vol-22222222222222222222222222222222.json.tmp");
    let empty = disks.join("vol-33333333333333333333333333333333.img");
    let stray = "vol-44444444444444444444444444444444";
    let lonely_meta = disks.join("vol-55555555555555555555555555555555.json");
    for (f, len) in [(&tmp, 10), (&empty, 0)] {
        std::fs::File::create(f).unwrap().set_len(len).unwrap();
    }
    std::fs::write(disks.join(format!("{stray}.img")), vec![7u8; 2 << 20]).unwrap();
    std::fs::write(&lonely_meta, b"{}").unwrap();
    // An older version's disk: recorded, no metadata file.
    std::fs::remove_file(disks.join(format!("{old}.json"))).unwrap();
    csi.resume().await;

    for gone in [&tmp, &empty, &lonely_meta] {
        assert!(!gone.exists(), "{} removed", gone.display());
    }
    assert_eq!(
        csi.disk_meta(&old).map(|m| m["name"].clone()),
        Some(serde_json::json!("pvc-old")),
        "a recorded disk's missing metadata is written again"
    );
    let mut c = csi.controller().await;
    let entries = listed(&mut c).await;
    let kept = entries
        .iter()
        .find(|e| e.volume.as_ref().unwrap().volume_id == stray)
        .expect("the unexplained disk is listed under its id");
    let condition = kept
        .status
        .as_ref()
        .unwrap()
        .volume_condition
        .clone()
        .unwrap();
    assert!(condition.abnormal);
    assert!(
        condition.message.contains("no record and no metadata"),
        "{}",
        condition.message
    );
    assert_eq!(kept.volume.as_ref().unwrap().capacity_bytes, 2 << 20);

    // `cut` as a create killed before it sized its file: no record, its metadata beside a
    // file shorter than it says — both removed at start, never adopted at a size it never
    // had.
    c.delete_volume(delete_request(&cut)).await.unwrap();
    csi.kill9();
    let cut_file = disks.join(format!("{cut}.img"));
    std::fs::File::create(&cut_file)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    std::fs::write(
        disks.join(format!("{cut}.json")),
        cut_meta.to_string().as_bytes(),
    )
    .unwrap();
    csi.resume().await;
    assert!(!cut_file.exists(), "an unfinished create is removed");
    assert!(csi.disk_meta(&cut).is_none(), "with its metadata file");
    // Kept across another start, with its data.
    assert_eq!(
        std::fs::read(disks.join(format!("{stray}.img"))).unwrap(),
        vec![7u8; 2 << 20]
    );
    let mut c = csi.controller().await;
    assert!(listed(&mut c)
        .await
        .iter()
        .all(|e| e.volume.as_ref().unwrap().volume_id != cut));
    for id in [stray, old.as_str()] {
        c.delete_volume(delete_request(id)).await.unwrap();
    }
    assert!(csi.all_disk_dir_files().is_empty());
}

/// A `mkfs.ext4` that stands for one killed part-way through a first format: it writes
/// part of its output (no superblock) and kills its caller, the node plugin. Once it has
/// fired, it runs the real mkfs.
fn interrupting_mkfs(dir: &Path) -> PathBuf {
    let real = Command::new("sh")
        .args(["-c", "command -v mkfs.ext4"])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_owned();
    assert!(!real.is_empty(), "mkfs.ext4 is installed");
    let bin = dir.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        r#"#!/bin/sh
marker="{marker}"
for a in "$@"; do dev="$a"; done
if [ -e "$marker" ]; then exec {real} "$@"; fi
touch "$marker"
dd if=/dev/urandom of="$dev" bs=4096 seek=16 count=16 conv=notrunc,fsync 2>/dev/null
kill -9 $PPID
sleep 10
"#,
        marker = dir.join("mkfs-fired").display(),
    );
    let path = bin.join("mkfs.ext4");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

async fn stage_after_crash(
    csi: &mut Csi,
    k: &mut Kubelet,
    id: &str,
    ctx: &HashMap<String, String>,
) {
    let first = k.stage(id, ctx, mount_cap("ext4")).await;
    assert!(first.is_err(), "the plugin died during mkfs");
    let device = &ctx["devicePath"];
    assert_eq!(
        blkid_type(device),
        "",
        "the kill left no filesystem blkid can name"
    );
    csi.restart().await;
    let mut k2 = Kubelet::new(csi).await;
    k2.stage(id, ctx, mount_cap("ext4"))
        .await
        .expect("the next stage formats again");
    assert_eq!(blkid_type(device), "ext4");
    k2.publish(id, ctx, mount_cap("ext4"), false).await.unwrap();
    std::fs::write(k2.target(id).join("f"), b"on a clean filesystem").unwrap();
    k2.unpublish(id).await;
    k2.unstage(id).await;
    let fsck = Command::new("e2fsck")
        .args(["-fn", device])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "a clean filesystem: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    *k = k2;
}

/// The node plugin killed in the middle of a volume's first mkfs — by an mkfs that dies
/// part-way, and by the fault point the real-node test arms — formats it again on the
/// next stage; a disk holding the same kind of data with no format of ours begun on it
/// is still refused. (Before: every later stage answered FAILED_PRECONDITION "the device
/// holds data blkid cannot name" and the pod never started.)
#[tokio::test]
async fn a_first_format_killed_mid_way_is_made_again_and_nothing_else_is() {
    let scratch = tempfile::tempdir().unwrap();
    let bin = interrupting_mkfs(scratch.path());
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut csi = Csi::start_with_env(&[], &[("PATH", &path)]).await;
    let mut k = Kubelet::new(&csi).await;
    let a = k.create("pvc-mkfs-killed", 16 * MIB).await;
    let ctx = k.attach(&a).await;
    stage_after_crash(&mut csi, &mut k, &a, &ctx).await;

    // The same through the fault point, with the real mkfs.
    csi.kill9();
    let mut csi2 = Csi::start_with_env(&[], &[("OVERCAST_FAULTS", "kill-during-mkfs")]).await;
    let mut k = Kubelet::new(&csi2).await;
    let b = k.create("pvc-fault-point", 16 * MIB).await;
    let ctx = k.attach(&b).await;
    stage_after_crash(&mut csi2, &mut k, &b, &ctx).await;
    assert!(csi2.log_text().contains("formatting again"));

    // Data nobody's format left: still refused, still there.
    let c = k.create("pvc-users-data", 16 * MIB).await;
    let ctx = k.attach(&c).await;
    let device = ctx["devicePath"].clone();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&device)
            .unwrap();
        f.seek(SeekFrom::Start(64 << 10)).unwrap();
        f.write_all(&[0x5a; 4096]).unwrap();
        f.sync_all().unwrap();
    }
    let e = k.stage(&c, &ctx, mount_cap("ext4")).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("blkid cannot name"), "{e}");
    assert_eq!(blkid_type(&device), "");
    for id in [&a, &b, &c] {
        detach_as_the_attacher_does(&mut k, id).await;
    }
    drop(csi);
}

/// ControllerUnpublishVolume retried on FAILED_PRECONDITION for up to 30 s, as the
/// external-attacher retries it: a mkfs orphaned by the killed plugin keeps the device
/// open exclusively until it ends, which takes longer on a loaded machine (seen in CI).
async fn detach_as_the_attacher_does(k: &mut Kubelet, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match k.c.controller_unpublish_volume(unpublish_request(id)).await {
            Ok(_) => return,
            Err(e) if e.code() == Code::FailedPrecondition && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("detach {id}: {e:?}"),
        }
    }
}

/// A loop device of the test's own, formatted and mounted at a path: something that is
/// not the volume's disk. Unmounted and detached when dropped, also when a check failed.
struct ForeignMount {
    device: String,
    at: PathBuf,
}

impl ForeignMount {
    fn new(dir: &Path, at: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let file = dir.join("foreign.img");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&file)
            .output()
            .unwrap();
        let device = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let me = Self {
            device,
            at: at.to_owned(),
        };
        assert!(Command::new("mkfs.ext4")
            .args(["-q", &me.device])
            .status()
            .unwrap()
            .success());
        std::fs::create_dir_all(at).unwrap();
        assert!(Command::new("mount")
            .arg(&me.device)
            .arg(at)
            .status()
            .unwrap()
            .success());
        me
    }
}

impl Drop for ForeignMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// With the node's records deleted (a node rebuilt, another plugin's volume), unpublish
/// and unstage take away the mounts of the volume's own disk — after which the detach
/// succeeds — while a mount of another disk at a path they name is kept.
/// Damaged records are set aside and the plugin serves on, saying so. (Before: both calls
/// answered OK and unmounted nothing, the detach failed with the device busy, and a
/// damaged file made the plugin exit at every start.)
#[tokio::test]
async fn lost_or_damaged_node_records_leave_no_mount_and_touch_nothing_else() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let metrics = format!("--metrics-address=127.0.0.1:{port}");
    let mut csi = Csi::start(&[&metrics]).await;
    let mut k = Kubelet::new(&csi).await;
    let id = k.create("pvc-records-lost", 16 * MIB).await;
    let ctx = k.attach(&id).await;
    k.stage(&id, &ctx, mount_cap("ext4")).await.unwrap();
    k.publish(&id, &ctx, mount_cap("ext4"), false)
        .await
        .unwrap();

    csi.kill9();
    std::fs::remove_file(csi.dir.path().join("node/volumes.json")).unwrap();
    csi.resume().await;
    let mut k = Kubelet::new(&csi).await;

    // Someone else's disk mounted at paths this volume's calls name: the volume is not
    // there (the spec's OK), and the other disk stays mounted.
    let elsewhere = csi.dir.path().join("elsewhere");
    let foreign_target = elsewhere.join("target");
    let _foreign = ForeignMount::new(&elsewhere, &foreign_target);
    k.n.node_unpublish_volume(node_unpublish_request(&id, &foreign_target))
        .await
        .unwrap();
    k.n.node_unstage_volume(unstage_request(&id, &foreign_target))
        .await
        .unwrap();
    assert!(
        is_mount_point(&foreign_target),
        "the other disk stays mounted"
    );
    let e = k.stats(&id, &foreign_target).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    // The staging mount cannot go while the pod's bind of it is there.
    let e =
        k.n.node_unstage_volume(unstage_request(&id, &k.staging(&id)))
            .await
            .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("still mounted at"), "{e}");

    let stats = k
        .stats(&id, &k.target(&id))
        .await
        .expect("stats from the mount");
    assert!(!stats.usage.is_empty());
    k.unpublish(&id).await;
    k.unstage(&id).await;
    assert!(!is_mount_point(&k.staging(&id)));
    k.detach(&id).await;
    assert!(csi.loops().is_empty(), "the detach went through");

    // Damaged records: set aside, and the plugin serves on.
    let ctx = k.attach(&id).await;
    k.stage(&id, &ctx, mount_cap("ext4")).await.unwrap();
    csi.kill9();
    std::fs::write(csi.dir.path().join("node/volumes.json"), b"{\"vol-").unwrap();
    csi.resume().await;
    let aside: Vec<String> = std::fs::read_dir(csi.dir.path().join("node"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("volumes.json.damaged-"))
        .collect();
    assert_eq!(aside.len(), 1, "kept for a human: {aside:?}");
    assert!(csi.log_text().contains("set aside"));
    let body = Command::new("curl")
        .args(["-fsS", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&body.stdout);
    assert!(body.contains("csi_node_records_set_aside 1"), "{body}");
    let mut k = Kubelet::new(&csi).await;
    k.unstage(&id).await;
    k.detach(&id).await;
    let body = Command::new("curl")
        .args(["-fsS", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&body.stdout);
    assert!(
        body.contains("csi_node_unrecorded_mount_calls_total{operation=\"unstage\"} 1"),
        "{body}"
    );
    k.c.delete_volume(delete_request(&id)).await.unwrap();
}
