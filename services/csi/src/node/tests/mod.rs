//! The node service's decisions — when it formats, what it refuses, what it records —
//! against an in-memory host, without root. The same paths run for real (loop devices,
//! mkfs, mounts) in integration/tests/csi/node.rs and csi-sanity.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use overcast_api::csi_v1 as csi;
use overcast_cloud::{PublishContext, Zone};
use overcast_mount::format::Content;
use overcast_mount::mountinfo::MountInfo;
use overcast_mount::{Host, MountError};
use tonic::Code;

use super::{NodeService, NodeState, NodeZone};

struct Disk {
    dev: PathBuf,
    numbers: (u32, u32),
    content: Content,
}

/// A host with disks by serial, a mount table, and a log of what was formatted.
#[derive(Default)]
struct FakeHost {
    disks: Mutex<HashMap<String, Disk>>,
    mounts: Mutex<Vec<MountInfo>>,
    formatted: Mutex<Vec<(PathBuf, String)>>,
    rescans: Mutex<Vec<PathBuf>>,
    /// mkfs fails half-way: it leaves data no tool can name.
    mkfs_breaks: Mutex<bool>,
}

impl FakeHost {
    fn disk(&self, serial: &str, minor: u32, content: Content) {
        self.disks.lock().unwrap().insert(
            serial.into(),
            Disk {
                dev: PathBuf::from(format!("/dev/sd{minor}")),
                numbers: (8, minor),
                content,
            },
        );
    }

    fn by_dev<T>(&self, dev: &Path, f: impl FnOnce(&mut Disk) -> T) -> Option<T> {
        self.disks
            .lock()
            .unwrap()
            .values_mut()
            .find(|d| d.dev == dev)
            .map(f)
    }

    fn mounted_at(&self, path: &Path) -> usize {
        self.mounts
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m.mount_point == path)
            .count()
    }
}

fn unknown(dev: &Path) -> MountError {
    MountError::Invalid(format!("{} is not a block device", dev.display()))
}

