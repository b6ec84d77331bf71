//! The local cloud's metadata store on a filesystem that fills up, then goes read-only:
//! each failure gets the code that names it, Probe is not ready while the store cannot
//! write, the store recovers by itself once the cause is gone (DeleteVolume included,
//! which is what frees the space), and nothing acknowledged is lost. Replays issue 12 §5
//! on a real ext4 of its own.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use std::process::Command;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use overcast_integration::csi_v1 as csi;
use overcast_integration::*;
use tonic::Code;

/// A small ext4 on a loop device of its own, mounted with `errors=remount-ro` so that a
/// filesystem error turns it read-only as it would on a failing disk; unmounted and
/// detached when dropped (after the driver using it is gone).
struct SmallFs {
    dir: tempfile::TempDir,
    image: PathBuf,
    device: String,
}

impl SmallFs {
    fn new(mib: u64) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("overcast-small-")
            .tempdir()
            .unwrap();
        let image = dir.path().join("fs.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&image)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let device = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let fs = Self { dir, image, device };
        assert!(Command::new("mkfs.ext4")
            .args(["-q", &fs.device])
            .status()
            .unwrap()
            .success());
        std::fs::create_dir_all(fs.path()).unwrap();
        fs.mount();
        fs
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    fn mount(&self) {
        mount(
            Some(self.device.as_str()),
            &self.path(),
            Some("ext4"),
            MsFlags::empty(),
            Some("errors=remount-ro"),
        )
        .unwrap();
    }

    /// A filesystem error, as a failing disk causes: ext4 turns itself read-only, for
    /// good until it is unmounted and checked.
    fn fail(&self) {
        let name = Path::new(&self.device).file_name().unwrap();
        std::fs::write(
            Path::new("/sys/fs/ext4")
                .join(name)
                .join("trigger_fs_error"),
            b"overcast test",
        )
        .unwrap();
    }

    /// What an operator does: unmount, check, mount again.
    fn repair(&self) {
        umount2(&self.path(), MntFlags::empty()).unwrap();
        let status = Command::new("e2fsck")
            .args(["-fy", &self.device])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.code().unwrap_or(8) < 4, "e2fsck: {status}");
        self.mount();
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        detach_loops_under(&self.path());
        let _ = umount2(&self.path(), MntFlags::MNT_DETACH);
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Writes `path` until the filesystem is full, to the last byte.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    for chunk in [64 << 10, 4096, 1] {
        let bytes = vec![0xa5u8; chunk];
        while f.write_all(&bytes).is_ok() {}
    }
    let _ = f.sync_all();
}

async fn ready(csi: &Csi) -> bool {
    csi.identity()
        .await
        .probe(csi::ProbeRequest {})
        .await
        .unwrap()
        .into_inner()
        .ready
        == Some(true)
}

async fn listed(c: &mut ControllerClient) -> BTreeSet<String> {
    c.list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries
        .into_iter()
        .filter_map(|e| Some(e.volume?.volume_id))
        .collect()
}

fn thick(name: &str, bytes: i64) -> csi::CreateVolumeRequest {
    let mut req = create_request(name, bytes);
    req.parameters
        .insert("thickProvisioning".into(), "true".into());
    req
}

#[tokio::test]
async fn a_full_then_read_only_state_filesystem_fails_clearly_and_heals() {
    let fs = SmallFs::new(32);
    let state: PathBuf = fs.path().join("state");
    let mut csi = Csi::start(&[&format!("--state-dir={}", state.display())]).await;
    let mut c = csi.controller().await;
    let mut acknowledged = BTreeSet::new();

    // A thick disk holds real space; a filler takes the rest.
    let big = c
        .create_volume(thick("space-holder", 4 * MIB))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    acknowledged.insert(big.clone());
    fill(&fs.path().join("filler"));

    // Creating goes on until the store cannot grow: each such answer is
    // RESOURCE_EXHAUSTED naming the cause, never INTERNAL, and never the end of the
    // store (before, one ENOSPC poisoned it for good: "Previous I/O error").
    let mut failures = 0;
    for i in 0..2000 {
        match c
            .create_volume(create_request(&format!("thin-{i}"), MIB))
            .await
        {
            Ok(r) => {
                acknowledged.insert(r.into_inner().volume.unwrap().volume_id);
                failures = 0;
            }
            Err(e) => {
                assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                assert!(e.message().contains("No space left"), "{e:?}");
                failures += 1;
                if failures == 3 {
                    break;
                }
            }
        }
    }
    assert_eq!(failures, 3, "the filesystem filled up");
    // Whether Probe is ready now depends on whether a small durable write still fits
    // (the store checks with one); the read-only case below is where it cannot.

    // Deleting the disk that holds the space is what frees it: it must work now.
    c.delete_volume(delete_request(&big)).await.unwrap();
    acknowledged.remove(&big);
    assert!(ready(&csi).await, "the store healed itself");
    let after = c
        .create_volume(create_request("after-delete", MIB))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    acknowledged.insert(after);
    assert_eq!(listed(&mut c).await, acknowledged);

    // A disk error turns the filesystem read-only: not ready at once, every change
    // UNAVAILABLE, nothing half-done.
    fs.fail();
    assert!(!ready(&csi).await);
    let err = c
        .create_volume(create_request("read-only", MIB))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let some = acknowledged.iter().next().unwrap().clone();
    let err = c.delete_volume(delete_request(&some)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");

    // ext4 stays read-only until it is checked: the pod is restarted (the liveness
    // probe fails), the operator repairs the filesystem, and the driver comes back with
    // everything it acknowledged and nothing else.
    drop(c);
    csi.kill9();
    fs.repair();
    csi.resume().await;
    let mut c = csi.controller().await;
    assert_eq!(listed(&mut c).await, acknowledged);
    let last = c
        .create_volume(create_request("writable-again", MIB))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    acknowledged.insert(last);
    csi.restart().await;
    let mut c = csi.controller().await;
    assert_eq!(listed(&mut c).await, acknowledged);
    drop(c);
    drop(csi);
}

#[tokio::test]
async fn a_log_that_cannot_be_written_never_kills_a_call() {
    // The log on a filesystem that is full: every call still gets its answer (before,
    // the log subscriber's own error report panicked inside the handler, and the call
    // ended as an HTTP/2 stream reset).
    let fs = SmallFs::new(8);
    let log = fs.path().join("csi.log");
    let csi = Csi::start_logging_to(&[], log).await;
    fill(&fs.path().join("filler"));
    let mut c = csi.controller().await;
    for _ in 0..200 {
        // An error is logged at info: the log write fails each time.
        let err = c
            .controller_get_volume(csi::ControllerGetVolumeRequest {
                volume_id: "vol-0123456789abcdef0123456789abcdef".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{err:?}");
    }
    assert!(ready(&csi).await);
    drop(c);
    drop(csi);
}
