//! The local cloud's metadata: an embedded transactional store (redb) written by one
//! thread that commits every mutation waiting in its queue in a single transaction.
//!
//! A caller's mutation is acknowledged only once its transaction is durable, so a
//! `kill -9` (or a power cut) never loses what was acknowledged; grouping keeps the cost
//! at one fsync per batch however many callers wait.
//!
//! redb refuses every later transaction after one I/O error ("close and re-open the
//! database"). The store does exactly that: a failed write marks it broken, and the next
//! write or health check reopens the file and proves it can write again, so a full or
//! read-only filesystem costs the calls made while it lasts, not the process. While it
//! is broken, [`Store::check`] fails, so Probe is not ready.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::{CloudError, Result, Zone};

const DISKS: TableDefinition<&str, &[u8]> = TableDefinition::new("disks");
/// One key a health check writes, to prove the store can write again.
const HEALTH: TableDefinition<&str, u64> = TableDefinition::new("health");
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

type Reply = oneshot::Sender<std::result::Result<(), Failure>>;

/// Why a store operation failed, in a form every waiting caller can get a copy of.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The system call's error kind, when the cause was one.
    kind: Option<io::ErrorKind>,
    message: String,
}

impl Failure {
    fn of(e: impl Into<redb::Error>) -> Self {
        match e.into() {
            redb::Error::Io(io) => Self {
                kind: Some(io.kind()),
                message: io.to_string(),
            },
            other => Self {
                kind: None,
                message: other.to_string(),
            },
        }
    }

    fn message(message: impl Into<String>) -> Self {
        Self {
            kind: None,
            message: message.into(),
        }
    }

    /// The cloud error: a root cause the caller can act on keeps its kind (ENOSPC is
    /// RESOURCE_EXHAUSTED, EROFS UNAVAILABLE at the wire), anything else is the store's.
    pub fn to_cloud(&self) -> CloudError {
        match self.kind {
            Some(kind) => {
                CloudError::io("metadata store", io::Error::new(kind, self.message.clone()))
            }
            None => CloudError::Store(self.message.clone()),
        }
    }
}

/// The database behind a lock, so that it can be closed and reopened after an I/O error
/// while nobody holds it.
struct Db {
    path: PathBuf,
    inner: RwLock<Option<Database>>,
    /// The failure that broke the store, until a write succeeds again.
    broken: Mutex<Option<Failure>>,
}

impl Db {
    fn open(path: &Path) -> Result<Self> {
        let db = create(path).map_err(|f| f.to_cloud())?;
        Ok(Self {
            path: path.to_owned(),
            inner: RwLock::new(Some(db)),
            broken: Mutex::new(None),
        })
    }

    /// Runs `f` on the open database.
    fn with<T>(
        &self,
        f: impl FnOnce(&Database) -> std::result::Result<T, Failure>,
    ) -> std::result::Result<T, Failure> {
        let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let db = guard
            .as_ref()
            .ok_or_else(|| Failure::message("the store is closed after a failed reopen"))?;
        f(db)
    }

    fn failure(&self) -> Option<Failure> {
        self.broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_broken(&self, failure: Option<Failure>) {
        *self.broken.lock().unwrap_or_else(|p| p.into_inner()) = failure;
    }

    /// Closes and reopens the database (redb's own remedy after an I/O error).
    fn reopen(&self) -> std::result::Result<(), Failure> {
        let mut guard = self.inner.write().unwrap_or_else(|p| p.into_inner());
        // Closed first: redb holds a lock on the file while open.
        *guard = None;
        *guard = Some(create(&self.path)?);
        Ok(())
    }

    /// If broken, reopens and proves a durable write works; clears the mark if it does.
    fn heal(&self) -> std::result::Result<(), Failure> {
        if self.failure().is_none() {
            return Ok(());
        }
        let healed = self.reopen().and_then(|()| {
            self.with(|db| {
                let txn = db.begin_write().map_err(Failure::of)?;
                {
                    let mut table = txn.open_table(HEALTH).map_err(Failure::of)?;
                    let n = table
                        .get("writes")
                        .map_err(Failure::of)?
                        .map_or(0, |v| v.value());
                    table.insert("writes", n + 1).map_err(Failure::of)?;
                }
                txn.commit().map_err(Failure::of)
            })
        });
        match healed {
            Ok(()) => {
                tracing::info!(path = %self.path.display(), "metadata store writes again");
                self.set_broken(None);
                Ok(())
            }
            Err(f) => {
                self.set_broken(Some(f.clone()));
                Err(f)
            }
        }
    }
}

fn create(path: &Path) -> std::result::Result<Database, Failure> {
    let db = Database::create(path).map_err(Failure::of)?;
    let txn = db.begin_write().map_err(Failure::of)?;
    txn.open_table(DISKS).map_err(Failure::of)?;
    txn.commit().map_err(Failure::of)?;
    Ok(db)
}

#[derive(Clone)]
pub struct Store {
    db: Arc<Db>,
    queue: mpsc::UnboundedSender<(Mutation, Reply)>,
}

impl Store {
    /// Opens (or creates) the store at `path` and starts its writer thread.
    pub fn open(path: &Path) -> Result<Self> {
        let db = Arc::new(Db::open(path)?);
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
        self.db.with(read_all).map_err(|f| f.to_cloud())
    }

