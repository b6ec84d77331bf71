//! Loop devices through the kernel's own interface: `/dev/loop-control` hands out a
//! free device, `LOOP_CONFIGURE` binds a backing file, `LOOP_SET_CAPACITY` tells it the
//! file grew, `LOOP_CLR_FD` unbinds. No `losetup`: the driver does this work itself.
//!
//! Sysfs (`/sys/block/loopN/loop/backing_file`) is the source of truth for which file a
//! device backs; every destructive call checks it first, because device numbers are
//! reused and another process may own the device by now.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;

const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// How long a detach waits for the kernel to finish unbinding.
const DETACH_WAIT: Duration = Duration::from_secs(2);

/// `struct loop_config` from `<linux/loop.h>` (kernel 5.8+).
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

pub use overcast_mount::loopfile::{
    backing_file, backs, bound_devices, device_path, devices_backing, shows,
};
use overcast_mount::loopfile::{open_node, status, LoopInfo64, LO_KEY_SIZE, LO_NAME_SIZE};

nix::ioctl_none_bad!(loop_ctl_get_free, 0x4C82);
nix::ioctl_write_int_bad!(loop_set_fd, 0x4C00);
nix::ioctl_none_bad!(loop_clr_fd, 0x4C01);
nix::ioctl_write_ptr_bad!(loop_set_status64, 0x4C04, LoopInfo64);
nix::ioctl_none_bad!(loop_set_capacity, 0x4C07);
nix::ioctl_write_ptr_bad!(loop_configure, 0x4C0A, LoopConfig);

/// Parses `/dev/loopN` back into `N`.
pub fn index_of(device: &Path) -> Option<u32> {
    device.to_str()?.strip_prefix("/dev/loop")?.parse().ok()
}

/// Binds `file` to a free loop device and returns the device's index. `label` is
/// recorded as the device's file name field (what `losetup -l` shows as the name).
pub fn attach(file: &Path, readonly: bool, label: &str) -> io::Result<u32> {
    let backing = OpenOptions::new()
        .read(true)
        .write(!readonly)
        .custom_flags(libc::O_CLOEXEC)
        .open(file)?;
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")?;
    // Another process can take the device between GET_FREE and the bind: the bind then
    // fails with EBUSY and we ask for another one.
    for _ in 0..32 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns an index or -1.
        let index = unsafe { loop_ctl_get_free(control.as_raw_fd()) }.map_err(io::Error::from)?;
        let index = u32::try_from(index).map_err(|_| io::Error::other("negative loop index"))?;
        let device = open_device(index)?;
        match bind(&device, &backing, readonly, label) {
            Ok(()) => return Ok(index),
            Err(Errno::EBUSY) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other("no free loop device after 32 attempts"))
}