#[async_trait]
impl Host for FakeHost {
    async fn find_device(
        &self,
        ctx: &PublishContext,
        _: Duration,
    ) -> overcast_mount::Result<PathBuf> {
        let serial = ctx.serial.clone().unwrap_or_default();
        self.disks
            .lock()
            .unwrap()
            .get(&serial)
            .map(|d| d.dev.clone())
            .ok_or(MountError::DeviceNotFound(serial))
    }
    fn find_device_now(&self, ctx: &PublishContext) -> Option<PathBuf> {
        let serial = ctx.serial.clone()?;
        self.disks
            .lock()
            .unwrap()
            .get(&serial)
            .map(|d| d.dev.clone())
    }
    fn device_numbers(&self, dev: &Path) -> overcast_mount::Result<(u32, u32)> {
        self.by_dev(dev, |d| d.numbers).ok_or_else(|| unknown(dev))
    }
    fn is_block_device(&self, path: &Path) -> bool {
        self.by_dev(path, |_| ()).is_some()
    }
    fn device_size(&self, _: &Path) -> overcast_mount::Result<u64> {
        Ok(1 << 30)
    }
    fn rescan_size(&self, dev: &Path) -> overcast_mount::Result<()> {
        self.rescans.lock().unwrap().push(dev.to_owned());
        Ok(())
    }
    fn device_problem(&self, major: u32, minor: u32) -> Option<String> {
        let present = self
            .disks
            .lock()
            .unwrap()
            .values()
            .any(|d| d.numbers == (major, minor));
        (!present).then(|| format!("device {major}:{minor} is gone"))
    }
    fn top_mount(&self, path: &Path) -> overcast_mount::Result<Option<MountInfo>> {
        Ok(self
            .mounts
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m.mount_point == path)
            .cloned())
    }
    fn mounts_of(&self, major: u32, minor: u32) -> overcast_mount::Result<Vec<MountInfo>> {
        Ok(self
            .mounts
            .lock()
            .unwrap()
            .iter()
            .filter(|m| (m.major, m.minor) == (major, minor))
            .cloned()
            .collect())
    }
    async fn probe(&self, dev: &Path) -> overcast_mount::Result<Content> {
        self.by_dev(dev, |d| d.content.clone())
            .ok_or_else(|| unknown(dev))
    }
    async fn mkfs(&self, dev: &Path, fs_type: &str, _: bool) -> overcast_mount::Result<()> {
        if *self.mkfs_breaks.lock().unwrap() {
            self.by_dev(dev, |d| {
                d.content = Content::Unknown("half a filesystem".into())
            })
            .ok_or_else(|| unknown(dev))?;
            return Err(MountError::Command {
                command: "mkfs".into(),
                status: "signal: 9".into(),
                stderr: String::new(),
            });
        }
        self.by_dev(dev, |d| d.content = Content::Filesystem(fs_type.into()))
            .ok_or_else(|| unknown(dev))?;
        self.formatted
            .lock()
            .unwrap()
            .push((dev.to_owned(), fs_type.into()));
        Ok(())
    }
    fn read_only(&self, _: &Path) -> overcast_mount::Result<bool> {
        Ok(false)
    }
    async fn grow(&self, _: &Path, _: &Path, _: &str) -> overcast_mount::Result<()> {
        Ok(())
    }
    fn mount_fs(
        &self,
        dev: &Path,
        target: &Path,
        fs_type: &str,
        _: &[String],
    ) -> overcast_mount::Result<()> {
        let (major, minor) = self.device_numbers(dev)?;
        self.mounts.lock().unwrap().push(MountInfo {
            major,
            minor,
            root: "/".into(),
            mount_point: target.to_owned(),
            options: vec!["rw".into()],
            fs_type: fs_type.into(),
            source: dev.display().to_string(),
        });
        Ok(())
    }
    fn bind(
        &self,
        source: &Path,
        target: &Path,
        readonly: bool,
        _: &[String],
    ) -> overcast_mount::Result<()> {
        let mut m = self.top_mount(source)?.ok_or_else(|| {
            MountError::Invalid(format!("nothing mounted at {}", source.display()))
        })?;
        m.mount_point = target.to_owned();
        m.options = vec![if readonly { "ro" } else { "rw" }.into()];
        self.mounts.lock().unwrap().push(m);
        Ok(())
    }
    fn unmount_all(&self, target: &Path) -> overcast_mount::Result<()> {
        self.mounts
            .lock()
            .unwrap()
            .retain(|m| m.mount_point != target);
        Ok(())
    }
}

const VOL: &str = "vol-0123456789abcdef0123456789abcdef";

struct Node {
    host: Arc<FakeHost>,
    node: NodeService,
    dir: tempfile::TempDir,
}

fn node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(FakeHost::default());
    let state = NodeState::open(&dir.path().join("state")).unwrap();
    let node = NodeService::new(
        "n1".into(),
        16,
        NodeZone::Known(Zone {
            region: "r1".into(),
            zone: "z1".into(),
        }),
        state,
        Duration::from_millis(10),
        Arc::clone(&host) as Arc<dyn Host>,
    );
    Node { host, node, dir }
}

fn mount_cap(fs: &str) -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume {
                fs_type: fs.into(),
                ..Default::default()
            },
        )),
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
        }),
    }
}

impl Node {
    fn staging(&self) -> PathBuf {
        self.dir.path().join("staging")
    }
    fn target(&self) -> PathBuf {
        self.dir.path().join("pod/target")
    }
    async fn stage(&self, serial: &str, fs: &str) -> Result<(), tonic::Status> {
        let ctx = PublishContext {
            serial: Some(serial.into()),
            ..Default::default()
        };
        self.node
            .stage(csi::NodeStageVolumeRequest {
                volume_id: VOL.into(),
                staging_target_path: self.staging().display().to_string(),
                volume_capability: Some(mount_cap(fs)),
                publish_context: ctx.to_map().into_iter().collect(),
                ..Default::default()
            })
            .await
            .map(|_| ())
    }
    async fn publish(&self) -> Result<(), tonic::Status> {
        self.node
            .publish(csi::NodePublishVolumeRequest {
                volume_id: VOL.into(),
                staging_target_path: self.staging().display().to_string(),
                target_path: self.target().display().to_string(),
                volume_capability: Some(mount_cap("ext4")),
                ..Default::default()
            })
            .await
            .map(|_| ())
    }
    async fn unstage(&self) -> Result<(), tonic::Status> {
        self.node
            .unstage(csi::NodeUnstageVolumeRequest {
                volume_id: VOL.into(),
                staging_target_path: self.staging().display().to_string(),
            })
            .await
            .map(|_| ())
    }
}

