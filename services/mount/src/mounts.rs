//! Mounting through system calls (nix), not the `mount` command: a filesystem at a
//! staging path, a bind from staging to a pod's target, truly read-only when asked.

use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::{MountError, Result};

/// Splits CSI mount flags into the kernel's generic flags and the filesystem-specific
/// data string (`discard`, `errors=remount-ro`, …).
pub fn parse_flags(flags: &[String]) -> (MsFlags, String) {
    let mut ms = MsFlags::empty();
    let mut data = Vec::new();
    for flag in flags
        .iter()
        .flat_map(|f| f.split(','))
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        match flag {
            "ro" => ms |= MsFlags::MS_RDONLY,
            "rw" => ms &= !MsFlags::MS_RDONLY,
            "nosuid" => ms |= MsFlags::MS_NOSUID,
            "nodev" => ms |= MsFlags::MS_NODEV,
            "noexec" => ms |= MsFlags::MS_NOEXEC,
            "sync" => ms |= MsFlags::MS_SYNCHRONOUS,
            "dirsync" => ms |= MsFlags::MS_DIRSYNC,
            "noatime" => ms |= MsFlags::MS_NOATIME,
            "nodiratime" => ms |= MsFlags::MS_NODIRATIME,
            "relatime" => ms |= MsFlags::MS_RELATIME,
            "strictatime" => ms |= MsFlags::MS_STRICTATIME,
            "lazytime" => ms |= MsFlags::MS_LAZYTIME,
            // Bind and propagation flags are ours to choose, not the caller's.
            "defaults" | "bind" | "rbind" => {}
            other => data.push(other),
        }
    }
    (ms, data.join(","))
}

/// Mounts the filesystem on `device` at `target`.
pub fn mount_fs(device: &Path, target: &Path, fs_type: &str, flags: &[String]) -> Result<()> {
    let (ms, data) = parse_flags(flags);
    let data = (!data.is_empty()).then_some(data.as_str());
    mount(Some(device), target, Some(fs_type), ms, data).map_err(|e| {
        MountError::io(
            format!(
                "mount {} ({fs_type}) at {}",
                device.display(),
                target.display()
            ),
            std::io::Error::from(e),
        )
    })
}

/// Binds `source` onto `target`; read-only binds take a second, remounting call (the
/// kernel ignores MS_RDONLY on the first).
pub fn bind(source: &Path, target: &Path, readonly: bool, flags: &[String]) -> Result<()> {
    let context = || format!("bind {} to {}", source.display(), target.display());
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| MountError::io(context(), e.into()))?;
    let (mut ms, _) = parse_flags(flags);
    if readonly {
        ms |= MsFlags::MS_RDONLY;
    }
    if !ms.is_empty() {
        let remount = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | ms;
        if let Err(e) = mount(None::<&str>, target, None::<&str>, remount, None::<&str>) {
            let _ = umount2(target, MntFlags::empty());
            return Err(MountError::io(format!("{} read-only", context()), e.into()));
        }
    }
    Ok(())
}

/// Unmounts everything stacked on `target`; nothing mounted there is fine. A symlink
/// at `target` is not followed: what it points to was never ours to unmount.
pub fn unmount_all(target: &Path) -> Result<()> {
    for _ in 0..16 {
        match umount2(target, MntFlags::UMOUNT_NOFOLLOW) {
            Ok(()) => continue,
            Err(Errno::EINVAL | Errno::ENOENT) => return Ok(()),
            Err(e) => {
                return Err(MountError::io(
                    format!("unmount {}", target.display()),
                    e.into(),
                ))
            }
        }
    }
    Err(MountError::Invalid(format!(
        "{} still mounted after 16 unmounts",
        target.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_split_into_kernel_flags_and_data() {
        let (ms, data) = parse_flags(&[
            "noatime,nodev".into(),
            "discard".into(),
            "errors=remount-ro".into(),
            "ro".into(),
        ]);
        assert!(ms.contains(MsFlags::MS_NOATIME | MsFlags::MS_NODEV | MsFlags::MS_RDONLY));
        assert_eq!(data, "discard,errors=remount-ro");
        let (ms, data) = parse_flags(&["bind".into(), "defaults".into()]);
        assert!(ms.is_empty());
        assert!(data.is_empty());
    }
}
