//! Probing (the driver's own read, then blkid to name what it found), formatting and
//! growing with the standard tools (mkfs.ext4, mkfs.xfs, resize2fs, xfs_growfs), each
//! run with a timeout and its stderr carried into the error. A device that holds
//! anything — a filesystem, a partition table, a signature blkid cannot name, non-zero
//! bytes — or that could not be read, or that is in use, is never formatted.

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

use crate::{MountError, Result};

/// Every program this module runs: the CSI image must carry them (Dockerfile.csi,
/// checked by integration/tests/services/deploy.rs).
pub const PROGRAMS: &[&str] = &["blkid", "mkfs.ext4", "mkfs.xfs", "resize2fs", "xfs_growfs"];

const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
const MKFS_TIMEOUT: Duration = Duration::from_secs(600);
const GROW_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Blank,
    Filesystem(String),
    PartitionTable(String),
    Unknown(String),
}

/// How much of the head and of the tail of a device the blank check reads itself: every
/// partition table and the superblocks and labels of the common filesystems and volume
/// managers live there (GPT's backup and md's 1.0 superblock at the very end, btrfs at
/// 64 KiB, ZFS's first label in the first 256 KiB), and so does the start of raw data
/// a block-mode workload wrote. A 1 MiB read costs 4× as much on a loop device.
const WITNESS_BYTES: u64 = 256 << 10;

/// What the device holds, by low-level probing (no cache).
///
/// `Blank` is a positive finding, never a default. The driver reads the first and last
/// 256 KiB itself, holding the device exclusively (which fails while it is mounted or
/// held anywhere, in any mount namespace): every signature blkid knows — partition
/// tables, superblocks, labels — lives there, so all zeros there is blank, and any read
/// failure is an error naming the device. blkid is asked only to name what non-zero
/// bytes are; its own "nothing found" (exit 2) is also what it answers when it could not
/// read the device at all, so it is never taken for blank.
pub async fn probe(device: &Path) -> Result<Content> {
    // Never let a missing path or a character device reach a read.
    if !crate::device::is_block_device(device) {
        return Err(MountError::Invalid(format!(
            "{} is not a block device",
            device.display()
        )));
    }
    let dev = device.to_owned();
    let zeros = tokio::task::spawn_blocking(move || witness(&dev))
        .await
        .map_err(|e| MountError::io("probe task", std::io::Error::other(e.to_string())))??;
    if zeros {
        return Ok(Content::Blank);
    }
    let out = run_status(
        "blkid",
        &["-p", "-o", "export", "--"],
        device,
        PROBE_TIMEOUT,
    )
    .await?;
    match out.status.code() {
        // 2: nothing found — but the bytes are there.
        Some(2) => Ok(Content::Unknown(
            "no signature blkid knows, but the first or last 256 KiB hold data".into(),
        )),
        Some(0) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let field = |k: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(str::to_owned)
            };
            if let Some(t) = field("TYPE=") {
                Ok(Content::Filesystem(t))
            } else if let Some(t) = field("PTTYPE=") {
                Ok(Content::PartitionTable(t))
            } else {
                Ok(Content::Unknown(text.trim().replace('\n', " ")))
            }
        }
        // 8: ambivalent probing result — several signatures: certainly not blank.
        Some(8) => Ok(Content::Unknown("several signatures".into())),
        _ => Err(command_error("blkid", &out)),
    }
}

/// Opens `device` exclusively and reads its first and last [`WITNESS_BYTES`]: whether
/// every byte read is zero. Fails with the device's name and the reason when it is in
/// use or cannot be read.
fn witness(device: &Path) -> Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;

    let what = |verb: &str| format!("{verb} {}", device.display());
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
        .open(device)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => MountError::InUse(format!(
                "{} is mounted or held by another user; it is not formatted",
                device.display()
            )),
            _ => MountError::io(what("open (exclusively)"), e),
        })?;
    let size = crate::device::size_bytes(device)?;
    let mut buf = vec![0u8; WITNESS_BYTES.min(size) as usize];
    let mut zeros = true;
    for offset in [0, size.saturating_sub(WITNESS_BYTES)] {
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut buf))
            .map_err(|e| {
                MountError::io(what(&format!("read {} bytes at {offset} of", buf.len())), e)
            })?;
        zeros &= buf.iter().all(|b| *b == 0);
    }
    Ok(zeros)
}

/// The smallest device each filesystem can be made on (xfsprogs refuses less than
/// 300 MB since 5.19; ext4 goes down to a journal-less 1 MiB).
pub fn min_size(fs_type: &str) -> u64 {
    match fs_type {
        "xfs" => 300 << 20,
        _ => 1 << 20,
    }
}

nix::ioctl_read_bad!(blk_ro_get, 0x125e, libc::c_int);

/// Whether the block device is read-only (attached read-only, write-protected).
pub fn read_only(device: &Path) -> Result<bool> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(device)
        .map_err(|e| MountError::io(format!("open {}", device.display()), e))?;
    let mut ro: libc::c_int = 0;
    // SAFETY: BLKROGET writes one int through the pointer we pass.
    unsafe { blk_ro_get(file.as_raw_fd(), &mut ro) }
        .map_err(|e| MountError::io(format!("read-only flag of {}", device.display()), e.into()))?;
    Ok(ro != 0)
}

