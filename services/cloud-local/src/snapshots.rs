//! Snapshots of the local cloud's disks: `snapshots/snap-<hex>.img`, a copy of the disk's
//! file as it was when cut ([`copy`](super::copy): reflinked where the filesystem can,
//! else its data extents), and `snap-<hex>.json` beside it, what the snapshot is (its CSI
//! name, the disk it was cut from, that disk's size, when).
//!
//! The two files are the whole record: the store holds no snapshot. A create writes the
//! metadata file, copies the disk into `snap-<hex>.img.part`, syncs it, renames it to
//! `snap-<hex>.img` and syncs the directory, and only then answers; so a snapshot exists
//! exactly when its image does, whole. A crash leaves a metadata file without an image,
//! or a `.part` beside it (never acknowledged: the next start removes both), or the whole
//! snapshot (the CO's repeated CreateSnapshot finds it by name). A delete removes the
//! image first, then the metadata file. A lost store (or one deleted by hand) therefore
//! loses no snapshot, and a disk restored from one is a disk like any other: its record
//! in the store, its content its own (deleting the snapshot, or its disk, takes nothing
//! from it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use serde::{Deserialize, Serialize};

use super::copy;
use overcast_cloud::{page_of, CloudError, Result, Snapshot, SnapshotSpec};

const PREFIX: &str = "snap-";
const HEX_LEN: usize = 32;
/// The metadata files' format; a newer one is left alone (see [`Snapshots::open`]).
const FORMAT: u32 = 1;

/// A snapshot id: `snap-` and 32 lowercase hex digits, generated here and parsed on the
/// way in, so an id is joined into a path only once it is proven one of ours.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotId(String);

impl SnapshotId {
    fn generate() -> Self {
        let mut bytes = [0u8; HEX_LEN / 2];
        rand::rng().fill_bytes(&mut bytes);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Self(format!("{PREFIX}{hex}"))
    }

    /// `None` for anything that is not exactly an id we could have generated.
    pub fn parse(raw: &str) -> Option<Self> {
        let hex = raw.strip_prefix(PREFIX)?;
        let ok = hex.len() == HEX_LEN
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn image(&self) -> String {
        format!("{}.img", self.0)
    }

    fn part(&self) -> String {
        format!("{}.img.part", self.0)
    }

    fn meta(&self) -> String {
        format!("{}.json", self.0)
    }
}

/// What a snapshot is: its metadata file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotMeta {
    pub format: u32,
    pub id: String,
    pub name: String,
    /// The disk it was cut from.
    pub source: String,
    /// That disk's size then: what a restore needs at least.
    pub size_bytes: u64,
    pub created_unix: u64,
    pub created_nanos: u32,
    pub parameters: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
}

impl SnapshotMeta {
    /// The answer to a create that found this snapshot by its name: it, when it is of
    /// the disk asked for; the spec's ALREADY_EXISTS when it is of another.
    pub fn answer(&self, spec: &SnapshotSpec) -> Result<Snapshot> {
        if self.source == spec.source {
            Ok(self.to_snapshot())
        } else {
            Err(CloudError::ParameterMismatch {
                kind: "snapshot",
                name: spec.name.clone(),
                reason: format!("snapshot {} is of volume {}", self.id, self.source),
            })
        }
    }

    fn to_snapshot(&self) -> Snapshot {
        Snapshot {
            id: self.id.clone(),
            name: self.name.clone(),
            source: self.source.clone(),
            size_bytes: self.size_bytes,
            created: UNIX_EPOCH
                + Duration::from_secs(self.created_unix)
                + Duration::from_nanos(u64::from(self.created_nanos)),
            // The copy is whole before the create answers: every snapshot listed is.
            ready: true,
        }
    }
}

#[derive(Default)]
struct Index {
    by_id: BTreeMap<String, SnapshotMeta>,
    by_name: HashMap<String, String>,
    /// Names being cut: a second create of one gets `Busy`.
    creating: HashSet<String>,
}

/// The snapshots directory and what it holds.
pub struct Snapshots {
    dir: PathBuf,
    index: Arc<Mutex<Index>>,
}

/// What the start-up found, for its log line.
#[derive(Debug, Default)]
pub struct Found {
    pub snapshots: usize,
    pub unfinished_removed: usize,
    pub left_alone: usize,
}

