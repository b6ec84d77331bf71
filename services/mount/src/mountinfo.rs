//! `/proc/self/mountinfo`, the kernel's own account of what is mounted where: the
//! source of truth for every idempotency check on the node.

use std::path::{Path, PathBuf};

use crate::{MountError, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub major: u32,
    pub minor: u32,
    /// The path inside the source filesystem that is mounted ("/" for a whole fs;
    /// "/loop3" for a bind of a devtmpfs node).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    /// Per-mount options (`rw`/`ro`, `nosuid`, …).
    pub options: Vec<String>,
    pub fs_type: String,
    pub source: String,
}

impl MountInfo {
    pub fn readonly(&self) -> bool {
        self.options.iter().any(|o| o == "ro")
    }
}

/// Every mount of this process's namespace, in mount order.
pub fn read() -> Result<Vec<MountInfo>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| MountError::io("read /proc/self/mountinfo", e))?;
    Ok(parse(&text))
}

/// The mounts stacked on `path`, topmost last.
pub fn at(path: &Path) -> Result<Vec<MountInfo>> {
    Ok(read()?
        .into_iter()
        .filter(|m| m.mount_point == path)
        .collect())
}

/// The topmost mount on `path`, if `path` is a mount point.
pub fn top(path: &Path) -> Result<Option<MountInfo>> {
    Ok(at(path)?.pop())
}

pub fn parse(text: &str) -> Vec<MountInfo> {
    text.lines().filter_map(parse_line).collect()
}

// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
fn parse_line(line: &str) -> Option<MountInfo> {
    let (left, right) = line.split_once(" - ")?;
    let mut l = left.split(' ');
    let _id = l.next()?;
    let _parent = l.next()?;
    let (major, minor) = l.next()?.split_once(':')?;
    let root = unescape(l.next()?);
    let mount_point = unescape(l.next()?);
    let options = l.next()?.split(',').map(str::to_owned).collect();
    let mut r = right.split(' ');
    let fs_type = r.next()?.to_owned();
    let source = unescape(r.next().unwrap_or(""));
    Some(MountInfo {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        root: PathBuf::from(root),
        mount_point: PathBuf::from(mount_point),
        options,
        fs_type,
        source,
    })
}

/// The kernel escapes space, tab, newline and backslash as three octal digits.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_format_with_escapes_and_optional_fields() {
        let text = "36 35 98:0 /mnt1 /mnt\\0402 rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue\n\
                    40 36 0:5 /loop3 /var/lib/kubelet/pods/x/vol ro,nosuid - devtmpfs udev rw\n";
        let m = parse(text);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].major, m[0].minor), (98, 0));
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt 2"));
        assert_eq!(m[0].root, PathBuf::from("/mnt1"));
        assert_eq!(m[0].fs_type, "ext3");
        assert_eq!(m[0].source, "/dev/root");
        assert!(!m[0].readonly());
        assert!(m[1].readonly());
        assert_eq!(m[1].root, PathBuf::from("/loop3"));
    }

    #[test]
    fn reads_this_process_mounts() {
        let all = read().unwrap();
        assert!(all.iter().any(|m| m.mount_point == Path::new("/")));
    }
}
