//! Start-up repair: make the store, the disks directory and the kernel's loop devices
//! agree, without deleting anything on the strength of a record that lacks it.
//!
//! - **Files.** A disk file the store does not name is *adopted*: its record is rebuilt
//!   from the metadata file beside it (name, place, parameters; the size is the file's,
//!   the attachments the kernel's), so a lost store loses no disk and a repeated
//!   CreateVolume finds its disk. One shorter than its metadata says, or empty, was never
//!   finished — a create gives a file its size last — hence never acknowledged, and is
//!   removed. One without usable metadata (an older version's file, then its store lost)
//!   is kept under its id and reported abnormal — unless the last `inventory.json` (which
//!   every release writes beside the store) names it: then it is adopted under that name
//!   (its size the file's, its parameters unknown). A metadata file beside no disk describes
//!   nothing and is removed, as is a temporary one; a record's missing metadata file is
//!   written again (an upgrade, or a power cut).
//! - **Loop devices** are matched to disk files by the file's device and inode, which the
//!   kernel keeps whatever path it shows (a replaced controller pod's device shows
//!   `/disks/vol-….img`, its mount of the state directory gone). A disk recorded as
//!   attached (to any node: every machine of the local cloud is this one) keeps the device
//!   that backs its file, or is re-attached when none does
//!   (a reboot); a device backing one of our files that no record claims is detached —
//!   unless it is in use, which is left alone and logged (attach adopts it, delete refuses
//!   the disk while it is bound). One disk, one device.
//! - A record whose file vanished is kept: its condition reports it abnormal.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::id::DiskId;
use super::loopdev;
use super::meta::{self, DiskMeta};
use super::store::{AttachmentRecord, DiskRecord, InventoryDisk, Mutation, Store, INVENTORY};
use overcast_cloud::{CloudError, Result, Zone};

/// The metadata key of a disk kept from a file that nothing explains: its value says why,
/// and the disk's condition repeats it (ListVolumes, ControllerGetVolume), as does the
/// discoverer's orphan report, until someone deletes it.
pub use overcast_cloud::discovery::UNEXPLAINED;

/// What the disks directory holds, by kind.
#[derive(Default)]
struct Files {
    disks: BTreeSet<DiskId>,
    metas: BTreeSet<DiskId>,
    /// Temporary metadata files: never acknowledged.
    leftovers: Vec<PathBuf>,
}

impl Files {
    fn scan(dir: &Path) -> Result<Self> {
        let mut files = Self::default();
        let read = |e| CloudError::io(format!("read {}", dir.display()), e);
        for entry in std::fs::read_dir(dir).map_err(read)? {
            let entry = entry.map_err(read)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                tracing::warn!(file = ?entry.path(), "leaving a file the local cloud did not make");
                continue;
            };
            if let Some(id) = DiskId::from_file_name(name) {
                files.disks.insert(id);
            } else if let Some(id) = name.strip_suffix(".json").and_then(DiskId::parse) {
                files.metas.insert(id);
            } else if name
                .strip_suffix(".json.tmp")
                .and_then(DiskId::parse)
                .is_some()
            {
                files.leftovers.push(entry.path());
            } else {
                tracing::warn!(file = ?entry.path(), "leaving a file the local cloud did not make");
            }
        }
        Ok(files)
    }
}

#[derive(Default, Debug)]
struct Counts {
    adopted: usize,
    unexplained: usize,
    metadata_written: usize,
    reattached: usize,
    devices_adopted: usize,
    detached: usize,
    left_in_use: usize,
    removed: usize,
}

