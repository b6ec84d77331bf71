//! Which format the state directory is in, said by a file of its own: `FORMAT`, one line,
//! `overcast-local-state <n>`.
//!
//! One number for everything in the directory (the store's log and snapshot, the disks'
//! files and their metadata files), checked before anything else is read, so a release
//! never reads a layout it does not know as if it were its own:
//!
//! - **No file** is format 1, as every release before this file existed left it (the
//!   release of 2026-11-27, 688adc9, among them: the same store, disks without metadata
//!   files, which the start-up repair writes from the store). The file is written then.
//! - **A format this release knows** is read; an older one would be converted here and
//!   the file rewritten (there is none older than 1 yet; the store of the releases before
//!   0.1, `store.redb`, is converted by the store itself).
//! - **A newer format** is refused with what wrote it and what to do: run that release
//!   or a newer one, or restore the directory from before the upgrade. Nothing is read or
//!   changed.
//!
//! A metadata file beside a disk says its own format too (`meta.rs`): it is what survives
//! when the store is lost, and may be copied without this directory.

use std::io::Write;
use std::path::Path;

use overcast_cloud::{CloudError, Result};

/// The file, in the state directory.
pub const FILE: &str = "FORMAT";
/// The format this release writes and reads.
pub const CURRENT: u32 = 1;
const WORD: &str = "overcast-local-state";

/// Checks the format of `state_dir`, writing the file where there is none.
pub fn check(state_dir: &Path) -> Result<()> {
    let path = state_dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return write(state_dir);
        }
        Err(e) => return Err(CloudError::io(format!("read {}", path.display()), e)),
    };
    let found = parse(&text).ok_or_else(|| {
        CloudError::FailedPrecondition(format!(
            "{} does not say a format Overcast knows ({:?}; expected \"{WORD} <n>\"): \
             this is not a state directory of the local cloud, or the file was damaged \
             (a release that reads format {CURRENT} writes \"{WORD} {CURRENT}\" there)",
            path.display(),
            text.trim()
        ))
    })?;
    if found > CURRENT {
        return Err(CloudError::FailedPrecondition(format!(
            "{} is in format {found}, written by a newer release of Overcast; this release \
             reads formats up to {CURRENT} and leaves it untouched. Run that release (or a \
             newer one) on this state directory, or restore the directory from a copy made \
             before the upgrade",
            state_dir.display()
        )));
    }
    Ok(())
}

fn parse(text: &str) -> Option<u32> {
    let mut words = text.split_whitespace();
    if words.next()? != WORD {
        return None;
    }
    let n = words.next()?.parse().ok()?;
    words.next().is_none().then_some(n)
}

/// Writes the file whole: a temporary file, synced, renamed, the directory synced.
fn write(state_dir: &Path) -> Result<()> {
    let path = state_dir.join(FILE);
    let tmp = state_dir.join(format!("{FILE}.tmp"));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(format!("{WORD} {CURRENT}\n").as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, &path))
        .and_then(|()| std::fs::File::open(state_dir)?.sync_all());
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CloudError::io(format!("write {}", path.display()), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_the_file_is_format_1_and_gets_it() {
        let dir = tempfile::tempdir().unwrap();
        check(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
            "overcast-local-state 1\n"
        );
        check(dir.path()).unwrap();
    }

    #[test]
    fn a_newer_format_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "overcast-local-state 2\n").unwrap();
        let e = check(dir.path()).unwrap_err().to_string();
        assert!(e.contains("format 2, written by a newer release"), "{e}");
        assert!(e.contains("reads formats up to 1"), "{e}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
            "overcast-local-state 2\n"
        );
    }

    #[test]
    fn a_file_that_says_something_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for text in [
            "",
            "overcast-local-state",
            "overcast-local-state x",
            "other 1",
            "overcast-local-state 1 2",
        ] {
            std::fs::write(dir.path().join(FILE), text).unwrap();
            let e = check(dir.path()).unwrap_err().to_string();
            assert!(
                e.contains("does not say a format Overcast knows"),
                "{text:?}: {e}"
            );
        }
    }
}