#[tokio::test]
async fn a_blank_disk_is_formatted_once_and_staging_again_is_idempotent() {
    let n = node();
    n.host.disk("s1", 1, Content::Blank);
    n.stage("s1", "ext4").await.unwrap();
    n.stage("s1", "ext4").await.unwrap();
    assert_eq!(
        *n.host.formatted.lock().unwrap(),
        vec![(PathBuf::from("/dev/sd1"), "ext4".to_owned())]
    );
    assert_eq!(n.host.mounted_at(&n.staging()), 1, "mounted once");
    // Asked again as another filesystem: refused, not re-formatted.
    let e = n.stage("s1", "xfs").await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e}");
    assert_eq!(n.host.formatted.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_disk_holding_data_is_never_formatted() {
    for (content, says) in [
        (Content::Filesystem("xfs".into()), "holds xfs"),
        (Content::PartitionTable("gpt".into()), "partition table"),
        (Content::Unknown("LVM2_member".into()), "cannot name"),
    ] {
        let n = node();
        n.host.disk("s1", 1, content);
        let e = n.stage("s1", "ext4").await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
        assert!(e.message().contains(says), "{e}");
        assert!(n.host.formatted.lock().unwrap().is_empty());
        assert_eq!(n.host.mounted_at(&n.staging()), 0);
        // Nothing recorded as staged: unstage touches nothing and succeeds.
        n.unstage().await.unwrap();
    }
}

#[tokio::test]
async fn a_staging_path_holding_another_device_is_refused() {
    let n = node();
    n.host.disk("s1", 1, Content::Blank);
    n.host.disk("other", 2, Content::Filesystem("ext4".into()));
    n.host
        .mount_fs(Path::new("/dev/sd2"), &n.staging(), "ext4", &[])
        .unwrap();
    let e = n.stage("s1", "ext4").await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e}");
    assert!(n.host.formatted.lock().unwrap().is_empty());
}

#[tokio::test]
async fn unstage_waits_for_unpublish_and_then_leaves_nothing_mounted() {
    let n = node();
    n.host.disk("s1", 1, Content::Blank);
    n.stage("s1", "ext4").await.unwrap();
    n.publish().await.unwrap();
    n.publish().await.unwrap();
    assert_eq!(n.host.mounted_at(&n.target()), 1, "published once");
    let e = n.unstage().await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert_eq!(
        n.host.mounted_at(&n.staging()),
        1,
        "the staging mount stays under a live publish"
    );
    n.node
        .unpublish(csi::NodeUnpublishVolumeRequest {
            volume_id: VOL.into(),
            target_path: n.target().display().to_string(),
        })
        .await
        .unwrap();
    n.unstage().await.unwrap();
    assert!(n.host.mounts.lock().unwrap().is_empty());
    assert!(
        !n.target().exists(),
        "the target directory the driver made is removed"
    );
}

#[tokio::test]
async fn a_device_that_never_appears_is_not_found_and_nothing_is_recorded() {
    let n = node();
    let e = n.stage("missing", "ext4").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    assert!(n.node.state.get(VOL).and_then(|v| v.staging).is_none());
}

