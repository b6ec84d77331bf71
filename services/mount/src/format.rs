//! Probing, formatting and growing with the standard tools (blkid, mkfs.ext4,
//! mkfs.xfs, resize2fs, xfs_growfs), each run with a timeout and its stderr carried
//! into the error. A device that holds anything — a filesystem, a partition table, a
//! signature blkid cannot name — is never formatted.

use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

use crate::{MountError, Result};

/// Every program this module runs: the CSI image must carry them (Dockerfile.csi,
/// checked by integration/tests/deploy.rs).
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

/// What the device holds, by low-level probing (no cache).
pub async fn probe(device: &Path) -> Result<Content> {
    // blkid answers "nothing found" (2) for a missing path too: never let that read as
    // a blank disk.
    if !crate::device::is_block_device(device) {
        return Err(MountError::Invalid(format!(
            "{} is not a block device",
            device.display()
        )));
    }
    let out = run_status(
        "blkid",
        &["-p", "-o", "export", "--"],
        device,
        PROBE_TIMEOUT,
    )
    .await?;
    match out.status.code() {
        // 2: nothing found.
        Some(2) => Ok(Content::Blank),
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

/// Creates `fs_type` on a device the caller has probed blank.
pub async fn mkfs(device: &Path, fs_type: &str) -> Result<()> {
    match fs_type {
        "ext4" => run("mkfs.ext4", &["-q", "-F", "--"], device, MKFS_TIMEOUT).await,
        "xfs" => run("mkfs.xfs", &["-q", "--"], device, MKFS_TIMEOUT).await,
        other => Err(MountError::Invalid(format!("cannot format {other}"))),
    }
}

/// Grows the mounted filesystem on `device` to fill it.
pub async fn grow(device: &Path, mount_point: &Path, fs_type: &str) -> Result<()> {
    match fs_type {
        "ext4" | "ext3" | "ext2" => run("resize2fs", &[], device, GROW_TIMEOUT).await,
        "xfs" => run("xfs_growfs", &["-d", "--"], mount_point, GROW_TIMEOUT).await,
        other => Err(MountError::Invalid(format!("cannot grow {other}"))),
    }
}

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
    async fn unknown_filesystems_are_refused() {
        assert!(matches!(
            mkfs(Path::new("/dev/null"), "ntfs").await,
            Err(MountError::Invalid(_))
        ));
    }
}
