//! Finding the attached disk on the node from the publish context alone: the node
//! never asks the cloud. Loop devices are found by their backing file, cloud disks by
//! serial or WWN under /dev/disk/by-id and /sys/block; the device may take a while to
//! appear after attach, so lookups wait a bounded time.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{MountError, Result};

/// Publish-context keys the controllers write: the contract lives with the cloud traits.
pub use overcast_cloud::publish::{
    BACKING_FILE as CTX_BACKING_FILE, DEVICE_PATH as CTX_DEVICE_PATH, SERIAL as CTX_SERIAL,
    WWN as CTX_WWN,
};

pub use overcast_cloud::PublishContext;

/// Reads the publish context the controller wrote and checks it names a device at all
/// (and, when it gives a device path, one under /dev).
pub fn from_context(ctx: &HashMap<String, String>) -> Result<PublishContext> {
    let hint = PublishContext::from_map(ctx);
    if hint == PublishContext::default() {
        return Err(MountError::Invalid(format!(
            "publish_context names no device ({CTX_DEVICE_PATH}, {CTX_BACKING_FILE}, {CTX_SERIAL} or {CTX_WWN})"
        )));
    }
    if let Some(p) = &hint.device_path {
        if !p.starts_with("/dev/") || p.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(MountError::Invalid(format!(
                "{CTX_DEVICE_PATH} {} is not a path under /dev",
                p.display()
            )));
        }
    }
    Ok(hint)
}

/// Whether this context ties the device to `volume_id`, rather than merely naming a
/// device: the node formats and mounts only a disk the context says is the volume's. A
/// loop disk's backing file is named after its volume id (its stem is the id); a cloud
/// disk is named by the serial or WWN its controller reported. A bare `devicePath` names
/// any device on the host (`/dev/vda`) and is refused.
pub fn check_volume(hint: &PublishContext, volume_id: &str) -> Result<()> {
    if let Some(file) = &hint.backing_file {
        if file.file_stem().and_then(|s| s.to_str()) != Some(volume_id) {
            return Err(MountError::Invalid(format!(
                "{CTX_BACKING_FILE} {} is not the disk file of volume {volume_id}",
                file.display()
            )));
        }
        return Ok(());
    }
    if hint.serial.is_some() || hint.wwn.is_some() {
        return Ok(());
    }
    Err(MountError::Invalid(format!(
        "publish_context names a device but not the disk of volume {volume_id}: \
         {CTX_BACKING_FILE}, {CTX_SERIAL} or {CTX_WWN} is required"
    )))
}

/// Where udev links disks by their serial on a real node.
pub const BY_ID: &str = "/dev/disk/by-id";

/// Where the kernel takes rescan requests on a real node.
pub const SYSFS: &str = "/sys";

/// How often a missing cloud disk makes the node ask the SCSI hosts to scan again.
const SCAN_EVERY: Duration = Duration::from_secs(1);

