//! What a disk is, kept with the disk itself: `vol-<hex>.json` beside `vol-<hex>.img`
//! holds the CSI name, place, parameters and metadata its create was asked for.
//!
//! The store is the record of what was acknowledged; this file is what lets that record
//! be rebuilt when the store is lost (a node rebuilt from a backup of `disks/` only, a
//! store deleted by hand). A create writes it before it makes the disk's file, and gives
//! that file its size last, so a disk file of ours that has its size has its metadata; a
//! crash in between leaves a file shorter than the metadata says (or none), which was
//! never acknowledged. Nothing in it changes after the create: the size is the file's,
//! the attachments the kernel's.
//!
//! A file beside the disk, not an extended attribute of it: measured in the same runs,
//! an attribute (which ext4 keeps in a block of its own, allocated and journaled with
//! every create and freed with every delete) cost 11–28 % of the CreateVolume+DeleteVolume
//! pairs a second, a file beside 4–14 % (BENCHMARKS.md, issue 43); and a file works on
//! every filesystem.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::id::DiskId;
use super::store::{AttachmentRecord, DiskRecord, SourceRecord};
use overcast_cloud::{CloudError, Result, Zone};

/// The format of the metadata files this release writes and reads. Format 1 is every
/// file written since they came (0d69d80), which said no format: one without the field is
/// format 1. A newer format is not read as this one (its disk is kept and reported, as
/// one without metadata, until that release is back).
pub const FORMAT: u32 = 1;

fn format_1() -> u32 {
    1
}

/// The facts of a disk that only its create knew.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskMeta {
    #[serde(default = "format_1")]
    pub format: u32,
    pub id: String,
    pub name: String,
    /// The size it was made with (the file's length is the size it has now).
    pub size_bytes: u64,
    pub zone: Zone,
    pub thick: bool,
    pub parameters: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub created_unix: u64,
    /// The disk or snapshot its content was copied from; absent for a blank disk (and in
    /// every file of the releases before snapshots: still format 1, which an older
    /// release reads, ignoring it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRecord>,
}

impl DiskMeta {
    pub fn of(record: &DiskRecord) -> Self {
        Self {
            format: FORMAT,
            id: record.id.clone(),
            name: record.name.clone(),
            size_bytes: record.size_bytes,
            zone: record.zone.clone(),
            thick: record.thick,
            parameters: record.parameters.clone(),
            metadata: record.metadata.clone(),
            created_unix: record.created_unix,
            source: record.source.clone(),
        }
    }

    /// The record this disk had, with the size and attachments found on the machine.
    pub fn into_record(self, size_bytes: u64, attachments: Vec<AttachmentRecord>) -> DiskRecord {
        DiskRecord {
            id: self.id,
            name: self.name,
            size_bytes,
            zone: self.zone,
            thick: self.thick,
            parameters: self.parameters,
            metadata: self.metadata,
            created_unix: self.created_unix,
            attachments,
            source: self.source,
        }
    }

    /// Whether `record` says the same about the disk (its size and attachments aside,
    /// which change after the create).
    pub fn matches(&self, record: &DiskRecord) -> bool {
        let mut of = Self::of(record);
        of.size_bytes = self.size_bytes;
        *self == of
    }

    fn encode(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|e| {
            CloudError::Internal(format!("encode the metadata of disk {}: {e}", self.id))
        })
    }
}

pub fn path(disks_dir: &Path, id: &DiskId) -> PathBuf {
    disks_dir.join(id.meta_file_name())
}

/// Writes the metadata file of a disk being made, before its disk file exists. No
/// temporary file: a crash that leaves this one torn leaves no disk file, or one with
/// no size, and the next start removes both.
///
/// Not synced: it matters only when the store is lost, and the store's commit that
/// follows a create (an fdatasync, which commits the filesystem's journal with it) is
/// what makes the create durable. A power cut that loses it but keeps the record has it
/// written again from the record at the next start; one that loses both loses a create
/// that was never acknowledged.
pub fn create(disks_dir: &Path, id: &DiskId, meta: &DiskMeta) -> Result<()> {
    let target = path(disks_dir, id);
    let bytes = meta.encode()?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&target)
        .and_then(|mut f| f.write_all(&bytes))
        .map_err(|e| CloudError::io(format!("write {}", target.display()), e))
}

/// Writes the metadata file of an existing disk again (the start-up repair: an upgrade
/// from a version that kept none, or one a power cut lost), so that a crash leaves the
/// old one or the new one, never half of one.
pub fn write(disks_dir: &Path, id: &DiskId, meta: &DiskMeta) -> Result<()> {
    let target = path(disks_dir, id);
    let tmp = disks_dir.join(format!("{}.tmp", id.meta_file_name()));
    let bytes = meta.encode()?;
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(&bytes))
        .and_then(|()| std::fs::rename(&tmp, &target));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CloudError::io(format!("write {}", target.display()), e)
    })
}