/// NodeExpandVolume on a disk smaller than asked: without rescan-on-resize it answers
/// OUT_OF_RANGE and touches nothing; with it, the disk is rescanned (once, then the size
/// is read until the wait ends) before the same answer; a disk already big enough is
/// never rescanned.
#[tokio::test]
async fn expand_rescans_a_lagging_disk_only_when_asked_to() {
    for rescan in [false, true] {
        let mut n = node();
        n.node = n.node.with_rescan_on_resize(rescan);
        n.host.disk("s1", 1, Content::Blank);
        n.stage("s1", "ext4").await.unwrap();
        let expand = |bytes: i64| csi::NodeExpandVolumeRequest {
            volume_id: VOL.into(),
            volume_path: n.staging().display().to_string(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: bytes,
                limit_bytes: 0,
            }),
            ..Default::default()
        };
        let e = n.node.expand(expand(2 << 30)).await.unwrap_err();
        assert_eq!(e.code(), Code::OutOfRange, "{e}");
        let asked = n.host.rescans.lock().unwrap().clone();
        let want: Vec<PathBuf> = match rescan {
            true => vec!["/dev/sd1".into()],
            false => vec![],
        };
        assert_eq!(asked, want, "rescan-on-resize {rescan}");
        let done = n.node.expand(expand(1 << 30)).await.unwrap();
        assert_eq!(done.capacity_bytes, 1 << 30);
        assert_eq!(n.host.rescans.lock().unwrap().len(), want.len());
    }
}

/// A format this node began and that failed half-way is its own to finish: the next
/// stage formats again, while data nobody's format left is still refused.
#[tokio::test]
async fn an_interrupted_format_of_our_own_is_made_again_and_nothing_else_is() {
    let n = node();
    n.host.disk("s1", 1, Content::Blank);
    *n.host.mkfs_breaks.lock().unwrap() = true;
    let e = n.stage("s1", "ext4").await.unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e}");
    let intent = n.node.state.get(VOL).and_then(|v| v.formatting);
    assert_eq!(intent.map(|i| i.fs_type).as_deref(), Some("ext4"));
    assert_eq!(n.host.mounted_at(&n.staging()), 0);

    *n.host.mkfs_breaks.lock().unwrap() = false;
    n.stage("s1", "ext4").await.unwrap();
    assert_eq!(n.host.mounted_at(&n.staging()), 1);
    let record = n.node.state.get(VOL).unwrap();
    assert_eq!(
        record.formatting, None,
        "the intent is cleared once mkfs succeeded"
    );
    assert_eq!(n.host.formatted.lock().unwrap().len(), 1);

    // The same remains with no intent (another node's, or a user's data): refused.
    let other = node();
    other
        .host
        .disk("s1", 1, Content::Unknown("half a filesystem".into()));
    let e = other.stage("s1", "ext4").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(other.host.formatted.lock().unwrap().is_empty());
}

