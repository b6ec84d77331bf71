//! What this node staged and published, per volume, kept in a small JSON file so every
//! retry and every stats call is answered from recorded state — also after a restart.
//! Written whole to a temporary file and renamed: a crash leaves the old or the new
//! file, never half of one.

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
        let tmp = self.file.with_extension("json.tmp");
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &self.file)?;
        *volumes = next;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeVolume>> {
        self.volumes.lock().unwrap_or_else(|p| p.into_inner())
    }
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