fn bind(device: &File, backing: &File, readonly: bool, label: &str) -> Result<(), Errno> {
    let mut info = LoopInfo64 {
        lo_device: 0,
        lo_inode: 0,
        lo_rdevice: 0,
        lo_offset: 0,
        lo_sizelimit: 0,
        lo_number: 0,
        lo_encrypt_type: 0,
        lo_encrypt_key_size: 0,
        lo_flags: if readonly { LO_FLAGS_READ_ONLY } else { 0 },
        lo_file_name: [0; LO_NAME_SIZE],
        lo_crypt_name: [0; LO_NAME_SIZE],
        lo_encrypt_key: [0; LO_KEY_SIZE],
        lo_init: [0; 2],
    };
    let n = label.len().min(LO_NAME_SIZE - 1);
    info.lo_file_name[..n].copy_from_slice(&label.as_bytes()[..n]);
    let config = LoopConfig {
        fd: backing.as_raw_fd() as u32,
        block_size: 0,
        info,
        reserved: [0; 8],
    };
    // SAFETY: `config` is a valid, fully initialised `struct loop_config` that outlives
    // the call; the kernel only reads it.
    match unsafe { loop_configure(device.as_raw_fd(), &config) } {
        Ok(_) => Ok(()),
        // Kernels before 5.8 lack LOOP_CONFIGURE: bind, then set the status.
        Err(Errno::EINVAL | Errno::ENOTTY) => {
            // SAFETY: LOOP_SET_FD takes the backing file descriptor by value.
            unsafe { loop_set_fd(device.as_raw_fd(), backing.as_raw_fd()) }?;
            // SAFETY: `info` is a valid `struct loop_info64` the kernel only reads.
            if let Err(e) = unsafe { loop_set_status64(device.as_raw_fd(), &info) } {
                // SAFETY: unbinding what we just bound.
                let _ = unsafe { loop_clr_fd(device.as_raw_fd()) };
                return Err(e);
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Whether loop device `index` is held exclusively (mounted in any mount namespace, or
/// held by mkfs or a stacked device): the exclusive open [`detach`] needs fails.
pub fn held(index: u32) -> bool {
    matches!(open_exclusive(index), Err(e) if e.raw_os_error() == Some(libc::EBUSY))
}

/// Whether loop device `index` was bound read-only.
pub fn is_read_only(index: u32) -> io::Result<bool> {
    let ro = std::fs::read_to_string(format!("/sys/block/loop{index}/ro"))?;
    Ok(ro.trim() == "1")
}

/// Makes sure loop device `index` (bound to `file`) stays bound when its last opener
/// closes: a detach that was refused, or interrupted by a crash, may have left the
/// kernel's autoclear flag behind, and an adopted device must not vanish under a mount.
pub fn keep_bound(index: u32, file: &Path) -> io::Result<()> {
    if !backs(index, file) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("/dev/loop{index} does not back {}", file.display()),
        ));
    }
    let device = open_device(index)?;
    clear_autoclear(&device).map_err(io::Error::from)
}

fn clear_autoclear(device: &File) -> Result<(), Errno> {
    let mut info = status(device)?;
    if info.lo_flags & LO_FLAGS_AUTOCLEAR == 0 {
        return Ok(());
    }
    info.lo_flags &= !LO_FLAGS_AUTOCLEAR;
    // SAFETY: `info` is the kernel's own answer with one flag cleared; it only reads it.
    unsafe { loop_set_status64(device.as_raw_fd(), &info) }.map(drop)
}

/// Lets loop device `index` (bound to `file`) go when its last user closes it — the
/// kernel's autoclear flag — for a simulator that stops while a guest still has its disk
/// mounted: nothing is taken from under the mount, and nothing is left bound after it.
pub fn release_when_unused(index: u32, file: &Path) -> io::Result<()> {
    if !backs(index, file) {
        return Ok(());
    }
    let device = open_device(index)?;
    let mut info = status(&device).map_err(io::Error::from)?;
    info.lo_flags |= LO_FLAGS_AUTOCLEAR;
    // SAFETY: `info` is the kernel's own answer with one flag set; it only reads it.
    unsafe { loop_set_status64(device.as_raw_fd(), &info) }
        .map(drop)
        .map_err(io::Error::from)
}

/// Unbinds loop device `index` if, and only if, it is bound to `file`. Returns whether
/// it did (`false`: it was not bound to `file`, so there was nothing to do).
///
/// Only a device nobody uses is unbound, and "done" means done: a caller told the disk
/// is detached may give it to someone else or delete its file.
/// - A device held exclusively — a mounted filesystem in any mount namespace, a
///   device-mapper or md holder, a running mkfs — makes the exclusive open fail with
///   EBUSY: nothing is changed and the answer is [`io::ErrorKind::ResourceBusy`].
///   Holding that exclusive open also keeps a new mount out while we unbind.
/// - Since Linux 5.x, LOOP_CLR_FD on a device another process has open only sets the
///   autoclear flag: the kernel unbinds it on the last close, whenever that is. We wait
///   (bounded) for sysfs to show the device free; if it does not, we clear the flag
///   again, so the device does not vanish later under whoever holds it, and answer
///   ResourceBusy. The retry finds it free once that opener has closed.
pub fn detach(index: u32, file: &Path) -> io::Result<bool> {
    if !backs(index, file) {
        return Ok(false);
    }
    {
        let device = match open_exclusive(index) {
            Ok(device) => device,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(in_use(
                    index,
                    "is mounted, or held exclusively by another user",
                ))
            }
            // The device is gone, or the kernel is unbinding it (open answers ENXIO in
            // both): done only if sysfs agrees. A missing node is made by `open_node`, so
            // "no such file" here is an error to retry, never "not bound".
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && !backs(index, file) => {
                return Ok(false)
            }
            Err(e) => return Err(e),
        };
        // Device numbers are reused: check again now that the device is ours to hold.
        if !backs(index, file) {
            return Ok(false);
        }
        // SAFETY: LOOP_CLR_FD takes no argument.
        match unsafe { loop_clr_fd(device.as_raw_fd()) } {
            Ok(_) => {}
            Err(Errno::ENXIO) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    let deadline = Instant::now() + DETACH_WAIT;
    while backs(index, file) {
        if Instant::now() >= deadline {
            return match open_device(index).map(|d| clear_autoclear(&d)) {
                // Unbound between the last look and now: done after all.
                _ if !backs(index, file) => Ok(true),
                Ok(Ok(())) => Err(in_use(index, "is open in another process")),
                Ok(Err(e)) => Err(io::Error::other(format!(
                    "/dev/loop{index} is open in another process, and its pending unbind \
                     could not be cancelled: {e}"
                ))),
                Err(e) => Err(e),
            };
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(true)
}

/// [`detach`], given up to `wait` for an exclusive holder to let go. A device can still
/// be held for a moment after the node unstaged it (CI30: csi-sanity's cleanup got
/// FAILED_PRECONDITION 0.19 s after mkfs, mount and unstage; the holder, a probe of the
/// new filesystem or the unmount's last reference, was gone before anyone looked), and
/// a caller told "busy" then only retries a detach that was about to succeed.
pub fn detach_when_released(index: u32, file: &Path, wait: Duration) -> io::Result<bool> {
    let deadline = Instant::now() + wait;
    loop {
        match detach(index, file) {
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            answer => return answer,
        }
    }
}

fn in_use(index: u32, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!("/dev/loop{index} {why}"),
    )
}

/// Tells loop device `index` (bound to `file`) that its backing file changed size.
pub fn refresh_capacity(index: u32, file: &Path) -> io::Result<()> {
    if !backs(index, file) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("/dev/loop{index} does not back {}", file.display()),
        ));
    }
    let device = open_device(index)?;
    // SAFETY: LOOP_SET_CAPACITY takes no argument.
    unsafe { loop_set_capacity(device.as_raw_fd()) }.map_err(io::Error::from)?;
    Ok(())
}

/// Whether the loop subsystem is usable here.
pub fn available() -> io::Result<()> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map(drop)
}