pub async fn run(
    disks_dir: &Path,
    node: &str,
    zone: &Zone,
    store: &Store,
    records: Vec<DiskRecord>,
    inventory: &BTreeMap<String, InventoryDisk>,
) -> Result<Vec<DiskRecord>> {
    let mut records: BTreeMap<String, DiskRecord> =
        records.into_iter().map(|r| (r.id.clone(), r)).collect();
    let files = Files::scan(disks_dir)?;
    let mut n = Counts::default();
    for path in &files.leftovers {
        remove(path)?;
        n.removed += 1;
    }

    // Every bound loop device that backs one of our disk files, by the file's identity.
    let bound = loopdev::bound_devices().map_err(|e| CloudError::io("list loop devices", e))?;
    let ours: Vec<(u32, DiskId)> = bound
        .iter()
        .filter_map(|(index, shown)| {
            let id = DiskId::from_file_name(shown.file_name()?.to_str()?)?;
            loopdev::shows(*index, shown, &disks_dir.join(id.file_name())).then_some((*index, id))
        })
        .collect();
    let devices_of = |id: &DiskId| -> Vec<u32> {
        ours.iter()
            .filter(|(_, d)| d == id)
            .map(|(i, _)| *i)
            .collect()
    };

    // Disk files no record names: adopted, never removed for that alone.
    let mut names: HashSet<String> = records.values().map(|r| r.name.clone()).collect();
    let unrecorded: Vec<&DiskId> = files
        .disks
        .iter()
        .filter(|id| !records.contains_key(id.as_str()))
        .collect();
    for id in unrecorded {
        let path = disks_dir.join(id.file_name());
        let file = std::fs::metadata(&path)
            .map_err(|e| CloudError::io(format!("stat {}", path.display()), e))?;
        let devices = devices_of(id);
        let attachments = pick_device(&devices)
            .map(|index| AttachmentRecord {
                node: node.to_owned(),
                loop_index: index,
                readonly: loopdev::is_read_only(index).unwrap_or(false),
            })
            .into_iter()
            .collect();
        let found = meta::read(disks_dir, id);
        // A create gives the file its size last: one shorter than its metadata says (or
        // empty) never finished, so it was never acknowledged, never bound, and holds
        // nothing anyone wrote.
        let unfinished = match &found {
            Ok(Some(m)) => file.len() < m.size_bytes,
            _ => file.len() == 0,
        };
        if unfinished && devices.is_empty() {
            remove(&path)?;
            meta::remove(disks_dir, id)?;
            n.removed += 1;
            continue;
        }
        let listed = match &found {
            Ok(None) => inventory
                .get(id.as_str())
                .filter(|d| !names.contains(&d.name)),
            _ => None,
        };
        let record = match found {
            Ok(Some(m)) if !names.contains(&m.name) && !unfinished => {
                tracing::warn!(disk.id = %id, disk.name = %m.name, "adopted a disk the store did not hold, from its metadata file");
                n.adopted += 1;
                m.into_record(file.len(), attachments)
            }
            Ok(None) if listed.is_some() => {
                let d = listed.expect("matched");
                tracing::warn!(disk.id = %id, disk.name = %d.name, "adopted a disk the store did not hold and no metadata file described, from the last inventory (its parameters unknown: none)");
                n.adopted += 1;
                DiskRecord {
                    id: id.as_str().to_owned(),
                    name: d.name.clone(),
                    size_bytes: file.len(),
                    zone: zone.clone(),
                    thick: file.blocks() * 512 >= file.len(),
                    parameters: BTreeMap::new(),
                    metadata: d.metadata.clone(),
                    created_unix: u64::try_from(file.mtime()).unwrap_or(0),
                    attachments,
                    source: None,
                }
            }
            found => {
                let why = match found {
                    Ok(Some(m)) if unfinished => format!(
                        "a disk of CSI name {:?} whose create never gave it its size, yet bound to a loop device",
                        m.name
                    ),
                    Ok(Some(m)) => format!(
                        "a second disk of CSI name {:?}, which another disk holds: a create interrupted before its record, whose retry made the other",
                        m.name
                    ),
                    Ok(None) => "a disk file with no record and no metadata".to_owned(),
                    Err(e) => format!("a disk file with no record and unreadable metadata ({e})"),
                };
                tracing::warn!(disk.id = %id, reason = %why, "keeping a disk nothing explains; delete it by id once nothing uses it");
                n.unexplained += 1;
                unexplained(id, zone, &file, why, attachments)
            }
        };
        names.insert(record.name.clone());
        store.commit(Mutation::Put(record.clone())).await?;
        records.insert(record.id.clone(), record);
    }

    // Metadata files: one for every recorded disk, none for what is gone.
    let mut wrote = false;
    for record in records.values() {
        let Some(id) = DiskId::parse(&record.id) else {
            continue;
        };
        let current = meta::read(disks_dir, &id);
        // A newer release's file is that release's to read: left as it is.
        if !matches!(&current, Ok(Some(m)) if m.matches(record))
            && !matches!(&current, Err(e) if e.newer)
            && !record.metadata.contains_key(UNEXPLAINED)
            && disks_dir.join(id.file_name()).exists()
        {
            meta::write(disks_dir, &id, &DiskMeta::of(record))?;
            n.metadata_written += 1;
            wrote = true;
        }
    }
    for id in files
        .metas
        .iter()
        .filter(|id| !files.disks.contains(id) && !records.contains_key(id.as_str()))
    {
        meta::remove(disks_dir, id)?;
        n.removed += 1;
    }
    if wrote || n.removed > 0 {
        meta::sync_dir(disks_dir)?;
    }

    // Attachments: the recorded device if it still backs the file, else one that does,
    // else a new one.
    let mut keep: HashSet<u32> = HashSet::new();
    for record in records.values_mut() {
        let Some(id) = DiskId::parse(&record.id) else {
            continue;
        };
        let path = disks_dir.join(id.file_name());
        let mut changed = false;
        // Every machine of the local cloud is this one: each attachment, whichever node
        // it names, is a device of this kernel.
        for a in record.attachments.iter_mut() {
            let candidates: Vec<u32> = devices_of(&id)
                .into_iter()
                .filter(|i| !keep.contains(i))
                .collect();
            if candidates.contains(&a.loop_index) {
                // A file bound twice (688adc9's controller, restarted under an attached
                // disk, bound it again: it matched devices by path alone) is two caches of
                // one disk: the device in use — mounted, the one kubelet staged — is kept
                // and recorded, and the other, no longer kept, is detached below.
                if !loopdev::held(a.loop_index) {
                    if let Some(used) = candidates
                        .iter()
                        .copied()
                        .find(|i| *i != a.loop_index && loopdev::held(*i))
                    {
                        tracing::warn!(disk.id = %id, recorded = a.loop_index, in_use = used, "a disk bound to two loop devices: keeping the one in use");
                        a.loop_index = used;
                        n.devices_adopted += 1;
                        changed = true;
                    }
                }
                keep.insert(a.loop_index);
                continue;
            }
            if let Some(index) = pick_device(&candidates) {
                a.loop_index = index;
                n.devices_adopted += 1;
            } else if path.exists() {
                a.loop_index = loopdev::attach(&path, a.readonly, id.as_str())
                    .map_err(|e| CloudError::io(format!("re-attach {}", path.display()), e))?;
                n.reattached += 1;
            } else {
                tracing::warn!(disk.id = %id, "disk recorded as attached but its backing file is missing");
                continue;
            }
            keep.insert(a.loop_index);
            changed = true;
        }
        if changed {
            store.commit(Mutation::Put(record.clone())).await?;
        }
    }

    for (index, id) in &ours {
        if keep.contains(index) {
            continue;
        }
        let path = disks_dir.join(id.file_name());
        match loopdev::detach(*index, &path) {
            Ok(true) => n.detached += 1,
            Ok(false) => {}
            // Still mounted somewhere: leave it. Attach adopts it and delete refuses
            // the disk while it is bound, so it can neither be doubled nor lost.
            Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => {
                tracing::warn!(disk.id = %id, error = %e, "leaving an unrecorded loop device that is in use");
                n.left_in_use += 1;
            }
            Err(e) => return Err(CloudError::io(format!("detach /dev/loop{index}"), e)),
        }
    }

    let level_warn = n.adopted + n.unexplained > 0;
    if level_warn {
        tracing::warn!(disks = records.len(), counts = ?n, "local cloud reconciled: disks adopted from the disks directory");
    } else {
        tracing::info!(
            disks = records.len(),
            reattached = n.reattached,
            adopted = n.devices_adopted,
            detached = n.detached,
            left_in_use = n.left_in_use,
            removed_files = n.removed,
            metadata_written = n.metadata_written,
            "local cloud reconciled"
        );
    }
    Ok(records.into_values().collect())
}

