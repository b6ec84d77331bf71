//! Start-up repair: make the kernel's loop devices and the disks directory agree with
//! the store, which holds exactly what was acknowledged.
//!
//! - a disk recorded as attached here is re-attached if its device is gone (a reboot),
//!   or adopts the device that still backs its file under another number;
//! - a loop device backing one of our files that no record claims is detached (an
//!   attach that crashed before it was recorded, or a detach that was) — unless it is in
//!   use, which is left alone and logged: attach adopts it, delete refuses the disk;
//! - a file no record names is removed (a create that crashed before it was recorded,
//!   or a delete after it was);
//! - a record whose file vanished is kept: its condition reports it abnormal.

use std::collections::HashSet;
use std::path::Path;

use super::id::DiskId;
use super::loopdev;
use super::store::{DiskRecord, Mutation, Store};
use overcast_cloud::{CloudError, Result};

pub async fn run(
    disks_dir: &Path,
    node: &str,
    store: &Store,
    mut records: Vec<DiskRecord>,
) -> Result<Vec<DiskRecord>> {
    let bound = loopdev::bound_devices().map_err(|e| CloudError::io("list loop devices", e))?;
    let ours: Vec<(u32, DiskId)> = bound
        .iter()
        .filter(|(_, file)| file.parent() == Some(disks_dir))
        .filter_map(|(i, file)| Some((*i, DiskId::from_file_name(file.file_name()?.to_str()?)?)))
        .collect();

    let mut keep: HashSet<u32> = HashSet::new();
    let (mut reattached, mut adopted, mut detached, mut busy, mut removed) = (0, 0, 0, 0, 0);
    for record in &mut records {
        let Some(id) = DiskId::parse(&record.id) else {
            continue;
        };
        let path = disks_dir.join(id.file_name());
        let mut changed = false;
        for a in record.attachments.iter_mut().filter(|a| a.node == node) {
            if ours.iter().any(|(i, d)| *i == a.loop_index && *d == id) {
                keep.insert(a.loop_index);
                continue;
            }
            if let Some((i, _)) = ours.iter().find(|(i, d)| *d == id && !keep.contains(i)) {
                a.loop_index = *i;
                adopted += 1;
            } else if path.exists() {
                a.loop_index = loopdev::attach(&path, a.readonly, id.as_str())
                    .map_err(|e| CloudError::io(format!("re-attach {}", path.display()), e))?;
                reattached += 1;
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
        if !keep.contains(index) {
            let path = disks_dir.join(id.file_name());
            match loopdev::detach(*index, &path) {
                Ok(true) => detached += 1,
                Ok(false) => {}
                // Still mounted somewhere: leave it. Attach adopts it and delete refuses
                // the disk while it is bound, so it can neither be doubled nor lost.
                Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => {
                    tracing::warn!(disk.id = %id, error = %e, "leaving an unrecorded loop device that is in use");
                    busy += 1;
                }
                Err(e) => return Err(CloudError::io(format!("detach /dev/loop{index}"), e)),
            }
        }
    }

    let known: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let entries = std::fs::read_dir(disks_dir)
        .map_err(|e| CloudError::io(format!("read {}", disks_dir.display()), e))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| CloudError::io(format!("read {}", disks_dir.display()), e))?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(DiskId::from_file_name) else {
            tracing::warn!(file = ?entry.path(), "leaving a file the local cloud did not make");
            continue;
        };
        if !known.contains(id.as_str()) {
            std::fs::remove_file(entry.path())
                .map_err(|e| CloudError::io(format!("remove {}", entry.path().display()), e))?;
            removed += 1;
        }
    }
    tracing::info!(
        disks = records.len(),
        reattached,
        adopted,
        detached,
        left_in_use = busy,
        removed_files = removed,
        "local cloud reconciled"
    );
    Ok(records)
}
