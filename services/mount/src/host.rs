//! The node's host, as one seam: finding the attached device, reading the mount table,
//! probing, formatting, mounting and growing. The node service reaches the machine only
//! through [`Host`], so its logic (what it refuses, when it formats, what it records) can
//! be tested without root against an in-memory host; [`System`] is the real machine,
//! exercised by the root tests with real loop devices and mounts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use overcast_cloud::PublishContext;

use crate::format::Content;
use crate::mountinfo::MountInfo;
use crate::{device, format, mountinfo, mounts, Result};

#[async_trait]
pub trait Host: Send + Sync + 'static {
    /// Waits up to `wait` for the device the publish context names.
    async fn find_device(&self, ctx: &PublishContext, wait: Duration) -> Result<PathBuf>;
    /// The device the publish context names, if it is there now (no wait).
    fn find_device_now(&self, ctx: &PublishContext) -> Option<PathBuf>;
    /// A block device's (major, minor).
    fn device_numbers(&self, dev: &Path) -> Result<(u32, u32)>;
    fn is_block_device(&self, path: &Path) -> bool;
    fn device_size(&self, dev: &Path) -> Result<u64>;
    /// Asks the kernel to read the disk's size again (the hypervisor grew it).
    fn rescan_size(&self, dev: &Path) -> Result<()>;
    /// Why the device (major, minor) is unhealthy, if it is: gone, or its backing gone.
    fn device_problem(&self, major: u32, minor: u32) -> Option<String>;
    /// The mount on top at `path`, if any.
    fn top_mount(&self, path: &Path) -> Result<Option<MountInfo>>;
    /// Every mount of the filesystem on device (major, minor), wherever it is mounted.
    fn mounts_of(&self, major: u32, minor: u32) -> Result<Vec<MountInfo>>;
    /// What the device holds, read from the device itself.
    async fn probe(&self, dev: &Path) -> Result<Content>;
    /// Makes `fs_type` on `dev`; `overwrite` lets it write over what is there (a format
    /// of ours that was interrupted), which mkfs.xfs otherwise refuses.
    async fn mkfs(&self, dev: &Path, fs_type: &str, overwrite: bool) -> Result<()>;
    fn read_only(&self, dev: &Path) -> Result<bool>;
    async fn grow(&self, dev: &Path, mount_point: &Path, fs_type: &str) -> Result<()>;
    fn mount_fs(&self, dev: &Path, target: &Path, fs_type: &str, flags: &[String]) -> Result<()>;
    fn bind(&self, source: &Path, target: &Path, readonly: bool, flags: &[String]) -> Result<()>;
    /// Unmounts everything stacked at `target`; nothing there is success.
    fn unmount_all(&self, target: &Path) -> Result<()>;
}

/// This machine: system calls, sysfs, /proc/self/mountinfo, blkid, mkfs, resize tools.
#[derive(Debug, Clone)]
pub struct System {
    /// Where disks are linked by serial: `/dev/disk/by-id` on a real node (a test's
    /// simulated cloud makes its links elsewhere).
    pub by_id: PathBuf,
    /// Where rescan requests are written (`class/scsi_host/*/scan`,
    /// `block/*/device/rescan`): `/sys` on a real node; a test stands in for the kernel
    /// in a directory of its own.
    pub sysfs: PathBuf,
}

impl Default for System {
    fn default() -> Self {
        Self {
            by_id: PathBuf::from(device::BY_ID),
            sysfs: PathBuf::from(device::SYSFS),
        }
    }
}

#[async_trait]
impl Host for System {
    async fn find_device(&self, ctx: &PublishContext, wait: Duration) -> Result<PathBuf> {
        device::find(&self.by_id, &self.sysfs, ctx, wait).await
    }
    fn find_device_now(&self, ctx: &PublishContext) -> Option<PathBuf> {
        device::find_once(&self.by_id, ctx)
    }
    fn device_numbers(&self, dev: &Path) -> Result<(u32, u32)> {
        device::numbers(dev)
    }
    fn is_block_device(&self, path: &Path) -> bool {
        device::is_block_device(path)
    }
    fn device_size(&self, dev: &Path) -> Result<u64> {
        device::size_bytes(dev)
    }
    fn rescan_size(&self, dev: &Path) -> Result<()> {
        device::rescan_size(&self.sysfs, dev)
    }
    fn device_problem(&self, major: u32, minor: u32) -> Option<String> {
        if !device::exists(major, minor) {
            return Some(format!("device {major}:{minor} is gone"));
        }
        // A loop device outlives its file while mounted; the disk is gone all the same.
        let backing =
            std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/loop/backing_file"))
                .ok()?;
        let backing = backing.trim_end();
        (backing.ends_with(" (deleted)") || !Path::new(backing).exists())
            .then(|| format!("the device's backing file {backing} is gone"))
    }
    fn top_mount(&self, path: &Path) -> Result<Option<MountInfo>> {
        mountinfo::top(path)
    }
    fn mounts_of(&self, major: u32, minor: u32) -> Result<Vec<MountInfo>> {
        Ok(mountinfo::read()?
            .into_iter()
            .filter(|m| (m.major, m.minor) == (major, minor))
            .collect())
    }
    async fn probe(&self, dev: &Path) -> Result<Content> {
        format::probe(dev).await
    }
    async fn mkfs(&self, dev: &Path, fs_type: &str, overwrite: bool) -> Result<()> {
        format::mkfs(dev, fs_type, overwrite).await
    }
    fn read_only(&self, dev: &Path) -> Result<bool> {
        format::read_only(dev)
    }
    async fn grow(&self, dev: &Path, mount_point: &Path, fs_type: &str) -> Result<()> {
        format::grow(dev, mount_point, fs_type).await
    }
    fn mount_fs(&self, dev: &Path, target: &Path, fs_type: &str, flags: &[String]) -> Result<()> {
        mounts::mount_fs(dev, target, fs_type, flags)
    }
    fn bind(&self, source: &Path, target: &Path, readonly: bool, flags: &[String]) -> Result<()> {
        mounts::bind(source, target, readonly, flags)
    }
    fn unmount_all(&self, target: &Path) -> Result<()> {
        mounts::unmount_all(target)
    }
}