    /// Makes `mutation` durable; returns once it is.
    pub async fn commit(&self, mutation: Mutation) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send((mutation, tx))
            .map_err(|_| CloudError::Store("writer thread has stopped".into()))?;
        rx.await
            .map_err(|_| CloudError::Store("writer thread has stopped".into()))?
            .map_err(|f| f.to_cloud())
    }

    /// Answers when the store can be read, its writer is alive, and its last write did
    /// not fail — or, if it did, when a reopen and a test write now succeed.
    pub fn check(&self) -> Result<()> {
        if self.queue.is_closed() {
            return Err(CloudError::Store("writer thread has stopped".into()));
        }
        self.db.heal().map_err(|f| f.to_cloud())?;
        self.db
            .with(|db| {
                let txn = db.begin_read().map_err(Failure::of)?;
                txn.open_table(DISKS).map_err(Failure::of).map(drop)
            })
            .map_err(|f| f.to_cloud())
    }
}

fn read_all(db: &Database) -> std::result::Result<Vec<DiskRecord>, Failure> {
    let txn = db.begin_read().map_err(Failure::of)?;
    let table = txn.open_table(DISKS).map_err(Failure::of)?;
    let mut out = Vec::new();
    for item in table.iter().map_err(Failure::of)? {
        let (key, value) = item.map_err(Failure::of)?;
        let record: DiskRecord = serde_json::from_slice(value.value())
            .map_err(|e| Failure::message(format!("record {}: {e}", key.value())))?;
        out.push(record);
    }
    Ok(out)
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
fn inventory_loop(db: Weak<Db>, path: &Path, dirty: &AtomicBool) {
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

fn write_inventory(db: &Db, path: &Path) -> Result<()> {
    let disks: Vec<InventoryDisk> = db
        .with(read_all)
        .map_err(|f| f.to_cloud())?
        .into_iter()
        .map(|r| InventoryDisk {
            id: r.id,
            name: r.name,
            size_bytes: r.size_bytes,
            metadata: r.metadata,
        })
        .collect();
    let tmp: PathBuf = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(&disks).map_err(|e| CloudError::Store(e.to_string()))?;
    std::fs::write(&tmp, bytes)
        .map_err(|e| CloudError::io(format!("write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| CloudError::io(format!("rename {}", tmp.display()), e))
}

fn write_loop(db: &Db, mut rx: mpsc::UnboundedReceiver<(Mutation, Reply)>, dirty: &AtomicBool) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        // A store broken by an earlier failure is reopened first; if that fails, the
        // batch fails with the reason and the next one tries again.
        let outcome = db.heal().and_then(|()| db.with(|d| apply(d, &batch)));
        match &outcome {
            Ok(()) => dirty.store(true, Ordering::Release),
            Err(f) => {
                tracing::warn!(error = %f.message, "metadata store write failed; it is reopened before the next write");
                db.set_broken(Some(f.clone()));
            }
        }
        for (_, reply) in batch.drain(..) {
            let _ = reply.send(outcome.clone());
        }
    }
}

fn apply(db: &Database, batch: &[(Mutation, Reply)]) -> std::result::Result<(), Failure> {
    let txn = db.begin_write().map_err(Failure::of)?;
    {
        let mut table = txn.open_table(DISKS).map_err(Failure::of)?;
        for (mutation, _) in batch {
            match mutation {
                Mutation::Put(record) => {
                    let bytes =
                        serde_json::to_vec(record).map_err(|e| Failure::message(e.to_string()))?;
                    table
                        .insert(record.id.as_str(), bytes.as_slice())
                        .map_err(Failure::of)?;
                }
                Mutation::Delete(id) => {
                    table.remove(id.as_str()).map_err(Failure::of)?;
                }
            }
        }
    }
    txn.commit().map_err(Failure::of)
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