/// Waits up to `timeout` for the device `hint` names; serials are looked up as links in
/// `by_id` (normally [`BY_ID`]). A cloud disk (serial or WWN) still missing makes every
/// SCSI host under `sysfs` scan for new disks, at most once a second: a hypervisor that
/// hot-plugs a virtio-scsi disk does not always raise the event that would make the
/// guest find it (cinder-csi-plugin probes the same way, its issue 705).
pub async fn find(
    by_id: &Path,
    sysfs: &Path,
    hint: &PublishContext,
    timeout: Duration,
) -> Result<PathBuf> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut pause = Duration::from_millis(5);
    let mut scanned: Option<Instant> = None;
    let cloud_disk = hint.backing_file.is_none() && (hint.serial.is_some() || hint.wwn.is_some());
    loop {
        if let Some(path) = find_once(by_id, hint) {
            return Ok(path);
        }
        if Instant::now() >= deadline {
            return Err(MountError::DeviceNotFound(format!("{hint:?}")));
        }
        // Not on the first miss: the disk usually appears within milliseconds of attach.
        if cloud_disk
            && started.elapsed() >= Duration::from_millis(100)
            && scanned.is_none_or(|t| t.elapsed() >= SCAN_EVERY)
        {
            let hosts = scan_scsi_hosts(sysfs);
            tracing::debug!(hosts, ?hint, "device missing: asked the SCSI hosts to scan");
            scanned = Some(Instant::now());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Asks every SCSI host to scan all its channels, targets and LUNs (`- - -` into
/// `<sysfs>/class/scsi_host/host*/scan`); returns how many hosts were asked. A host that
/// refuses is skipped: the lookup that follows is what tells.
pub fn scan_scsi_hosts(sysfs: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(sysfs.join("class/scsi_host")) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("host"))
        .filter(|e| std::fs::write(e.path().join("scan"), "- - -").is_ok())
        .count()
}

/// Asks the kernel to read a disk's size again (`1` into
/// `<sysfs>/block/<name>/device/rescan`): some hypervisors grow an attached disk without
/// telling the guest (`[BlockStorage] rescan-on-resize`). `dev` is resolved to its
/// kernel name first, so a by-id link or a partition-free alias names the same disk.
pub fn rescan_size(sysfs: &Path, dev: &Path) -> Result<()> {
    let real = std::fs::canonicalize(dev)
        .map_err(|e| MountError::io(format!("resolve {}", dev.display()), e))?;
    let name = real
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| MountError::Invalid(format!("{} names no disk", real.display())))?;
    let path = sysfs.join("block").join(name).join("device/rescan");
    std::fs::write(&path, "1").map_err(|e| MountError::io(format!("write {}", path.display()), e))
}

pub fn find_once(by_id: &Path, hint: &PublishContext) -> Option<PathBuf> {
    if let Some(file) = &hint.backing_file {
        // The recorded device first (cheap), then every loop device.
        if let Some(dev) = hint.device_path.as_deref().filter(|d| loop_backs(d, file)) {
            return Some(dev.to_owned());
        }
        return loop_for(file);
    }
    if let Some(serial) = &hint.serial {
        if let Some(dev) = by_id_link(by_id, serial).or_else(|| by_sysfs("serial", serial)) {
            return Some(dev);
        }
    }
    if let Some(wwn) = &hint.wwn {
        if let Some(dev) = by_wwn_link(by_id, wwn).or_else(|| by_sysfs("wwid", wwn)) {
            return Some(dev);
        }
    }
    if hint.serial.is_none() && hint.wwn.is_none() {
        return hint.device_path.clone().filter(|p| is_block_device(p));
    }
    None
}

/// Whether `device` (`/dev/loopN`) is bound to `file`: by path, or by the file's device
/// and inode when sysfs shows the path as a process that is gone saw it (a replaced
/// controller pod's device shows `/disks/vol-….img`).
fn loop_backs(device: &Path, file: &Path) -> bool {
    let Some(index) = device
        .to_str()
        .and_then(|d| d.strip_prefix("/dev/loop"))
        .and_then(|n| n.parse().ok())
    else {
        return false;
    };
    crate::loopfile::backs(index, file)
}

fn loop_for(file: &Path) -> Option<PathBuf> {
    let index = *crate::loopfile::devices_backing(file).ok()?.first()?;
    Some(crate::loopfile::device_path(index))
}

/// `<by-id>/<bus>-<serial>` links, as udev names virtio (`virtio-<serial>`) and QEMU SCSI
/// (`scsi-0QEMU_QEMU_HARDDISK_<serial>`) disks. A virtio serial is cut to 20 characters,
/// so its first 20 count too; either must follow a `-` or `_`, so that a serial is never
/// found inside another disk's longer one.
fn by_id_link(dir: &Path, serial: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let short: String = serial.chars().take(20).collect();
    let ends_with_at_boundary = |name: &str, tail: &str| {
        name.strip_suffix(tail)
            .is_some_and(|head| head.ends_with('-') || head.ends_with('_'))
    };
    entries.flatten().find_map(|e| {
        let name = e.file_name().into_string().ok()?;
        let matches = ends_with_at_boundary(&name, serial) || ends_with_at_boundary(&name, &short);
        (matches && !name.contains("-part"))
            .then(|| std::fs::canonicalize(e.path()).ok())
            .flatten()
    })
}

/// `<by-id>/wwn-0x<wwn>` or `<by-id>/scsi-3<wwn>`, as udev names a SCSI disk with an NAA
/// identifier (a vSphere disk: its disk UUID). Only a hex WWN is looked for: the value
/// is never a path.
fn by_wwn_link(dir: &Path, wwn: &str) -> Option<PathBuf> {
    let hex = wwn.strip_prefix("naa.").unwrap_or(wwn).to_ascii_lowercase();
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    [format!("wwn-0x{hex}"), format!("scsi-3{hex}")]
        .iter()
        .find_map(|name| std::fs::canonicalize(dir.join(name)).ok())
}

/// `/sys/block/<dev>/{serial,device/serial,wwid,device/wwid}`.
fn by_sysfs(attr: &str, want: &str) -> Option<PathBuf> {
    std::fs::read_dir("/sys/block")
        .ok()?
        .flatten()
        .find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let hit = [
                format!("/sys/block/{name}/{attr}"),
                format!("/sys/block/{name}/device/{attr}"),
            ]
            .iter()
            .filter_map(|p| read_trimmed(p))
            .any(|v| v == want || v.ends_with(want) || want.starts_with(&v) && v.len() >= 20);
            hit.then(|| PathBuf::from(format!("/dev/{name}")))
        })
}

