//! Copies of a disk's backing file (a snapshot, a clone, a restore): shared extents where
//! the filesystem can (`FICLONE`: btrfs, XFS with reflink, bcachefs), in one call that
//! the kernel makes atomic against writers; elsewhere (ext4) the data extents alone,
//! found with `SEEK_DATA`/`SEEK_HOLE` and copied in the kernel (`copy_file_range`), so a
//! hole stays a hole and a snapshot of a sparse disk costs what the disk holds.
//!
//! The extent copy is not atomic: a disk written while it is copied may be in the copy
//! partly before and partly after a write. What the copy holds for certain is what was
//! written (and reached the file: a filesystem on the disk syncs it) before the copy
//! began. docs/components/csi.md says so for snapshots of attached disks.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// How a copy was made (for the caller's log and the benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    /// The filesystem shares the extents: no data moved.
    Reflinked,
    /// This many bytes of data extents copied (the holes between them skipped).
    Copied(u64),
}

/// Copies all of `from` into `to` (empty, opened for writing), which ends with `from`'s
/// length. Extents are copied in order, so until the copy is whole `to` is shorter than
/// `from` (unless `from` ends in a hole, which `set_len` adds last).
pub fn copy(from: &File, to: &File) -> io::Result<Made> {
    // SAFETY: FICLONE takes the source descriptor as its argument; both are open.
    let cloned = unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) };
    if cloned == 0 {
        return Ok(Made::Reflinked);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // Not a filesystem that shares extents, or not across these two: copy.
        Some(libc::EOPNOTSUPP | libc::EXDEV | libc::EINVAL | libc::ENOTTY) => {}
        _ => return Err(err),
    }
    let len = i64::try_from(from.metadata()?.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large"))?;
    let mut copied = 0u64;
    let mut at: i64 = 0;
    while at < len {
        let Some(start) = seek(from, at, libc::SEEK_DATA)? else {
            break; // only a hole is left
        };
        let end = seek(from, start, libc::SEEK_HOLE)?.unwrap_or(len).min(len);
        let (mut off_in, mut off_out) = (start, start);
        while off_in < end {
            let want = usize::try_from(end - off_in)
                .unwrap_or(usize::MAX)
                .min(1 << 30);
            // SAFETY: both descriptors are open; the offsets are ours and updated by
            // the kernel.
            let n = unsafe {
                libc::copy_file_range(
                    from.as_raw_fd(),
                    &mut off_in,
                    to.as_raw_fd(),
                    &mut off_out,
                    want,
                    0,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if n == 0 {
                // The file shrank under us (it never does: ours only grow).
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the source ended while it was copied",
                ));
            }
            copied += n as u64;
        }
        at = end;
    }
    to.set_len(len as u64)?;
    Ok(Made::Copied(copied))
}

/// `lseek` with `SEEK_DATA`/`SEEK_HOLE`: `None` where there is no more data (`ENXIO`).
fn seek(file: &File, offset: i64, whence: libc::c_int) -> io::Result<Option<i64>> {
    // SAFETY: the descriptor is open; lseek has no other inputs.
    let at = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if at >= 0 {
        return Ok(Some(at));
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::unix::fs::{FileExt, MetadataExt};

    #[test]
    fn a_copy_holds_the_data_and_keeps_the_holes() {
        let dir = tempfile::tempdir().unwrap();
        let mut from = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("from"))
            .unwrap();
        from.set_len(64 << 20).unwrap();
        from.seek(SeekFrom::Start(1 << 20)).unwrap();
        from.write_all(&[7u8; 4096]).unwrap();
        from.seek(SeekFrom::Start(40 << 20)).unwrap();
        from.write_all(b"the middle").unwrap();
        from.sync_all().unwrap();
        let to = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("to"))
            .unwrap();
        let made = copy(&from, &to).unwrap();
        let meta = to.metadata().unwrap();
        assert_eq!(meta.len(), 64 << 20, "{made:?}");
        assert!(
            meta.blocks() * 512 < 4 << 20,
            "a sparse copy stays sparse: {} bytes allocated ({made:?})",
            meta.blocks() * 512
        );
        let mut all = Vec::new();
        (&to).read_to_end(&mut all).unwrap();
        let mut want = vec![0u8; 64 << 20];
        want[1 << 20..(1 << 20) + 4096].fill(7);
        want[40 << 20..(40 << 20) + 10].copy_from_slice(b"the middle");
        assert!(all == want, "the copy differs from its source ({made:?})");
        // Written after: not in the copy.
        from.seek(SeekFrom::Start(0)).unwrap();
        from.write_all(b"later").unwrap();
        let mut head = [0u8; 5];
        to.read_exact_at(&mut head, 0).unwrap();
        assert_eq!(head, [0u8; 5]);
    }
}
