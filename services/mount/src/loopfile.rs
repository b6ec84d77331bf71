//! Which file a loop device is bound to, read without changing anything: sysfs shows the
//! path the binding process saw, and `LOOP_GET_STATUS64` the file's device and inode,
//! which stay true whatever the path shows. Shared by the local cloud (which binds and
//! unbinds) and the node plugin (which finds a volume's device), so both recognise a
//! disk by what the kernel says, not by a spelling.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;

pub const LO_NAME_SIZE: usize = 64;
pub const LO_KEY_SIZE: usize = 32;

/// `struct loop_info64` from `<linux/loop.h>`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LoopInfo64 {
    pub lo_device: u64,
    pub lo_inode: u64,
    pub lo_rdevice: u64,
    pub lo_offset: u64,
    pub lo_sizelimit: u64,
    pub lo_number: u32,
    pub lo_encrypt_type: u32,
    pub lo_encrypt_key_size: u32,
    pub lo_flags: u32,
    pub lo_file_name: [u8; LO_NAME_SIZE],
    pub lo_crypt_name: [u8; LO_NAME_SIZE],
    pub lo_encrypt_key: [u8; LO_KEY_SIZE],
    pub lo_init: [u64; 2],
}

nix::ioctl_read_bad!(loop_get_status64, 0x4C05, LoopInfo64);

/// The kernel's `struct loop_info64` of an open loop device.
pub fn status(device: &File) -> Result<LoopInfo64, Errno> {
    let mut info = std::mem::MaybeUninit::<LoopInfo64>::zeroed();
    // SAFETY: LOOP_GET_STATUS64 fills a `struct loop_info64` through the pointer.
    unsafe { loop_get_status64(device.as_raw_fd(), info.as_mut_ptr()) }?;
    // SAFETY: zero-initialised, then filled by the kernel; every bit pattern is valid.
    Ok(unsafe { info.assume_init() })
}

/// The device node of loop device `index`.
pub fn device_path(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/loop{index}"))
}

const LOOP_MAJOR: u64 = 7;

/// Opens loop device `index` with `flags` (`O_CLOEXEC` added), making its node first when
/// this `/dev` lacks it. A privileged container's `/dev` is a copy of the host's taken when
/// it started (no devtmpfs): a device the kernel made later — by another process, or by
/// this container's predecessor — has no node here. "No such file" must never be read as
/// "no such device": that answer once let a detach report done, and a delete unlink the
/// file, while the device was still bound.
pub fn open_node(index: u32, write: bool, flags: i32) -> io::Result<File> {
    let path = device_path(index);
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_CLOEXEC | flags)
            .open(&path)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            make_node(&path, index)?;
            open()
        }
        other => other,
    }
}

fn make_node(path: &Path, index: u32) -> io::Result<()> {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    match mknod(
        path,
        SFlag::S_IFBLK,
        Mode::from_bits_truncate(0o660),
        makedev(LOOP_MAJOR, index.into()),
    ) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let meta = std::fs::metadata(path)?;
    if !meta.file_type().is_block_device() {
        return Err(io::Error::other(format!(
            "{} is not a block device",
            path.display()
        )));
    }
    Ok(())
}

/// The file loop device `index` is bound to, or `None` when it is unbound or absent.
pub fn backing_file(index: u32) -> Option<PathBuf> {
    let raw = std::fs::read_to_string(format!("/sys/block/loop{index}/loop/backing_file")).ok()?;
    let raw = raw.trim_end_matches('\n');
    // The kernel appends " (deleted)" once the file is unlinked; such a device backs no
    // file of ours any more.
    if raw.is_empty() || raw.ends_with(" (deleted)") {
        return None;
    }
    Some(PathBuf::from(raw))
}

/// Whether loop device `index` is bound to `file`: its path, or — when the kernel shows
/// the path through another mount namespace (the device was bound by a process whose
/// mount of the state directory has gone, e.g. a replaced controller pod: sysfs then
/// shows `/disks/vol-….img`) — the backing file's device and inode. A path match alone
/// let such a device go unseen: never detached, its file deleted under it.
pub fn backs(index: u32, file: &Path) -> bool {
    backing_file(index).is_some_and(|shown| shows(index, &shown, file))
}

/// [`backs`], for a device whose backing path sysfs has already shown as `shown`.
pub fn shows(index: u32, shown: &Path, file: &Path) -> bool {
    if shown == file {
        return true;
    }
    // Only a device showing the same file name can be the same file: the ioctl is asked
    // of those alone.
    if shown.file_name().is_none() || shown.file_name() != file.file_name() {
        return false;
    }
    // An error here is a device going away under us (ENXIO while the kernel unbinds it)
    // or a file that is gone: neither backs `file`. A missing device node, which once
    // read the same way while the device was still bound, is made by `open_node`.
    same_inode(index, file).unwrap_or(false)
}

fn same_inode(index: u32, file: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file)?;
    let device = open_node(index, false, 0)?;
    let info = status(&device).map_err(io::Error::from)?;
    // The kernel reports the backing file's device in the same encoding as st_dev.
    Ok(info.lo_inode == meta.ino() && info.lo_device == meta.dev())
}

/// Every bound loop device and its backing file.
///
/// `/proc/partitions` lists block devices that have a size, so unbound loop devices
/// (hosts keep dozens) are skipped without a sysfs lookup each: one read instead of one
/// per device, which made this scan the larger part of a DeleteVolume. A loop device
/// bound to an empty file has no size and is not listed; no disk file is empty.
pub fn bound_devices() -> io::Result<Vec<(u32, PathBuf)>> {
    let partitions = std::fs::read_to_string("/proc/partitions")?;
    let mut out: Vec<(u32, PathBuf)> = partitions
        .lines()
        .filter_map(|line| {
            let name = line.split_whitespace().nth(3)?;
            let index = name.strip_prefix("loop")?.parse().ok()?;
            Some((index, backing_file(index)?))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Every loop device bound to `file` (normally none or one; two means the file was
/// bound twice, which [`attach`]'s callers must never let happen).
pub fn devices_backing(file: &Path) -> io::Result<Vec<u32>> {
    Ok(bound_devices()?
        .into_iter()
        .filter(|(i, f)| shows(*i, f, file))
        .map(|(i, _)| i)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_struct_layout_matches_the_kernel_abi() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
    }
}