fn read_trimmed(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

pub fn is_block_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// The (major, minor) of a block device node.
pub fn numbers(path: &Path) -> Result<(u32, u32)> {
    let meta = std::fs::metadata(path)
        .map_err(|e| MountError::io(format!("stat {}", path.display()), e))?;
    if !meta.file_type().is_block_device() {
        return Err(MountError::Invalid(format!(
            "{} is not a block device",
            path.display()
        )));
    }
    let rdev = meta.rdev();
    Ok((
        nix::sys::stat::major(rdev) as u32,
        nix::sys::stat::minor(rdev) as u32,
    ))
}

/// Whether the kernel still has a block device with these numbers.
pub fn exists(major: u32, minor: u32) -> bool {
    Path::new(&format!("/sys/dev/block/{major}:{minor}")).exists()
}

/// The device node of (major, minor), from its uevent.
pub fn node_of(major: u32, minor: u32) -> Option<PathBuf> {
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent")).ok()?;
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(|n| PathBuf::from(format!("/dev/{n}")))
}

nix::ioctl_read!(blk_get_size64, 0x12, 114, u64);

/// Size of a block device in bytes.
pub fn size_bytes(path: &Path) -> Result<u64> {
    let file =
        File::open(path).map_err(|e| MountError::io(format!("open {}", path.display()), e))?;
    let mut size = 0u64;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer we pass.
    unsafe { blk_get_size64(file.as_raw_fd(), &mut size) }
        .map_err(|e| MountError::io(format!("size of {}", path.display()), e.into()))?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract both sides share: what a provider writes, the node reads back and
    /// ties to its volume; a context that does not name the volume's disk is refused.
    #[test]
    fn what_a_provider_writes_the_node_reads_and_ties_to_its_volume() {
        let id = "vol-0123456789abcdef0123456789abcdef";
        let local = overcast_cloud::PublishContext {
            device_path: Some("/dev/loop7".into()),
            backing_file: Some(format!("/var/lib/overcast/disks/{id}.img").into()),
            ..Default::default()
        };
        let cloud = overcast_cloud::PublishContext {
            serial: Some("0QEMU_QEMU_HARDDISK_0123456789abcdef0123".into()),
            ..Default::default()
        };
        for ctx in [local, cloud] {
            let map: HashMap<String, String> = ctx.to_map().into_iter().collect();
            let hint = from_context(&map).unwrap();
            assert_eq!(hint.device_path, ctx.device_path);
            assert_eq!(hint.backing_file, ctx.backing_file);
            assert_eq!(hint.serial, ctx.serial);
            check_volume(&hint, id).unwrap();
        }
        let other = overcast_cloud::PublishContext {
            backing_file: Some(
                "/var/lib/overcast/disks/vol-ffffffffffffffffffffffffffffffff.img".into(),
            ),
            ..Default::default()
        };
        let map: HashMap<String, String> = other.to_map().into_iter().collect();
        assert!(check_volume(&from_context(&map).unwrap(), id).is_err());
        let bare = overcast_cloud::PublishContext {
            device_path: Some("/dev/vda".into()),
            ..Default::default()
        };
        let map: HashMap<String, String> = bare.to_map().into_iter().collect();
        assert!(check_volume(&from_context(&map).unwrap(), id).is_err());
    }

    #[test]
    fn a_context_must_name_a_device_under_dev() {
        assert!(from_context(&HashMap::new()).is_err());
        let ctx = |k: &str, v: &str| HashMap::from([(k.to_owned(), v.to_owned())]);
        assert!(from_context(&ctx(CTX_DEVICE_PATH, "/etc/passwd")).is_err());
        assert!(from_context(&ctx(CTX_DEVICE_PATH, "/dev/../etc/passwd")).is_err());
        let hint = from_context(&ctx(CTX_SERIAL, "abc")).unwrap();
        assert_eq!(hint.serial.as_deref(), Some("abc"));
    }

    #[test]
    fn only_a_context_that_names_the_volume_s_disk_is_accepted() {
        let ctx = |pairs: &[(&str, &str)]| {
            let map = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            from_context(&map).unwrap()
        };
        let vol = "vol-0123456789abcdef0123456789abcdef";
        let own = format!("/state/disks/{vol}.img");
        assert!(check_volume(&ctx(&[(CTX_BACKING_FILE, &own)]), vol).is_ok());
        assert!(check_volume(
            &ctx(&[(CTX_DEVICE_PATH, "/dev/loop1"), (CTX_BACKING_FILE, &own)]),
            vol
        )
        .is_ok());
        assert!(check_volume(&ctx(&[(CTX_SERIAL, "0123456789abcdef0123")]), vol).is_ok());
        for bad in [
            ctx(&[(CTX_DEVICE_PATH, "/dev/vda")]),
            ctx(&[(
                CTX_BACKING_FILE,
                "/state/disks/vol-ffffffffffffffffffffffffffffffff.img",
            )]),
            ctx(&[(CTX_BACKING_FILE, "/etc/passwd")]),
        ] {
            assert!(
                matches!(check_volume(&bad, vol), Err(MountError::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_serial_is_found_by_its_link_and_never_inside_another() {
        let dir = tempfile::tempdir().unwrap();
        let serial = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";
        let link = |name: &str| {
            std::os::unix::fs::symlink("/dev/null", dir.path().join(name)).unwrap();
        };
        link("scsi-0QEMU_QEMU_HARDDISK_ff0a1b2c3d4e5f60718293a4b5c6d7e8f9");
        link(&format!("scsi-0QEMU_QEMU_HARDDISK_{serial}-part1"));
        assert_eq!(
            by_id_link(dir.path(), serial),
            None,
            "a longer serial ending in ours is another disk"
        );
        link(&format!("scsi-0QEMU_QEMU_HARDDISK_{serial}"));
        assert_eq!(
            by_id_link(dir.path(), serial),
            Some(PathBuf::from("/dev/null"))
        );
        let cut = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            "/dev/null",
            cut.path().join(format!("virtio-{}", &serial[..20])),
        )
        .unwrap();
        assert_eq!(
            by_id_link(cut.path(), serial),
            Some(PathBuf::from("/dev/null")),
            "virtio's 20 characters"
        );
    }

    #[test]
    fn a_wwn_is_found_by_udev_s_naa_links_and_never_as_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let uuid = "6000c298595bf4575739e9105b2c0c2d";
        assert_eq!(by_wwn_link(dir.path(), uuid), None);
        std::os::unix::fs::symlink("/dev/null", dir.path().join(format!("scsi-3{uuid}"))).unwrap();
        assert_eq!(
            by_wwn_link(dir.path(), uuid),
            Some(PathBuf::from("/dev/null"))
        );
        assert_eq!(
            by_wwn_link(dir.path(), &format!("naa.{}", uuid.to_uppercase())),
            Some(PathBuf::from("/dev/null"))
        );
        let wwn = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", wwn.path().join(format!("wwn-0x{uuid}"))).unwrap();
        assert_eq!(
            by_wwn_link(wwn.path(), uuid),
            Some(PathBuf::from("/dev/zero"))
        );
        for bad in ["../../dev/sda", "", "6000c29/../x"] {
            assert_eq!(by_wwn_link(dir.path(), bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn a_missing_device_is_reported_after_the_wait() {
        let hint = PublishContext {
            serial: Some("no-such-serial-overcast".into()),
            ..Default::default()
        };
        let started = Instant::now();
        let sysfs = tempfile::tempdir().unwrap();
        let err = find(
            Path::new(BY_ID),
            sysfs.path(),
            &hint,
            Duration::from_millis(100),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, MountError::DeviceNotFound(_)));
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    /// A cloud disk missing at first makes the node ask every SCSI host to scan; here
    /// the test plays the kernel, linking the disk only once a scan was asked for (so
    /// without the scan the lookup would time out). A loop disk never causes a scan.
    #[tokio::test]
    async fn a_missing_cloud_disk_makes_the_scsi_hosts_scan() {
        let dir = tempfile::tempdir().unwrap();
        let (by_id, sysfs) = (dir.path().join("by-id"), dir.path().join("sys"));
        std::fs::create_dir_all(&by_id).unwrap();
        for host in ["host0", "host1", "not-a-host"] {
            let d = sysfs.join("class/scsi_host").join(host);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("scan"), "").unwrap();
        }
        let serial = "6a1b2c3d-4e5f-4a7b-8c9d-0e1f2a3b4c5d";
        let kernel = {
            let (scan, link) = (
                sysfs.join("class/scsi_host/host1/scan"),
                by_id.join(format!("virtio-{}", &serial[..20])),
            );
            std::thread::spawn(move || {
                for _ in 0..500 {
                    if std::fs::read_to_string(&scan).unwrap() == "- - -" {
                        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                false
            })
        };
        let hint = PublishContext {
            serial: Some(serial.into()),
            ..Default::default()
        };
        let found = find(&by_id, &sysfs, &hint, Duration::from_secs(5)).await;
        assert!(kernel.join().unwrap(), "a scan was asked for");
        assert_eq!(found.unwrap(), PathBuf::from("/dev/null"));
        let untouched = sysfs.join("class/scsi_host/not-a-host/scan");
        assert_eq!(std::fs::read_to_string(untouched).unwrap(), "");

        std::fs::write(sysfs.join("class/scsi_host/host0/scan"), "").unwrap();
        let loop_disk = PublishContext {
            backing_file: Some(dir.path().join("vol-x.img")),
            ..Default::default()
        };
        assert!(find(&by_id, &sysfs, &loop_disk, Duration::from_millis(300))
            .await
            .is_err());
        let host0 = sysfs.join("class/scsi_host/host0/scan");
        assert_eq!(std::fs::read_to_string(host0).unwrap(), "", "no scan");
    }

    /// A resize rescan goes to the disk's own kernel name, whatever link named it.
    #[test]
    fn a_size_rescan_goes_to_the_disk_the_link_names() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path().join("sys");
        std::fs::create_dir_all(dir.path().join("dev")).unwrap();
        std::fs::write(dir.path().join("dev/sdz"), "").unwrap();
        std::os::unix::fs::symlink(dir.path().join("dev/sdz"), dir.path().join("link")).unwrap();
        std::fs::create_dir_all(sysfs.join("block/sdz/device")).unwrap();
        rescan_size(&sysfs, &dir.path().join("link")).unwrap();
        let asked = std::fs::read_to_string(sysfs.join("block/sdz/device/rescan")).unwrap();
        assert_eq!(asked, "1");
        assert!(rescan_size(&sysfs, &dir.path().join("missing")).is_err());
    }
}
