//! What this node staged and published, per volume, kept in a small JSON file so every
//! retry and every stats call is answered from recorded state — also after a restart.
//! It is also the node's claim of ownership: unstage and unpublish touch only paths
//! recorded here for that volume, and a path is recorded *before* it is mounted, so a
//! crash between the two still leaves the mount findable.
//! Written whole to a temporary file, synced, renamed, and the directory synced: a crash
//! or a power cut leaves the old or the new file, never half of one, and an answered
//! call is on disk.
//!
//! The file is a convenience, never the only truth: when it is gone the node calls work
//! from what is mounted (`owned.rs`), and a file that does not parse is set aside beside
//! it (kept for a human) rather than stop the plugin from serving.

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
    /// A format of this volume's disk begun and not known to have finished: recorded
    /// (synced) before mkfs starts, cleared once it has succeeded. Its data is ours, so a
    /// later stage formats it again instead of refusing a disk that holds half a
    /// filesystem. Kept when the stage fails, since mkfs may have written part of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formatting: Option<FormatIntent>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormatIntent {
    pub fs_type: String,
    /// The device mkfs was given, for a human reading the file.
    pub device: PathBuf,
    pub since_unix: u64,
}

/// Where a damaged records file was put, and why it did not parse.
#[derive(Debug, Clone)]
pub struct SetAside {
    pub path: PathBuf,
    pub error: String,
}

pub struct NodeState {
    file: PathBuf,
    volumes: Mutex<BTreeMap<String, NodeVolume>>,
    set_aside: Option<SetAside>,
}

/// Whether a write failed because the node's state directory is read-only (a read-only
/// mount of it): what the previous release started with, so a start goes on.
fn is_read_only(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::ReadOnlyFilesystem
}