/// Why a metadata file could not be used.
#[derive(Debug)]
pub struct Unusable {
    pub why: String,
    /// Written by a newer release: never written over by this one.
    pub newer: bool,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl From<String> for Unusable {
    fn from(why: String) -> Self {
        Self { why, newer: false }
    }
}

/// The metadata file of `id`: `Ok(None)` when there is none; an error when it cannot be
/// read, does not parse or is of a newer format (it is then kept, for a human or that
/// release, and the disk is treated as one without metadata).
pub fn read(disks_dir: &Path, id: &DiskId) -> std::result::Result<Option<DiskMeta>, Unusable> {
    let path = path(disks_dir, id);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display()).into()),
    };
    // The format first: a newer one may not even parse as this one.
    #[derive(Deserialize)]
    struct Format {
        #[serde(default = "format_1")]
        format: u32,
    }
    let format = serde_json::from_slice::<Format>(&bytes)
        .map(|f| f.format)
        .unwrap_or(FORMAT);
    if format > FORMAT {
        return Err(Unusable {
            why: format!(
                "{} is in metadata format {format}, written by a newer release of Overcast \
                 (this release reads up to {FORMAT}): run that release again to use it",
                path.display()
            ),
            newer: true,
        });
    }
    let meta: DiskMeta = serde_json::from_slice(&bytes)
        .map_err(|e| Unusable::from(format!("{}: {e}", path.display())))?;
    if meta.id != id.as_str() {
        return Err(format!("{} names disk {}", path.display(), meta.id).into());
    }
    Ok(Some(meta))
}

/// Removes the metadata file of `id`; one already gone is success.
pub fn remove(disks_dir: &Path, id: &DiskId) -> Result<()> {
    let path = path(disks_dir, id);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CloudError::io(format!("remove {}", path.display()), e)),
    }
}

/// Makes the directory's entries (new names, removals) durable: after the start-up
/// repair, which changes them without a store commit to follow.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| CloudError::io(format!("sync {}", dir.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &DiskId) -> DiskRecord {
        DiskRecord {
            id: id.as_str().into(),
            name: "pvc-1".into(),
            size_bytes: 1 << 20,
            zone: Zone {
                region: "r".into(),
                zone: "z".into(),
            },
            thick: false,
            parameters: [("thickProvisioning".into(), "false".into())].into(),
            metadata: [("csi.storage.k8s.io/pvc/name".into(), "data".into())].into(),
            created_unix: 7,
            attachments: vec![],
            source: None,
        }
    }

    #[test]
    fn written_metadata_reads_back_and_rebuilds_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let id = DiskId::generate();
        let r = record(&id);
        assert_eq!(read(dir.path(), &id).unwrap(), None);
        create(dir.path(), &id, &DiskMeta::of(&r)).unwrap();
        assert!(
            create(dir.path(), &id, &DiskMeta::of(&r)).is_err(),
            "a create never writes over another disk's file"
        );
        let meta = read(dir.path(), &id).unwrap().unwrap();
        assert!(meta.matches(&r));
        let mut grown = r.clone();
        grown.size_bytes = 4 << 20;
        assert!(meta.matches(&grown), "a grown disk is the same disk");
        assert_eq!(meta.into_record(r.size_bytes, vec![]), r);
        write(dir.path(), &id, &DiskMeta::of(&grown)).unwrap();
        assert_eq!(read(dir.path(), &id).unwrap().unwrap().size_bytes, 4 << 20);
        assert!(
            !dir.path()
                .join(format!("{}.tmp", id.meta_file_name()))
                .exists(),
            "no temporary file is left"
        );
        remove(dir.path(), &id).unwrap();
        remove(dir.path(), &id).unwrap();
        assert_eq!(read(dir.path(), &id).unwrap(), None);
    }

    #[test]
    fn a_damaged_or_foreign_file_is_an_error_not_an_absence() {
        let dir = tempfile::tempdir().unwrap();
        let id = DiskId::generate();
        std::fs::write(path(dir.path(), &id), b"{\"id\": ").unwrap();
        assert!(read(dir.path(), &id).is_err());
        let other = DiskId::generate();
        write(dir.path(), &other, &DiskMeta::of(&record(&other))).unwrap();
        std::fs::rename(path(dir.path(), &other), path(dir.path(), &id)).unwrap();
        let err = read(dir.path(), &id).unwrap_err();
        assert!(err.why.contains(other.as_str()), "{err}");
        assert!(!err.newer);
    }

    #[test]
    fn a_file_says_its_format_and_a_newer_one_is_not_read_as_this_one() {
        let dir = tempfile::tempdir().unwrap();
        let id = DiskId::generate();
        write(dir.path(), &id, &DiskMeta::of(&record(&id))).unwrap();
        let text: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path(dir.path(), &id)).unwrap()).unwrap();
        assert_eq!(text["format"], 1);
        // A newer release's file, of a shape this one may not even parse.
        std::fs::write(
            path(dir.path(), &id),
            format!("{{\"format\": 2, \"id\": \"{id}\", \"disk\": {{}}}}"),
        )
        .unwrap();
        let err = read(dir.path(), &id).unwrap_err();
        assert!(err.newer);
        assert!(
            err.why
                .contains("metadata format 2, written by a newer release"),
            "{err}"
        );
    }
}
