//! The inventory file: every disk the store holds, for the processes that cannot open
//! the store (the controller holds it exclusively).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{DiskRecord, Shared};
use crate::store_error;
use overcast_cloud::{CloudError, Result};

/// The inventory other processes read (the discoverer's orphan report): the store
/// itself is held open exclusively by the controller.
pub const INVENTORY: &str = "inventory.json";

/// One disk in the inventory file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryDisk {
    pub id: String,
    pub name: String,
    pub size_bytes: u64,
    pub metadata: BTreeMap<String, String>,
}

/// Rewrites the inventory at most once a second, when something changed, until the
/// store is closed.
pub(super) fn inventory_loop(shared: Weak<Shared>, path: &Path) {
    loop {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = write_inventory(&shared, path) {
                tracing::warn!(error = %e, path = %path.display(), "could not write the disk inventory");
                shared.dirty.store(true, Ordering::Release);
            }
        }
        drop(shared);
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn write_inventory(shared: &Shared, path: &Path) -> Result<()> {
    // Copied under the lock, written without it: a commit does not wait for the file.
    let records: Vec<DiskRecord> = shared.log().records.values().cloned().collect();
    let disks: Vec<InventoryDisk> = records
        .into_iter()
        .map(|r| InventoryDisk {
            id: r.id,
            name: r.name,
            size_bytes: r.size_bytes,
            metadata: r.metadata,
        })
        .collect();
    let tmp: PathBuf = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(&disks).map_err(|e| store_error(e.to_string()))?;
    std::fs::write(&tmp, bytes)
        .map_err(|e| CloudError::io(format!("write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| CloudError::io(format!("rename {}", tmp.display()), e))
}