/// Of the devices backing one file, the one to keep: one in use (a mount holds it) over
/// an idle one, so the mount's device is the one recorded and the idle one detached.
fn pick_device(devices: &[u32]) -> Option<u32> {
    devices
        .iter()
        .copied()
        .find(|i| loopdev::held(*i))
        .or_else(|| devices.first().copied())
}

/// The record of a disk file nothing explains, under its id (its CSI name is unknown).
fn unexplained(
    id: &DiskId,
    zone: &Zone,
    file: &std::fs::Metadata,
    why: String,
    attachments: Vec<AttachmentRecord>,
) -> DiskRecord {
    DiskRecord {
        id: id.as_str().to_owned(),
        name: id.as_str().to_owned(),
        size_bytes: file.len(),
        zone: zone.clone(),
        thick: file.blocks() * 512 >= file.len(),
        parameters: BTreeMap::new(),
        metadata: [(UNEXPLAINED.to_owned(), why)].into(),
        created_unix: u64::try_from(file.mtime()).unwrap_or(0),
        attachments,
        source: None,
    }
}

/// What the last inventory said each disk was (`inventory.json`, which every release
/// writes beside the store, at most a second behind it), by disk id: the names of the
/// disks a release before the metadata files made, when the store is lost too — an upgrade
/// from such a release whose store did not come along. Empty when there is none or it
/// does not parse (said: it is only ever a second source of names). Read before the store
/// is opened, whose writer replaces the file at once.
pub fn read_inventory(state_dir: &Path) -> BTreeMap<String, InventoryDisk> {
    let path = state_dir.join(INVENTORY);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return BTreeMap::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not read the last inventory");
            return BTreeMap::new();
        }
    };
    match serde_json::from_slice::<Vec<InventoryDisk>>(&bytes) {
        Ok(disks) => disks.into_iter().map(|d| (d.id.clone(), d)).collect(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the last inventory does not parse: not used");
            BTreeMap::new()
        }
    }
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CloudError::io(format!("remove {}", path.display()), e)),
    }
}