/// Opens the device with O_EXCL, which for a block device means "fail with EBUSY if
/// anyone holds it exclusively" (mount, mkfs, a stacked device).
fn open_exclusive(index: u32) -> io::Result<File> {
    open_node(index, false, libc::O_EXCL)
}

fn open_device(index: u32) -> io::Result<File> {
    open_node(index, true, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layouts_match_the_kernel_abi() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }

    /// A 1 MiB disk file `name` bound to a loop device through a bind mount of its state
    /// directory that is gone since (a replaced controller pod's view): the directory (kept
    /// while the test runs), the file's own path and the device's index.
    fn bound_through_a_gone_mount(name: &str) -> (tempfile::TempDir, std::path::PathBuf, u32) {
        use nix::mount::{mount, umount2, MntFlags, MsFlags};
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let view = dir.path().join("view");
        std::fs::create_dir_all(state.join("disks")).unwrap();
        std::fs::create_dir_all(&view).unwrap();
        let file = state.join("disks").join(name);
        std::fs::File::create(&file)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        mount(
            Some(&state),
            &view,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .expect("bind mount");
        let index = attach(&view.join("disks").join(name), false, "overcast-test")
            .expect("attach through the mount");
        umount2(&view, MntFlags::MNT_DETACH).expect("unmount");
        (dir, file, index)
    }

    /// A device bound through a mount that is gone since shows a path of that mount's root
    /// in sysfs; it is still found, checked and detached by the file's own path. (Root: a
    /// bind mount and a real loop device.)
    #[test]
    fn a_device_bound_through_a_gone_mount_is_still_found_by_its_file() {
        let (_dir, file, index) = bound_through_a_gone_mount("vol-gone-mount.img");
        let shown = backing_file(index).unwrap();
        let bound = devices_backing(&file).unwrap();
        let detached = detach(index, &file);
        assert_ne!(shown, file, "sysfs shows the gone mount's path: {shown:?}");
        assert_eq!(bound, vec![index], "found by the file's device and inode");
        assert!(detached.expect("detach"), "detached by the file's path");
        assert!(devices_backing(&file).unwrap().is_empty());
    }

    /// The same device seen from a `/dev` without its node (a privileged container's copy
    /// of the host's `/dev`, taken before the device was made — the replaced controller's
    /// view): still found by its file, so a delete is refused, and detached, not taken for
    /// "not bound". (Root: the host's node is removed, as that `/dev` never had it.)
    #[test]
    fn a_device_without_a_node_in_this_dev_is_still_found_and_detached() {
        let (_dir, file, index) = bound_through_a_gone_mount("vol-no-node.img");
        std::fs::remove_file(device_path(index)).expect("remove the node");
        let bound = devices_backing(&file);
        let detached = detach(index, &file);
        let node_back = device_path(index).exists();
        // Whatever was asserted, the device goes.
        if backing_file(index).is_some() {
            let _ = std::process::Command::new("losetup")
                .args(["-d", &device_path(index).to_string_lossy()])
                .status();
        }
        assert_eq!(bound.unwrap(), vec![index], "found without its node");
        assert!(detached.expect("detach"), "detached without its node");
        assert!(node_back, "the node made again");
        assert!(devices_backing(&file).unwrap().is_empty());
    }

    /// A device held exclusively for a moment (a holder the node had not let go of yet)
    /// is detached once it is let go, within the wait; one held past the wait is refused
    /// as busy and left bound. (Root: a real loop device and an O_EXCL open of it.)
    #[test]
    fn a_device_let_go_within_the_wait_is_detached_and_one_held_past_it_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vol-held.img");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let index = attach(&file, false, "overcast-test").expect("attach");
        let holder = open_exclusive(index).expect("hold the device");
        let kept = detach_when_released(index, &file, Duration::from_millis(100));
        let still_bound = backs(index, &file);
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(holder);
        });
        let detached = detach_when_released(index, &file, Duration::from_secs(2));
        released.join().unwrap();
        if backs(index, &file) {
            let _ = std::process::Command::new("losetup")
                .args(["-d", &device_path(index).to_string_lossy()])
                .status();
        }
        assert_eq!(
            kept.expect_err("held past the wait").kind(),
            io::ErrorKind::ResourceBusy
        );
        assert!(still_bound, "a refused detach leaves the device bound");
        assert!(detached.expect("detach once let go"), "detached");
        assert!(devices_backing(&file).unwrap().is_empty());
    }

    #[test]
    fn device_paths_round_trip() {
        assert_eq!(index_of(&device_path(17)), Some(17));
        assert_eq!(index_of(Path::new("/dev/loopx")), None);
        assert_eq!(index_of(Path::new("/dev/sda")), None);
    }
}
