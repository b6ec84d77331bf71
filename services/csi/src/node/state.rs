//! What this node staged and published, per volume, kept in a small JSON file so every
//! retry and every stats call is answered from recorded state — also after a restart.
//! It is also the node's claim of ownership: unstage and unpublish touch only paths
//! recorded here for that volume, and a path is recorded *before* it is mounted, so a
//! crash between the two still leaves the mount findable.
//! Written whole to a temporary file, synced, renamed, and the directory synced: a crash
//! or a power cut leaves the old or the new file, never half of one, and an answered
//! call is on disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeVolume {
    /// The device it was staged from.
    pub device: Option<PathBuf>,
    pub staging: Option<PathBuf>,
    pub block: bool,
    pub fs_type: String,
    /// Published targets and whether each is read-only.
    pub targets: BTreeMap<PathBuf, bool>,
}

pub struct NodeState {
    file: PathBuf,
    volumes: Mutex<BTreeMap<String, NodeVolume>>,
}

impl NodeState {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let file = dir.join("volumes.json");
        let volumes = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| std::io::Error::other(format!("{}: {e}", file.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Self {
            file,
            volumes: Mutex::new(volumes),
        })
    }

    pub fn get(&self, volume_id: &str) -> Option<NodeVolume> {
        self.lock().get(volume_id).cloned()
    }

    /// Changes one volume's record and writes the file; a record left empty is dropped.
    pub fn update(
        &self,
        volume_id: &str,
        change: impl FnOnce(&mut NodeVolume),
    ) -> std::io::Result<()> {
        let mut volumes = self.lock();
        let mut entry = volumes.get(volume_id).cloned().unwrap_or_default();
        change(&mut entry);
        let mut next = volumes.clone();
        if entry.staging.is_none() && entry.targets.is_empty() {
            next.remove(volume_id);
        } else {
            next.insert(volume_id.to_owned(), entry);
        }
        let bytes = serde_json::to_vec_pretty(&next).map_err(std::io::Error::other)?;
        write_durably(&self.file, &bytes)?;
        *volumes = next;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeVolume>> {
        self.volumes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Replaces `file` with `bytes` so that after a crash it holds one or the other, and
/// once this returns, the new one survives a power cut.
fn write_durably(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = file.with_extension("json.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, file)?;
    // The rename lives in the directory: sync it too.
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopen_and_empty_ones_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        state
            .update("v", |v| v.staging = Some("/s".into()))
            .unwrap();
        state
            .update("v", |v| {
                v.targets.insert("/t".into(), true);
            })
            .unwrap();
        let again = NodeState::open(dir.path()).unwrap();
        let v = again.get("v").unwrap();
        assert_eq!(v.staging, Some(PathBuf::from("/s")));
        assert_eq!(v.targets.get(Path::new("/t")), Some(&true));
        again
            .update("v", |v| {
                v.staging = None;
                v.targets.clear();
            })
            .unwrap();
        assert_eq!(NodeState::open(dir.path()).unwrap().get("v"), None);
    }
}
