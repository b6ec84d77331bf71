//! Backing files: sparse by default, fully allocated when thick provisioning is asked
//! for, grown in place.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{fallocate, FallocateFlags};

use overcast_cloud::{CloudError, Result};

/// Creates `path` (which must not exist) with `size` bytes.
pub fn create(path: &Path, size: u64, thick: bool) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| CloudError::io(format!("create {}", path.display()), e))?;
    let sized = size_file(&file, path, size, thick);
    if sized.is_err() {
        let _ = std::fs::remove_file(path);
    }
    sized
}

/// Creates `path` (which must not exist) as a copy of `from` grown to `size` bytes, and
/// syncs it: its content is data, which the store's commit that follows does not make
/// durable. Its size comes last (`copy` keeps it short until the copy is whole), so a
/// crash leaves a file shorter than its metadata says, which the next start removes.
pub fn create_copy(path: &Path, from: &File, size: u64, thick: bool) -> Result<crate::copy::Made> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| CloudError::io(format!("create {}", path.display()), e))?;
    let made = crate::copy::copy(from, &file)
        .map_err(|e| CloudError::io(format!("copy into {}", path.display()), e))
        .and_then(|made| {
            size_file(&file, path, size, thick)?;
            file.sync_all()
                .map_err(|e| CloudError::io(format!("sync {}", path.display()), e))?;
            Ok(made)
        });
    if made.is_err() {
        let _ = std::fs::remove_file(path);
    }
    made
}

/// Grows `path` to `size` bytes; never shrinks it.
pub fn grow(path: &Path, size: u64, thick: bool) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| CloudError::io(format!("open {}", path.display()), e))?;
    let current = file
        .metadata()
        .map_err(|e| CloudError::io(format!("stat {}", path.display()), e))?
        .len();
    if current >= size {
        return Ok(());
    }
    size_file(&file, path, size, thick)
}

fn size_file(file: &File, path: &Path, size: u64, thick: bool) -> Result<()> {
    let len = i64::try_from(size)
        .map_err(|_| CloudError::OutOfRange(format!("size {size} is too large")))?;
    if thick {
        let meta = file
            .metadata()
            .map_err(|e| CloudError::io(format!("stat {}", path.display()), e))?;
        // fallocate allocates until the filesystem is full and then fails, keeping what
        // it allocated and the size it reached: one refused request would leave the
        // host's disk full. Ask first; and undo a failure anyway (another writer may
        // have taken the space in between).
        let needed = size.saturating_sub(meta.blocks() * 512);
        let free = available_bytes(path.parent().unwrap_or(Path::new("/")))?;
        if needed > free {
            return Err(CloudError::ResourceExhausted(format!(
                "not enough space for {size} bytes at {} ({free} bytes free)",
                path.display()
            )));
        }
        return match fallocate(file.as_fd(), FallocateFlags::empty(), 0, len) {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Err(undo) = file.set_len(meta.len()) {
                    tracing::warn!(error = %undo, file = %path.display(), "could not give back the space of a failed allocation");
                }
                Err(match e {
                    Errno::ENOSPC => CloudError::ResourceExhausted(format!(
                        "not enough space for {size} bytes at {}",
                        path.display()
                    )),
                    e => CloudError::io(format!("allocate {}", path.display()), io::Error::from(e)),
                })
            }
        };
    }
    file.set_len(size)
        .map_err(|e| CloudError::io(format!("resize {}", path.display()), e))
}

/// Bytes an unprivileged writer can still allocate in the filesystem holding `dir`.
pub fn available_bytes(dir: &Path) -> Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir)
        .map_err(|e| CloudError::io(format!("statvfs {}", dir.display()), io::Error::from(e)))?;
    Ok(st.blocks_available() as u64 * st.fragment_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thin_files_are_sparse_and_thick_ones_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let thin = dir.path().join("thin.img");
        let thick = dir.path().join("thick.img");
        create(&thin, 8 << 20, false).unwrap();
        create(&thick, 8 << 20, true).unwrap();
        assert_eq!(std::fs::metadata(&thin).unwrap().len(), 8 << 20);
        assert_eq!(std::fs::metadata(&thin).unwrap().blocks(), 0);
        assert!(std::fs::metadata(&thick).unwrap().blocks() * 512 >= 8 << 20);
        assert!(
            create(&thin, 1 << 20, false).is_err(),
            "an existing file is never reused"
        );
        grow(&thin, 16 << 20, false).unwrap();
        grow(&thin, 4 << 20, false).unwrap();
        assert_eq!(
            std::fs::metadata(&thin).unwrap().len(),
            16 << 20,
            "grow never shrinks"
        );
        assert!(available_bytes(dir.path()).unwrap() > 0);
    }

    #[test]
    fn a_thick_size_past_the_free_space_takes_none_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let free = available_bytes(dir.path()).unwrap();
        let file = dir.path().join("thick.img");
        create(&file, 1 << 20, true).unwrap();
        let err = grow(&file, free + (64 << 30), true).unwrap_err();
        assert!(matches!(err, CloudError::ResourceExhausted(_)), "{err:?}");
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.len(), 1 << 20, "the file keeps its size");
        assert!(meta.blocks() * 512 < 2 << 20, "and holds no more space");
        assert!(available_bytes(dir.path()).unwrap() + (64 << 20) > free);
        assert!(create(&dir.path().join("huge.img"), free + (64 << 30), true).is_err());
        assert!(!dir.path().join("huge.img").exists());
    }
}