impl Snapshots {
    /// Opens (creating) `dir` and repairs what a crash left: an image being copied
    /// (`.part`) and a metadata file without its image are a create that never answered,
    /// and are removed; a whole image with its metadata is a snapshot. An image without
    /// usable metadata (damaged, or a newer release's) is left where it is, unlisted,
    /// and logged: nothing here deletes what it cannot explain.
    pub fn open(dir: &Path) -> Result<(Self, Found)> {
        std::fs::create_dir_all(dir)
            .map_err(|e| CloudError::io(format!("create {}", dir.display()), e))?;
        let read = |e| CloudError::io(format!("read {}", dir.display()), e);
        let mut images = HashSet::new();
        let mut metas = HashSet::new();
        let mut parts = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read)? {
            let entry = entry.map_err(read)?;
            let name = entry.file_name();
            let name = name.to_str().unwrap_or_default();
            if let Some(id) = name.strip_suffix(".img.part").and_then(SnapshotId::parse) {
                parts.push(id);
            } else if let Some(id) = name.strip_suffix(".img").and_then(SnapshotId::parse) {
                images.insert(id);
            } else if let Some(id) = name.strip_suffix(".json").and_then(SnapshotId::parse) {
                metas.insert(id);
            } else {
                tracing::warn!(file = ?entry.path(), "leaving a file the local cloud did not make");
            }
        }
        let mut found = Found::default();
        for id in &parts {
            remove(&dir.join(id.part()))?;
            found.unfinished_removed += 1;
        }
        let mut index = Index::default();
        for id in &metas {
            if !images.contains(id) {
                remove(&dir.join(id.meta()))?;
                found.unfinished_removed += 1;
                continue;
            }
            match read_meta(dir, id) {
                Ok(meta) => {
                    index.by_name.insert(meta.name.clone(), meta.id.clone());
                    index.by_id.insert(meta.id.clone(), meta);
                    found.snapshots += 1;
                }
                Err(why) => {
                    tracing::warn!(snapshot.id = %id.as_str(), error = %why, "leaving a snapshot whose metadata cannot be used (unlisted)");
                    found.left_alone += 1;
                }
            }
        }
        for id in images.iter().filter(|id| !metas.contains(*id)) {
            tracing::warn!(snapshot.id = %id.as_str(), "leaving a snapshot image without its metadata file (unlisted)");
            found.left_alone += 1;
        }
        if found.unfinished_removed > 0 {
            sync_dir(dir)?;
        }
        Ok((
            Self {
                dir: dir.to_owned(),
                index: Arc::new(Mutex::new(index)),
            },
            found,
        ))
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The image of a snapshot, for a restore: `NotFound` unless it is one of ours.
    pub fn image_of(&self, raw: &str) -> Result<(PathBuf, Snapshot)> {
        let snapshot = self.get(raw)?;
        let id = SnapshotId::parse(raw).ok_or_else(|| CloudError::not_found("snapshot", raw))?;
        Ok((self.dir.join(id.image()), snapshot))
    }

    pub fn get(&self, raw: &str) -> Result<Snapshot> {
        self.index()
            .by_id
            .get(raw)
            .map(SnapshotMeta::to_snapshot)
            .ok_or_else(|| CloudError::not_found("snapshot", raw))
    }

    /// The snapshot carrying CSI name `name`, if any.
    pub fn by_name(&self, name: &str) -> Option<SnapshotMeta> {
        let index = self.index();
        index.by_name.get(name).map(|id| index.by_id[id].clone())
    }

    pub fn page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> (Vec<Snapshot>, bool) {
        let all: Vec<Snapshot> = self
            .index()
            .by_id
            .values()
            .filter(|m| source.is_none_or(|s| m.source == s))
            .map(SnapshotMeta::to_snapshot)
            .collect();
        page_of(all, |s| &s.id, after, max)
    }