/// `Ok(None)` in place of a read-only directory's refusal of `what`, said once here.
fn unless_read_only<T>(
    done: std::io::Result<T>,
    dir: &Path,
    what: &str,
) -> std::io::Result<Option<T>> {
    match done {
        Ok(t) => Ok(Some(t)),
        Err(e) if is_read_only(&e) => {
            tracing::warn!(
                dir = %dir.display(),
                what,
                "the node's state directory is read-only: its records are read, not \
                 written; unstage and unpublish are served, stage and publish refused"
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Whether `new` only forgets what `old` recorded (an unstage, an unpublish): safe to
/// keep in memory alone when the directory is read-only, since what is mounted is the
/// truth the calls fall back on (`owned.rs`). A stage or publish records before it
/// mounts, and may not go unrecorded.
fn only_forgets(old: Option<&NodeVolume>, new: Option<&NodeVolume>) -> bool {
    let Some(new) = new else { return true };
    let Some(old) = old else { return false };
    new.targets
        .iter()
        .all(|(t, ro)| old.targets.get(t) == Some(ro))
        && (new.staging.is_none()
            || (new.staging == old.staging
                && new.device == old.device
                && new.block == old.block
                && new.fs_type == old.fs_type))
        && (new.formatting.is_none() || new.formatting == old.formatting)
}

impl NodeState {
    /// Reads the records in `dir`. A file that does not parse (a disk that lost a write,
    /// a hand edit) is renamed to `volumes.json.damaged-<unix time>` and the node starts
    /// with no records: its calls then work from what is mounted. A crash-looping plugin
    /// would serve nothing at all. A file of a newer format is set aside the same way, as
    /// `volumes.json.format-<n>` (that release's to read again), and a newer `FORMAT`
    /// with no records beside it as `FORMAT.format-<n>`; one of an earlier format is
    /// written again as [`FORMAT`] at once.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let file = dir.join("volumes.json");
        let format_file = dir.join("FORMAT");
        let declared = declared_format(&format_file);
        let mut set_aside = None;
        let volumes = match std::fs::read(&file) {
            Ok(bytes) => match parse(&bytes) {
                // Said by `FORMAT`, or by the file itself (an envelope of a format after 2).
                parsed
                    if declared.is_some_and(|d| d > FORMAT)
                        || matches!(parsed, Parsed::Newer(_)) =>
                {
                    let newer = match parsed {
                        Parsed::Newer(n) => n,
                        _ => declared.unwrap_or_default(),
                    };
                    let path = dir.join(format!("volumes.json.format-{newer}"));
                    let error = format!(
                        "format {newer}, written by a newer release of Overcast (this release \
                         reads up to {FORMAT}); kept for that release"
                    );
                    set_aside = unless_read_only(put_aside(&file, path, error), dir, "set aside")?;
                    BTreeMap::new()
                }
                Parsed::Records(volumes, 1) if declared == Some(FORMAT) => volumes,
                Parsed::Records(volumes, shape) => {
                    // The map alone without `FORMAT` is format 1; the envelope, 2.
                    let older = if shape == 1 {
                        declared.unwrap_or(1)
                    } else {
                        shape
                    };
                    let written = unless_read_only(
                        write_durably(&file, &encode(&volumes)?),
                        dir,
                        "bring the records forward",
                    )?;
                    tracing::info!(
                        written = written.is_some(),
                        file = %file.display(),
                        from = older,
                        to = FORMAT,
                        volumes = volumes.len(),
                        "the node's records brought forward to this release's format"
                    );
                    volumes
                }
                Parsed::Newer(_) => unreachable!("a newer format is set aside above"),
                Parsed::Damaged(error) => {
                    let unix = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0);
                    let path = dir.join(format!("volumes.json.damaged-{unix}"));
                    set_aside = unless_read_only(put_aside(&file, path, error), dir, "set aside")?;
                    BTreeMap::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A newer release's `FORMAT` with no records beside it (it keeps them
                // elsewhere, or had none): its declaration is kept for it, not
                // overwritten unsaid.
                if let Some(newer) = declared.filter(|d| *d > FORMAT) {
                    let path = dir.join(format!("FORMAT.format-{newer}"));
                    let error = format!(
                        "FORMAT says {newer}, written by a newer release of Overcast (this \
                         release reads up to {FORMAT}), and there is no volumes.json; kept \
                         for that release"
                    );
                    set_aside =
                        unless_read_only(put_aside(&format_file, path, error), dir, "set aside")?;
                }
                BTreeMap::new()
            }
            Err(e) => return Err(e),
        };
        // After the records: a crash between the two leaves records an earlier format
        // describes as well (the same map), read again at the next start.
        if declared != Some(FORMAT) {
            unless_read_only(
                write_durably(
                    &format_file,
                    format!("{FORMAT_MAGIC} {FORMAT}\n").as_bytes(),
                ),
                dir,
                "write FORMAT",
            )?;
        }
        Ok(Self {
            file,
            volumes: Mutex::new(volumes),
            set_aside,
        })
    }

    /// The damaged records file this start set aside, if it did.
    pub fn set_aside(&self) -> Option<&SetAside> {
        self.set_aside.as_ref()
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
        if entry.staging.is_none() && entry.targets.is_empty() && entry.formatting.is_none() {
            next.remove(volume_id);
        } else {
            next.insert(volume_id.to_owned(), entry);
        }
        match write_durably(&self.file, &encode(&next)?) {
            Ok(()) => {}
            Err(e)
                if is_read_only(&e)
                    && only_forgets(volumes.get(volume_id), next.get(volume_id)) =>
            {
                tracing::warn!(
                    volume = volume_id,
                    file = %self.file.display(),
                    "the node's state directory is read-only: what was unmounted is \
                     forgotten in memory only"
                );
            }
            Err(e) if is_read_only(&e) => {
                let dir = self.file.parent().unwrap_or(Path::new("."));
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "the node's state directory {} is read-only: a stage or publish \
                         is recorded before it mounts, so none is made on this node ({e})",
                        dir.display()
                    ),
                ));
            }
            Err(e) => return Err(e),
        }
        *volumes = next;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeVolume>> {
        self.volumes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The format of the node's records this release writes: `volumes.json` the map of
/// records (`{<volume id>: <record>}`) and, beside it, `FORMAT` saying
/// `overcast-node-state 3`. The map is the one every release has read: 688adc9's node
/// plugin (format 1: the map, no `FORMAT`) exits on anything else, so a downgrade to it
/// would leave the node serving nothing (the real node's downgrade test found that
/// with format 2); it ignores `FORMAT`. Format 2, `{"format": 2, "volumes": <the map>}`,
/// was written by builds of this branch before: read, and written again as 3.
pub const FORMAT: u64 = 3;
/// The first word of `FORMAT`.
const FORMAT_MAGIC: &str = "overcast-node-state";

/// The format `FORMAT` declares: `None` when there is no such file (format 1, or a crash
/// before it was written) or it says something else (rewritten; the records are read by
/// their shape).
fn declared_format(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let declared = text
        .trim()
        .strip_prefix(FORMAT_MAGIC)
        .and_then(|n| n.trim().parse().ok());
    if declared.is_none() {
        tracing::warn!(file = %file.display(), content = %text.trim(), "the node's format file is not ours: written again");
    }
    declared
}

enum Parsed {
    /// The records, and the format they were in.
    Records(BTreeMap<String, NodeVolume>, u64),
    Newer(u64),
    Damaged(String),
}

fn parse(bytes: &[u8]) -> Parsed {
    #[derive(Deserialize)]
    struct Envelope {
        volumes: BTreeMap<String, NodeVolume>,
    }
    let value: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return Parsed::Damaged(e.to_string()),
    };
    // A map whose volume is named "format" holds a record there, not a number.
    match value.get("format").and_then(serde_json::Value::as_u64) {
        Some(format) if format > 2 => Parsed::Newer(format),
        Some(_) => match serde_json::from_value::<Envelope>(value) {
            Ok(e) => Parsed::Records(e.volumes, 2),
            Err(e) => Parsed::Damaged(e.to_string()),
        },
        None => match serde_json::from_value(value) {
            Ok(volumes) => Parsed::Records(volumes, 1),
            Err(e) => Parsed::Damaged(e.to_string()),
        },
    }
}

fn encode(volumes: &BTreeMap<String, NodeVolume>) -> std::io::Result<Vec<u8>> {
    serde_json::to_vec_pretty(volumes).map_err(std::io::Error::other)
}

/// Renames the records file to `path`, kept for a human (or the release that wrote it),
/// and says so.
fn put_aside(file: &Path, path: PathBuf, error: String) -> std::io::Result<SetAside> {
    std::fs::rename(file, &path)?;
    std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()?;
    tracing::error!(
        file = %file.display(),
        kept_as = %path.display(),
        error = %error,
        "the node's records cannot be read: set aside; serving from what is mounted"
    );
    Ok(SetAside { path, error })
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

    #[test]
    fn a_format_intent_keeps_the_record_until_it_is_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        let intent = FormatIntent {
            fs_type: "ext4".into(),
            device: "/dev/loop3".into(),
            since_unix: 1,
        };
        state
            .update("v", |v| v.formatting = Some(intent.clone()))
            .unwrap();
        let again = NodeState::open(dir.path()).unwrap();
        assert_eq!(again.get("v").unwrap().formatting, Some(intent));
        again.update("v", |v| v.formatting = None).unwrap();
        assert_eq!(NodeState::open(dir.path()).unwrap().get("v"), None);
    }

    #[test]
    fn the_file_says_its_format_and_a_newer_one_is_set_aside_for_that_release() {
        let dir = tempfile::tempdir().unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        state
            .update("v", |v| v.staging = Some("/s".into()))
            .unwrap();
        let file = dir.path().join("volumes.json");
        let format = dir.path().join("FORMAT");
        assert_eq!(
            std::fs::read_to_string(&format).unwrap(),
            "overcast-node-state 3\n"
        );
        // The map every release reads, 688adc9's node plugin among them (it exits on
        // any other shape): that release's type, a map of records, parses it.
        let written: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(written["v"]["staging"], "/s");
        // A newer release says so in `FORMAT` ...
        std::fs::write(&format, "overcast-node-state 4\n").unwrap();
        let newer = br#"{"v": {"mounts": []}}"#;
        std::fs::write(&file, newer).unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        assert_eq!(state.get("v"), None);
        let aside = state.set_aside().expect("set aside").clone();
        assert_eq!(aside.path, dir.path().join("volumes.json.format-4"));
        assert!(
            aside.error.contains("written by a newer release"),
            "{}",
            aside.error
        );
        assert_eq!(std::fs::read(&aside.path).unwrap(), newer, "kept whole");
        assert_eq!(
            std::fs::read_to_string(&format).unwrap(),
            "overcast-node-state 3\n",
            "what is there now is this release's"
        );
        // A newer release's `FORMAT` with no records beside it is kept for that release,
        // and said, not overwritten (the records were set aside above).
        assert!(!file.exists());
        std::fs::write(&format, "overcast-node-state 7\n").unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        let aside = state.set_aside().expect("said").clone();
        assert_eq!(aside.path, dir.path().join("FORMAT.format-7"));
        assert!(aside.error.contains("no volumes.json"), "{}", aside.error);
        assert_eq!(
            std::fs::read_to_string(&aside.path).unwrap(),
            "overcast-node-state 7\n"
        );
        assert_eq!(
            std::fs::read_to_string(&format).unwrap(),
            "overcast-node-state 3\n"
        );
        // ... or in an envelope after this branch's format 2.
        let envelope = br#"{"format": 5, "volumes": {"v": {"mounts": []}}}"#;
        std::fs::write(&file, envelope).unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        assert_eq!(
            state.set_aside().expect("set aside").path,
            dir.path().join("volumes.json.format-5")
        );
    }

    #[test]
    fn format_2_s_envelope_is_read_and_written_again_as_the_map() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("volumes.json");
        std::fs::write(
            &file,
            br#"{"format": 2, "volumes": {"v": {"device": null, "staging": "/s", "block": false, "fs_type": "ext4", "targets": {}}}}"#,
        )
        .unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        assert!(state.set_aside().is_none());
        assert_eq!(state.get("v").unwrap().staging, Some("/s".into()));
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(written["v"]["staging"], "/s", "{written}");
        assert!(written.get("format").is_none(), "{written}");
    }

    #[test]
    fn a_map_whose_volume_is_named_format_is_format_1() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("volumes.json");
        std::fs::write(
            &file,
            br#"{"format": {"device": null, "staging": "/s", "block": false, "fs_type": "ext4", "targets": {}}}"#,
        )
        .unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        assert!(state.set_aside().is_none());
        assert_eq!(state.get("format").unwrap().staging, Some("/s".into()));
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(written["format"]["staging"], "/s", "still the map");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("FORMAT")).unwrap(),
            "overcast-node-state 3\n",
            "brought forward at start"
        );
    }

    #[test]
    fn a_damaged_file_is_set_aside_and_the_node_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("volumes.json"), b"{\"v\": {\"staging\": ").unwrap();
        let state = NodeState::open(dir.path()).unwrap();
        let aside = state.set_aside().expect("set aside").clone();
        assert_eq!(state.get("v"), None);
        assert_eq!(
            std::fs::read(&aside.path).unwrap(),
            b"{\"v\": {\"staging\": ",
            "kept as it was, for a human"
        );
        assert!(!dir.path().join("volumes.json").exists());
        state
            .update("w", |v| v.staging = Some("/s".into()))
            .unwrap();
        let again = NodeState::open(dir.path()).unwrap();
        assert!(again.set_aside().is_none());
        assert!(again.get("w").is_some());
    }
}