/// Creates `fs_type` on a device [`probe`] found blank — or, with `overwrite`, on one
/// holding the remains of a format of ours that was interrupted (mkfs.xfs refuses to
/// write over a signature it finds unless forced; mkfs.ext4 is always forced, having
/// been given a blank device). A device that cannot take it — read-only, or too small
/// for that filesystem — is refused with the reason before mkfs runs, so the answer
/// names the state to change rather than mkfs's stderr.
pub async fn mkfs(device: &Path, fs_type: &str, overwrite: bool) -> Result<()> {
    if !matches!(fs_type, "ext4" | "xfs") {
        return Err(MountError::Invalid(format!("cannot format {fs_type}")));
    }
    if read_only(device)? {
        return Err(MountError::Refused(format!(
            "{} is read-only and holds no filesystem: it cannot be formatted",
            device.display()
        )));
    }
    let size = crate::device::size_bytes(device)?;
    if size < min_size(fs_type) {
        return Err(MountError::Refused(format!(
            "{} has {size} bytes; {fs_type} needs at least {}",
            device.display(),
            min_size(fs_type)
        )));
    }
    match fs_type {
        "ext4" => run("mkfs.ext4", &["-q", "-F", "--"], device, MKFS_TIMEOUT).await,
        "xfs" if overwrite => run("mkfs.xfs", &["-q", "-f", "--"], device, MKFS_TIMEOUT).await,
        "xfs" => run("mkfs.xfs", &["-q", "--"], device, MKFS_TIMEOUT).await,
        other => Err(MountError::Invalid(format!("cannot format {other}"))),
    }
}

/// Grows the mounted filesystem on `device` to fill it.
pub async fn grow(device: &Path, mount_point: &Path, fs_type: &str) -> Result<()> {
    let grown = match fs_type {
        "ext4" | "ext3" | "ext2" => run("resize2fs", &[], device, GROW_TIMEOUT).await,
        "xfs" => run("xfs_growfs", &["-d", "--"], mount_point, GROW_TIMEOUT).await,
        other => return Err(MountError::Invalid(format!("cannot grow {other}"))),
    };
    match grown {
        // The filesystem's own ceiling: its block size and layout, fixed when it was
        // made, cap how far it can grow (an ext4 made small uses 1 KiB blocks).
        Err(MountError::Command { stderr, .. }) if TOO_LARGE.iter().any(|m| stderr.contains(m)) => {
            Err(MountError::OutOfRange(format!(
                "the {fs_type} filesystem on {} cannot grow to the device's size: {}",
                device.display(),
                stderr.lines().last().unwrap_or_default()
            )))
        }
        other => other,
    }
}

/// What resize2fs says when the size is past what the filesystem's layout can hold.
const TOO_LARGE: &[&str] = &[
    "too many block group descriptors",
    "New size too large to be expressed",
];

async fn run(program: &str, args: &[&str], path: &Path, timeout: Duration) -> Result<()> {
    let out = run_status(program, args, path, timeout).await?;
    if out.status.success() {
        Ok(())
    } else {
        Err(command_error(program, &out))
    }
}

async fn run_status(
    program: &str,
    args: &[&str],
    path: &Path,
    timeout: Duration,
) -> Result<std::process::Output> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg(path)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    let command = format!("{program} {}", path.display());
    match tokio::time::timeout(timeout, cmd.output()).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(MountError::io(format!("run {command}"), e)),
        Err(_) => Err(MountError::Timeout {
            command,
            seconds: timeout.as_secs(),
        }),
    }
}

fn command_error(program: &str, out: &std::process::Output) -> MountError {
    MountError::Command {
        command: program.to_owned(),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_device_is_never_blank() {
        let err = probe(Path::new("/dev/overcast-no-such-device"))
            .await
            .unwrap_err();
        assert!(matches!(err, MountError::Invalid(_)), "{err:?}");
        assert!(
            probe(Path::new("/dev/null")).await.is_err(),
            "a character device is not a disk"
        );
    }

    #[tokio::test]
    async fn a_mounted_or_unreadable_device_is_never_blank() {
        // The root filesystem's device is mounted: whatever blkid would say about it,
        // probing must refuse it, never answer Blank.
        let Some(root) = crate::mountinfo::read()
            .unwrap()
            .into_iter()
            .find(|m| m.mount_point == Path::new("/"))
            .and_then(|m| crate::device::node_of(m.major, m.minor))
            .filter(|d| crate::device::is_block_device(d))
        else {
            return; // a root on overlayfs or tmpfs has no device to try
        };
        // EBUSY where the device can be opened, EPERM where a sandbox withholds it (as
        // here, where blkid answers "nothing found" for it): an error either way.
        let got = probe(&root).await;
        assert!(
            matches!(got, Err(MountError::InUse(_) | MountError::Io { .. })),
            "{}: {got:?}",
            root.display()
        );
    }

    #[tokio::test]
    async fn unknown_filesystems_are_refused() {
        assert!(matches!(
            mkfs(Path::new("/dev/null"), "ntfs", false).await,
            Err(MountError::Invalid(_))
        ));
    }
}