    /// Cuts a snapshot named `spec.name` of the disk whose file is `disk_file` (the
    /// caller holds the disk, so it is neither deleted nor grown meanwhile). Blocking:
    /// the copy takes as long as the disk's data.
    pub fn create(
        &self,
        spec: &SnapshotSpec,
        disk_file: &Path,
        size_bytes: u64,
    ) -> Result<Snapshot> {
        let _claim = {
            let mut index = self.index();
            if !index.creating.insert(spec.name.clone()) {
                return Err(CloudError::Busy(format!(
                    "snapshot named {:?} is being cut",
                    spec.name
                )));
            }
            NameClaim {
                index: Arc::clone(&self.index),
                name: spec.name.clone(),
            }
        };
        // Asked again while the first was cutting: the first's answer.
        if let Some(existing) = self.by_name(&spec.name) {
            return existing.answer(spec);
        }
        let id = SnapshotId::generate();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let meta = SnapshotMeta {
            format: FORMAT,
            id: id.as_str().to_owned(),
            name: spec.name.clone(),
            source: spec.source.clone(),
            size_bytes,
            created_unix: now.as_secs(),
            created_nanos: now.subsec_nanos(),
            parameters: spec.parameters.clone(),
            metadata: spec.metadata.clone(),
        };
        let made = self.write(&id, &meta, disk_file);
        if made.is_err() {
            let _ = remove(&self.dir.join(id.part()));
            let _ = remove(&self.dir.join(id.meta()));
        }
        made?;
        let mut index = self.index();
        index.by_name.insert(meta.name.clone(), meta.id.clone());
        let snapshot = meta.to_snapshot();
        index.by_id.insert(meta.id.clone(), meta);
        Ok(snapshot)
    }

    fn write(&self, id: &SnapshotId, meta: &SnapshotMeta, disk_file: &Path) -> Result<()> {
        let meta_path = self.dir.join(id.meta());
        let bytes = serde_json::to_vec(meta)
            .map_err(|e| CloudError::Internal(format!("encode snapshot {}: {e}", id.as_str())))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&meta_path)
            .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
            .map_err(|e| CloudError::io(format!("write {}", meta_path.display()), e))?;
        let from = File::open(disk_file)
            .map_err(|e| CloudError::io(format!("open {}", disk_file.display()), e))?;
        let part = self.dir.join(id.part());
        let to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&part)
            .map_err(|e| CloudError::io(format!("create {}", part.display()), e))?;
        let made = copy::copy(&from, &to).map_err(|e| {
            CloudError::io(
                format!("copy {} to {}", disk_file.display(), part.display()),
                e,
            )
        })?;
        to.sync_all()
            .map_err(|e| CloudError::io(format!("sync {}", part.display()), e))?;
        let image = self.dir.join(id.image());
        std::fs::rename(&part, &image)
            .map_err(|e| CloudError::io(format!("rename {}", part.display()), e))?;
        sync_dir(&self.dir)?;
        tracing::info!(snapshot.id = %id.as_str(), snapshot.name = %meta.name, volume.id = %meta.source, copy = ?made, "cut a snapshot");
        Ok(())
    }

    /// Deletes a snapshot: the image first (a crash after leaves a metadata file without
    /// its image, removed at the next start), then its metadata. A restore reading the
    /// image still reads it whole: the kernel keeps an unlinked file for its open
    /// descriptors.
    pub fn delete(&self, raw: &str) -> Result<()> {
        let id = SnapshotId::parse(raw).ok_or_else(|| CloudError::not_found("snapshot", raw))?;
        let name = match self.index().by_id.get(id.as_str()) {
            Some(m) => m.name.clone(),
            None => return Err(CloudError::not_found("snapshot", raw)),
        };
        remove(&self.dir.join(id.image()))?;
        {
            let mut index = self.index();
            index.by_id.remove(id.as_str());
            index.by_name.remove(&name);
        }
        remove(&self.dir.join(id.meta()))?;
        sync_dir(&self.dir)
    }
}

/// Releases a name being cut, however the create ends.
struct NameClaim {
    index: Arc<Mutex<Index>>,
    name: String,
}

impl Drop for NameClaim {
    fn drop(&mut self) {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        index.creating.remove(&self.name);
    }
}

fn read_meta(dir: &Path, id: &SnapshotId) -> std::result::Result<SnapshotMeta, String> {
    let path = dir.join(id.meta());
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    #[derive(Deserialize)]
    struct Format {
        format: u32,
    }
    let format = serde_json::from_slice::<Format>(&bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .format;
    if format > FORMAT {
        return Err(format!(
            "{} is in format {format}, written by a newer release of Overcast (this one reads up to {FORMAT})",
            path.display()
        ));
    }
    let meta: SnapshotMeta =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.id != id.as_str() {
        return Err(format!("{} names snapshot {}", path.display(), meta.id));
    }
    Ok(meta)
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CloudError::io(format!("remove {}", path.display()), e)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| CloudError::io(format!("sync {}", dir.display()), e))
}

#[cfg(test)]
mod tests;