impl Node {
    /// This node with its records lost: a fresh service on the same host, with a cloud
    /// whose volume ids are their disks' serials.
    fn forgetful(&self, disk_of_volume: overcast_cloud::DiskOfVolume) -> NodeService {
        let dir = self.dir.path().join(format!("state-{}", rand_suffix()));
        NodeService::new(
            "n1".into(),
            16,
            NodeZone::Known(Zone::default()),
            NodeState::open(&dir).unwrap(),
            Duration::from_millis(10),
            Arc::clone(&self.host) as Arc<dyn Host>,
        )
        .with_disk_of_volume(disk_of_volume)
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn unpublish_req(n: &Node) -> csi::NodeUnpublishVolumeRequest {
    csi::NodeUnpublishVolumeRequest {
        volume_id: VOL.into(),
        target_path: n.target().display().to_string(),
    }
}

fn unstage_req(n: &Node) -> csi::NodeUnstageVolumeRequest {
    csi::NodeUnstageVolumeRequest {
        volume_id: VOL.into(),
        staging_target_path: n.staging().display().to_string(),
    }
}

/// With its records gone, the node unpublishes and unstages a mount of the volume's own
/// disk (by its serial, the id), serves its stats, refuses to unstage under a live bind,
/// keeps a mount of any other disk, and refuses one it cannot tell apart.
#[tokio::test]
async fn without_records_only_the_volume_s_own_disk_is_unmounted() {
    use overcast_cloud::DiskOfVolume;
    let n = node();
    n.host.disk(VOL, 1, Content::Blank);
    n.stage(VOL, "ext4").await.unwrap();
    n.publish().await.unwrap();

    // A cloud whose ids do not name their disks: nothing is taken.
    let blind = n.forgetful(DiskOfVolume::Unknown);
    let e = blind.unpublish(unpublish_req(&n)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("cannot be told"), "{e}");
    assert_eq!(n.host.mounted_at(&n.target()), 1);

    let node = n.forgetful(DiskOfVolume::Serial);
    let stats = node
        .stats(csi::NodeGetVolumeStatsRequest {
            volume_id: VOL.into(),
            volume_path: n.target().display().to_string(),
            ..Default::default()
        })
        .await;
    // statvfs of a path the fake host only pretends is mounted: found, then the real
    // call fails; what matters is that it is not NOT_FOUND.
    assert_ne!(stats.err().map(|e| e.code()), Some(Code::NotFound));
    let e = node.unstage(unstage_req(&n)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("still mounted at"), "{e}");
    assert_eq!(n.host.mounted_at(&n.staging()), 1);

    node.unpublish(unpublish_req(&n)).await.unwrap();
    assert_eq!(n.host.mounted_at(&n.target()), 0);
    node.unstage(unstage_req(&n)).await.unwrap();
    assert!(n.host.mounts.lock().unwrap().is_empty());
    // Again: nothing there, the spec's idempotent success.
    node.unpublish(unpublish_req(&n)).await.unwrap();
    node.unstage(unstage_req(&n)).await.unwrap();

    // Another disk mounted where this volume would be: the volume is not there (the
    // spec's OK), and the other mount stays.
    n.host
        .disk("someone-else", 2, Content::Filesystem("ext4".into()));
    n.host
        .mount_fs(Path::new("/dev/sd2"), &n.staging(), "ext4", &[])
        .unwrap();
    n.host
        .mount_fs(Path::new("/dev/sd2"), &n.target(), "ext4", &[])
        .unwrap();
    node.unstage(unstage_req(&n)).await.unwrap();
    node.unpublish(unpublish_req(&n)).await.unwrap();
    assert_eq!(n.host.mounted_at(&n.staging()), 1);
    assert_eq!(n.host.mounted_at(&n.target()), 1);
    let e = node
        .stats(csi::NodeGetVolumeStatsRequest {
            volume_id: VOL.into(),
            volume_path: n.target().display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
}

/// A stage made by someone else (or before the records were lost) is published from
/// when its mount is the volume's disk, and recorded as this node's.
#[tokio::test]
async fn a_publish_adopts_a_stage_of_the_volume_s_own_disk() {
    use overcast_cloud::DiskOfVolume;
    let n = node();
    n.host.disk(VOL, 1, Content::Filesystem("ext4".into()));
    std::fs::create_dir_all(n.staging()).unwrap();
    n.host
        .mount_fs(Path::new("/dev/sd1"), &n.staging(), "ext4", &[])
        .unwrap();
    let blind = n.forgetful(DiskOfVolume::Unknown);
    let e = blind
        .publish(csi::NodePublishVolumeRequest {
            volume_id: VOL.into(),
            staging_target_path: n.staging().display().to_string(),
            target_path: n.target().display().to_string(),
            volume_capability: Some(mount_cap("ext4")),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    let node = n.forgetful(DiskOfVolume::Serial);
    node.publish(csi::NodePublishVolumeRequest {
        volume_id: VOL.into(),
        staging_target_path: n.staging().display().to_string(),
        target_path: n.target().display().to_string(),
        volume_capability: Some(mount_cap("ext4")),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(n.host.mounted_at(&n.target()), 1);
    let record = node.state.get(VOL).unwrap();
    assert_eq!(record.staging.as_deref(), Some(n.staging().as_path()));
    assert_eq!(record.device.as_deref(), Some(Path::new("/dev/sd1")));
}

/// Volumes the upstream node plugins staged and published, met by ours after a switch.
mod upstream;

/// Records older than what is mounted.
mod stale;
