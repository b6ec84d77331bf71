//! The local cloud's metadata: an embedded transactional store (redb) written by one
//! thread that commits every mutation waiting in its queue in a single transaction.
//!
//! A caller's mutation is acknowledged only once its transaction is durable, so a
//! `kill -9` (or a power cut) never loses what was acknowledged; grouping keeps the cost
//! at one fsync per batch however many callers wait.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::{CloudError, Result, Zone};

const DISKS: TableDefinition<&str, &[u8]> = TableDefinition::new("disks");
/// The most mutations one transaction carries.
const MAX_BATCH: usize = 512;

/// One disk as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRecord {
    pub id: String,
    pub name: String,
    pub size_bytes: u64,
    pub zone: Zone,
    pub thick: bool,
    pub parameters: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
    pub created_unix: u64,
    pub attachments: Vec<AttachmentRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    pub node: String,
    pub loop_index: u32,
    pub readonly: bool,
}

#[derive(Debug)]
pub enum Mutation {
    Put(DiskRecord),
    Delete(String),
}

type Reply = oneshot::Sender<std::result::Result<(), String>>;

#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    queue: mpsc::UnboundedSender<(Mutation, Reply)>,
}

impl Store {
    /// Opens (or creates) the store at `path` and starts its writer thread.
    pub fn open(path: &Path) -> Result<Self> {
        let db = Database::create(path).map_err(store_err)?;
        let txn = db.begin_write().map_err(store_err)?;
        txn.open_table(DISKS).map_err(store_err)?;
        txn.commit().map_err(store_err)?;
        let db = Arc::new(db);
        let (queue, rx) = mpsc::unbounded_channel();
        let writer_db = Arc::clone(&db);
        // Start dirty: the inventory is written once at open.
        let dirty = Arc::new(AtomicBool::new(true));
        let writer_dirty = Arc::clone(&dirty);
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || write_loop(&writer_db, rx, &writer_dirty))
            .map_err(|e| CloudError::io("start the store writer", e))?;
        let inventory = path.with_file_name(INVENTORY);
        let weak = Arc::downgrade(&db);
        std::thread::Builder::new()
            .name("store-inventory".into())
            .spawn(move || inventory_loop(weak, &inventory, &dirty))
            .map_err(|e| CloudError::io("start the inventory writer", e))?;
        Ok(Self { db, queue })
    }

    /// Every record, sorted by id.
    pub fn load(&self) -> Result<Vec<DiskRecord>> {
        let txn = self.db.begin_read().map_err(store_err)?;
        let table = txn.open_table(DISKS).map_err(store_err)?;
        let mut out = Vec::new();
        for item in table.iter().map_err(store_err)? {
            let (key, value) = item.map_err(store_err)?;
            let record: DiskRecord = serde_json::from_slice(value.value())
                .map_err(|e| CloudError::Store(format!("record {}: {e}", key.value())))?;
            out.push(record);
        }
        Ok(out)
    }

    /// Makes `mutation` durable; returns once it is.
    pub async fn commit(&self, mutation: Mutation) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send((mutation, tx))
            .map_err(|_| CloudError::Store("writer thread has stopped".into()))?;
        rx.await
            .map_err(|_| CloudError::Store("writer thread has stopped".into()))?
            .map_err(CloudError::Store)
    }

    /// Answers when the store can be read and its writer is alive.
    pub fn check(&self) -> Result<()> {
        if self.queue.is_closed() {
            return Err(CloudError::Store("writer thread has stopped".into()));
        }
        let txn = self.db.begin_read().map_err(store_err)?;
        txn.open_table(DISKS).map_err(store_err)?;
        Ok(())
    }
}

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
fn inventory_loop(db: Weak<Database>, path: &Path, dirty: &AtomicBool) {
    loop {
        let Some(db) = db.upgrade() else { return };
        if dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = write_inventory(&db, path) {
                tracing::warn!(error = %e, path = %path.display(), "could not write the disk inventory");
                dirty.store(true, Ordering::Release);
            }
        }
        drop(db);
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn write_inventory(db: &Database, path: &Path) -> Result<()> {
    let txn = db.begin_read().map_err(store_err)?;
    let table = txn.open_table(DISKS).map_err(store_err)?;
    let mut disks = Vec::new();
    for item in table.iter().map_err(store_err)? {
        let (_, value) = item.map_err(store_err)?;
        let r: DiskRecord =
            serde_json::from_slice(value.value()).map_err(|e| CloudError::Store(e.to_string()))?;
        disks.push(InventoryDisk {
            id: r.id,
            name: r.name,
            size_bytes: r.size_bytes,
            metadata: r.metadata,
        });
    }
    let tmp: PathBuf = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(&disks).map_err(|e| CloudError::Store(e.to_string()))?;
    std::fs::write(&tmp, bytes)
        .map_err(|e| CloudError::io(format!("write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| CloudError::io(format!("rename {}", tmp.display()), e))
}

fn write_loop(
    db: &Database,
    mut rx: mpsc::UnboundedReceiver<(Mutation, Reply)>,
    dirty: &AtomicBool,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let outcome = apply(db, &batch).map_err(|e| e.to_string());
        if outcome.is_ok() {
            dirty.store(true, Ordering::Release);
        }
        for (_, reply) in batch.drain(..) {
            let _ = reply.send(outcome.clone());
        }
    }
}

fn apply(db: &Database, batch: &[(Mutation, Reply)]) -> Result<()> {
    let txn = db.begin_write().map_err(store_err)?;
    {
        let mut table = txn.open_table(DISKS).map_err(store_err)?;
        for (mutation, _) in batch {
            match mutation {
                Mutation::Put(record) => {
                    let bytes =
                        serde_json::to_vec(record).map_err(|e| CloudError::Store(e.to_string()))?;
                    table
                        .insert(record.id.as_str(), bytes.as_slice())
                        .map_err(store_err)?;
                }
                Mutation::Delete(id) => {
                    table.remove(id.as_str()).map_err(store_err)?;
                }
            }
        }
    }
    txn.commit().map_err(store_err)
}

fn store_err(e: impl std::fmt::Display) -> CloudError {
    CloudError::Store(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> DiskRecord {
        DiskRecord {
            id: id.into(),
            name: format!("name-{id}"),
            size_bytes: 1 << 20,
            zone: Zone {
                region: "r".into(),
                zone: "z".into(),
            },
            thick: false,
            parameters: BTreeMap::new(),
            metadata: BTreeMap::new(),
            created_unix: 1,
            attachments: vec![],
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_are_all_durable_and_reopen_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        {
            let store = Store::open(&path).unwrap();
            let mut tasks = Vec::new();
            for i in 0..200 {
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    store
                        .commit(Mutation::Put(record(&format!("{i:03}"))))
                        .await
                }));
            }
            for t in tasks {
                t.await.unwrap().unwrap();
            }
            store.commit(Mutation::Delete("007".into())).await.unwrap();
        }
        // The writer thread of the first handle may still hold the file: reopen by
        // waiting for it to let go.
        let store = loop {
            match Store::open(&path) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        };
        let all = store.load().unwrap();
        assert_eq!(all.len(), 199);
        assert!(all.iter().all(|r| r.id != "007"));
        assert!(
            all.windows(2).all(|w| w[0].id < w[1].id),
            "records come back sorted by id"
        );
        assert_eq!(all[0], record("000"));
    }
}
