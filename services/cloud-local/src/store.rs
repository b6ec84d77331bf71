//! The local cloud's metadata: a log of mutations on the state filesystem, folded into a
//! snapshot now and then.
//!
//! A caller's mutation is acknowledged only once it is durable (written and
//! `fdatasync`ed), so a `kill -9` or a power cut never loses what was acknowledged. One
//! commit is one small append and one `fdatasync`: the floor of a durable write on this
//! filesystem (a B-tree store such as redb writes a handful of scattered pages per
//! commit, and measured a third slower; see BENCHMARKS.md, issue 14 §5).
//!
//! Two paths lead to the log:
//! - a caller that finds nothing being written commits its mutation itself, on its own
//!   thread: a single caller pays one durable append and no thread hand-off (each
//!   hand-off waits for a core, which a loaded machine makes long);
//! - a caller that finds a commit under way queues its mutation for the writer thread,
//!   which appends everything queued as one record when the store is free: under
//!   concurrency the cost stays one fsync per batch however many callers wait.
//!
//! Files in the state directory: `store.log` (records: magic, length, CRC-32 of the
//! payload, CRC-32 of the header, and a JSON batch of mutations; a batch is all or nothing), `store.snapshot` (every disk, the same
//! framing, replaced atomically); an exclusive `flock` on the log keeps a second
//! process out. Opening reads the snapshot and replays the log: a torn last record
//! (a crash during its write, never acknowledged) is cut off; a damaged record with more
//! after it is corruption, and opening fails rather than drop acknowledged changes.
//! Replaying the log over a newer snapshot is harmless (every mutation sets or removes a
//! whole record), so a crash between writing a snapshot and emptying the log loses
//! nothing. A store of the earlier redb format (`store.redb`) is converted once.
//!
//! A failed write (ENOSPC, EIO, EROFS) cuts the log back to its last durable record and
//! marks the store broken; the next write, or a health check, repeats the cut and a sync
//! and clears the mark when they succeed — so a full or read-only filesystem costs the
//! calls made while it lasts, not the process. While it is broken, [`Store::check`]
//! fails, so Probe is not ready.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::store_error;
use overcast_cloud::{CloudError, Result, Zone};

mod frame;
mod inventory;
#[cfg(test)]
mod tests;

use frame::{frame, scan, Scan};
use inventory::inventory_loop;
pub use inventory::{InventoryDisk, INVENTORY};

/// The log of mutations since the snapshot.
pub const LOG: &str = "store.log";
/// Every disk at the time of the last fold.
pub const SNAPSHOT: &str = "store.snapshot";
/// The store of versions before 0.1 (redb), read once and renamed.
const LEGACY: &str = "store.redb";
const MAGIC: u32 = 0x4f43_4c47; // "OCLG"
const HEADER: usize = 16;
/// The most mutations one record carries.
const MAX_BATCH: usize = 512;
/// The log is folded into a new snapshot once it is longer than this and than the
/// snapshot itself (so folding costs at most about as much as the appends did).
const FOLD_AT: u64 = 4 << 20;

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
    /// What its content was made from. Absent from every record of a disk made blank
    /// (and from all records of releases before snapshots, which read as blank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRecord>,
}

/// A disk's source as the store and the metadata file keep it: `{"disk": "vol-…"}`
/// (a clone) or `{"snapshot": "snap-…"}` (a restore).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SourceRecord {
    Disk(String),
    Snapshot(String),
}

impl SourceRecord {
    pub fn of(source: &overcast_cloud::DiskSource) -> Self {
        match source {
            overcast_cloud::DiskSource::Disk(id) => Self::Disk(id.clone()),
            overcast_cloud::DiskSource::Snapshot(id) => Self::Snapshot(id.clone()),
        }
    }

    pub fn to_source(&self) -> overcast_cloud::DiskSource {
        match self {
            Self::Disk(id) => overcast_cloud::DiskSource::Disk(id.clone()),
            Self::Snapshot(id) => overcast_cloud::DiskSource::Snapshot(id.clone()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    pub node: String,
    pub loop_index: u32,
    pub readonly: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
    fn io(context: &str, e: &io::Error) -> Self {
        Self {
            kind: Some(e.kind()),
            message: format!("{context}: {e}"),
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
            None => store_error(self.message.clone()),
        }
    }
}

/// The log, the records it and the snapshot make, and whether the last write failed.
struct Log {
    dir: PathBuf,
    file: Flock<File>,
    /// Where the last durable record ends: the next one is written here.
    len: u64,
    snapshot_len: u64,
    records: BTreeMap<String, DiskRecord>,
    /// The failure that broke the store, until the log is cut back and synced again.
    broken: Option<Failure>,
}

impl Log {
    fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(LOG);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| CloudError::io(format!("open {}", path.display()), e))?;
        // One process owns the store: a second controller on the same state directory
        // would write the same disks.
        let file = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            store_error(format!(
                "{} is held by another process ({e})",
                path.display()
            ))
        })?;
        let mut log = Self {
            dir: dir.to_owned(),
            file,
            len: 0,
            snapshot_len: 0,
            records: BTreeMap::new(),
            broken: None,
        };
        let legacy = dir.join(LEGACY);
        let snapshot = dir.join(SNAPSHOT);
        let log_len = log
            .file
            .metadata()
            .map_err(|e| CloudError::io(format!("stat {}", path.display()), e))?
            .len();
        if legacy.exists() && !snapshot.exists() {
            if log_len != 0 {
                // Both formats hold changes (an older version ran again after this one):
                // neither can be dropped, and merging them would guess.
                return Err(store_error(format!(
                    "{} and {} both hold disks; move the one that is out of date away",
                    legacy.display(),
                    path.display()
                )));
            }
            log.records = read_legacy(&legacy)?;
            log.fold().map_err(|f| f.to_cloud())?;
            tracing::info!(disks = log.records.len(), from = %legacy.display(), "converted the metadata store to its log format");
        }
        if legacy.exists() {
            // Converted (the snapshot holds its disks): kept beside, renamed, never read again.
            let done = dir.join(format!("{LEGACY}.converted"));
            std::fs::rename(&legacy, &done)
                .map_err(|e| CloudError::io(format!("rename {}", legacy.display()), e))?;
        }
        log.read_snapshot()?;
        log.replay()?;
        Ok(log)
    }

    fn read_snapshot(&mut self) -> Result<()> {
        let path = self.dir.join(SNAPSHOT);
        let buf = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(CloudError::io(format!("read {}", path.display()), e)),
        };
        // A snapshot is written whole, synced and renamed into place: anything but one
        // whole record is damage, never a crash.
        let payload = match scan(&buf) {
            Scan::Records(r, end) if r.len() == 1 && end == buf.len() => r[0],
            _ => {
                return Err(store_error(format!(
                    "{} is damaged; the previous state is not readable",
                    path.display()
                )))
            }
        };
        let records: Vec<DiskRecord> = serde_json::from_slice(payload)
            .map_err(|e| store_error(format!("{}: {e}", path.display())))?;
        self.records = records.into_iter().map(|r| (r.id.clone(), r)).collect();
        self.snapshot_len = buf.len() as u64;
        Ok(())
    }

    fn replay(&mut self) -> Result<()> {
        let path = self.dir.join(LOG);
        let mut buf = Vec::new();
        io::Read::read_to_end(&mut &*self.file, &mut buf)
            .map_err(|e| CloudError::io(format!("read {}", path.display()), e))?;
        let (batches, end) = match scan(&buf) {
            Scan::Records(r, end) => (r, end),
            Scan::Corrupt(at) => {
                return Err(store_error(format!(
                    "{} is damaged at byte {at}, with records after it; refusing to drop them",
                    path.display()
                )))
            }
        };
        for (i, payload) in batches.into_iter().enumerate() {
            let batch: Vec<Mutation> = serde_json::from_slice(payload)
                .map_err(|e| store_error(format!("{} record {i}: {e}", path.display())))?;
            self.apply(batch.iter());
        }
        self.len = end as u64;
        if end < buf.len() {
            tracing::warn!(path = %path.display(), at = end, bytes = buf.len() - end, "cut a torn record off the end of the metadata log (a write a crash interrupted; it was never acknowledged)");
            self.cut().map_err(|f| f.to_cloud())?;
        }
        Ok(())
    }

    fn apply<'a>(&mut self, mutations: impl Iterator<Item = &'a Mutation>) {
        for m in mutations {
            match m {
                Mutation::Put(r) => {
                    self.records.insert(r.id.clone(), r.clone());
                }
                Mutation::Delete(id) => {
                    self.records.remove(id);
                }
            }
        }
    }

    /// Cuts the log back to its last durable record and syncs it.
    fn cut(&mut self) -> std::result::Result<(), Failure> {
        self.file
            .set_len(self.len)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| Failure::io("cut back the metadata log", &e))
    }

    /// If broken, cuts the log back (dropping whatever the failed write left) and clears
    /// the mark when that is durable.
    fn heal(&mut self) -> std::result::Result<(), Failure> {
        if self.broken.is_none() {
            return Ok(());
        }
        match self.cut() {
            Ok(()) => {
                tracing::info!(dir = %self.dir.display(), "metadata store writes again");
                self.broken = None;
                Ok(())
            }
            Err(f) => {
                self.broken = Some(f.clone());
                Err(f)
            }
        }
    }

    /// Appends `mutations` as one record and makes it durable.
    fn append(&mut self, mutations: &[&Mutation]) -> std::result::Result<(), Failure> {
        self.heal()?;
        let payload = serde_json::to_vec(mutations).map_err(|e| Failure::message(e.to_string()))?;
        let record = frame(&payload)?;
        let written = self
            .file
            .write_all_at(&record, self.len)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            let f = Failure::io("write the metadata log", &e);
            tracing::warn!(error = %f.message, "metadata store write failed; the log is cut back before the next write");
            // Give back at once what the failed write took (on a full filesystem that
            // is what the next write needs); if that fails too, the store is broken and
            // heal() repeats the cut before anything else is written.
            self.broken = self.cut().err();
            return Err(f);
        }
        self.len += record.len() as u64;
        self.apply(mutations.iter().copied());
        if self.len > FOLD_AT.max(self.snapshot_len) {
            if let Err(f) = self.fold() {
                // The log stays as it is, and stays correct; folding is tried again
                // after the next write.
                tracing::warn!(error = %f.message, "could not fold the metadata log into a snapshot");
            }
        }
        Ok(())
    }

    /// Writes every record as the new snapshot (synced, renamed into place, directory
    /// synced), then empties the log.
    fn fold(&mut self) -> std::result::Result<(), Failure> {
        let path = self.dir.join(SNAPSHOT);
        let tmp = self.dir.join(format!("{SNAPSHOT}.tmp"));
        let records: Vec<&DiskRecord> = self.records.values().collect();
        let payload = serde_json::to_vec(&records).map_err(|e| Failure::message(e.to_string()))?;
        let bytes = frame(&payload)?;
        let written = (|| -> io::Result<()> {
            let f = File::create(&tmp)?;
            f.write_all_at(&bytes, 0)?;
            f.sync_data()?;
            std::fs::rename(&tmp, &path)?;
            File::open(&self.dir)?.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(Failure::io("write the metadata snapshot", &e));
        }
        self.snapshot_len = bytes.len() as u64;
        // Replaying the old log over the new snapshot changes nothing, so this needs no
        // more care than any other cut.
        let len = self.len;
        self.len = 0;
        if let Err(f) = self.cut() {
            self.len = len;
            return Err(f);
        }
        Ok(())
    }
}

/// Reads a store of the earlier (redb) format.
fn read_legacy(path: &Path) -> Result<BTreeMap<String, DiskRecord>> {
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    const DISKS: TableDefinition<&str, &[u8]> = TableDefinition::new("disks");
    let fail = |e: &dyn std::fmt::Display| store_error(format!("{}: {e}", path.display()));
    let db = redb::Database::open(path).map_err(|e| fail(&e))?;
    let txn = db.begin_read().map_err(|e| fail(&e))?;
    let table = match txn.open_table(DISKS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(fail(&e)),
    };
    let mut out = BTreeMap::new();
    for item in table.iter().map_err(|e| fail(&e))? {
        let (key, value) = item.map_err(|e| fail(&e))?;
        let record: DiskRecord = serde_json::from_slice(value.value())
            .map_err(|e| fail(&format!("record {}: {e}", key.value())))?;
        out.insert(record.id.clone(), record);
    }
    Ok(out)
}

/// Who writes next: the mutations waiting for the writer thread, and whether a
/// transaction is being written (by the writer thread or by a caller itself).
#[derive(Default)]
struct Queue {
    pending: Vec<(Mutation, Reply)>,
    busy: bool,
    /// Every handle is gone: the writer thread ends once the queue is empty.
    closed: bool,
    /// The writer thread has ended (or died): nothing queued would be written.
    writer_gone: bool,
}

struct Shared {
    log: Mutex<Log>,
    queue: Mutex<Queue>,
    /// Wakes the writer thread: something was queued, the store became free, or it closed.
    wake: Condvar,
    /// Something changed since the inventory was last written.
    dirty: AtomicBool,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `mutations` durable as one record (all or nothing).
    fn write(&self, mutations: &[&Mutation]) -> std::result::Result<(), Failure> {
        let outcome = self.log().append(mutations);
        if outcome.is_ok() {
            self.dirty.store(true, Ordering::Release);
        }
        outcome
    }

    /// Marks the store free again, and hands what was queued meanwhile to the writer.
    fn release(&self) {
        let mut queue = self.queue();
        queue.busy = false;
        if !queue.pending.is_empty() {
            self.wake.notify_one();
        }
    }
}

/// The last handle closes the queue, so the writer thread ends and lets go of the file.
struct Handle(Arc<Shared>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.queue().closed = true;
        self.0.wake.notify_one();
    }
}

#[derive(Clone)]
pub struct Store(Arc<Handle>);

impl Store {
    /// Opens (or creates) the store in the directory `dir` and starts its writer thread.
    pub fn open(dir: &Path) -> Result<Self> {
        let shared = Arc::new(Shared {
            log: Mutex::new(Log::open(dir)?),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            // Start dirty: the inventory is written once at open.
            dirty: AtomicBool::new(true),
        });
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || write_loop(&writer))
            .map_err(|e| CloudError::io("start the store writer", e))?;
        let inventory = dir.join(INVENTORY);
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("store-inventory".into())
            .spawn(move || inventory_loop(weak, &inventory))
            .map_err(|e| CloudError::io("start the inventory writer", e))?;
        Ok(Self(Arc::new(Handle(shared))))
    }

    fn shared(&self) -> &Shared {
        &self.0 .0
    }

    /// Every record, sorted by id.
    pub fn load(&self) -> Result<Vec<DiskRecord>> {
        Ok(self.shared().log().records.values().cloned().collect())
    }

    /// Makes `mutation` durable; returns once it is.
    ///
    /// When nothing else is being written, the commit happens here, on the caller's
    /// thread, and blocks it for one durable write (about one fdatasync): that is what
    /// a lone caller waits for anyway, and doing it in place saves the three thread
    /// hand-offs a queue would cost. Under concurrency the store is busy, and the
    /// mutation joins the writer thread's next batch.
    pub async fn commit(&self, mutation: Mutation) -> Result<()> {
        let shared = self.shared();
        let queued = {
            let mut queue = shared.queue();
            if queue.writer_gone {
                return Err(store_error("writer thread has stopped"));
            }
            if queue.busy || !queue.pending.is_empty() {
                let (tx, rx) = oneshot::channel();
                queue.pending.push((mutation, tx));
                if !queue.busy {
                    shared.wake.notify_one();
                }
                Ok(rx)
            } else {
                queue.busy = true;
                Err(mutation)
            }
        };
        match queued {
            Ok(rx) => rx
                .await
                .map_err(|_| store_error("writer thread has stopped"))?
                .map_err(|f| f.to_cloud()),
            Err(mutation) => {
                // Released even if the write panics, or the store would stay busy.
                struct Release<'a>(&'a Shared);
                impl Drop for Release<'_> {
                    fn drop(&mut self) {
                        self.0.release();
                    }
                }
                let _release = Release(shared);
                shared.write(&[&mutation]).map_err(|f| f.to_cloud())
            }
        }
    }

    /// Answers when the writer is alive and the last write did not fail — or, if it
    /// did, when cutting the log back to its last durable record and syncing it now
    /// succeed.
    pub fn check(&self) -> Result<()> {
        let shared = self.shared();
        if shared.queue().writer_gone {
            return Err(store_error("writer thread has stopped"));
        }
        // Probe runs on the async runtime: never wait there behind a commit's fdatasync.
        // A write under way heals a broken store first, and its outcome is what the
        // next check sees.
        match shared.log.try_lock() {
            Ok(mut log) => log.heal().map_err(|f| f.to_cloud()),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                p.into_inner().heal().map_err(|f| f.to_cloud())
            }
            Err(std::sync::TryLockError::WouldBlock) => Ok(()),
        }
    }
}

/// Commits what callers queued while the store was busy, a batch at a time, until the
/// last handle is gone.
fn write_loop(shared: &Shared) {
    // Marks the writer gone however it ends, so callers are told instead of waiting.
    struct Gone<'a>(&'a Shared);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            let mut queue = self.0.queue();
            queue.writer_gone = true;
            // Dropping the replies tells every queued caller.
            queue.pending.clear();
        }
    }
    let _gone = Gone(shared);
    loop {
        let batch: Vec<(Mutation, Reply)> = {
            let mut queue = shared.queue();
            loop {
                if !queue.busy && !queue.pending.is_empty() {
                    break;
                }
                if queue.closed && queue.pending.is_empty() {
                    return;
                }
                queue = shared.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
            }
            queue.busy = true;
            let n = queue.pending.len().min(MAX_BATCH);
            queue.pending.drain(..n).collect()
        };
        let mutations: Vec<&Mutation> = batch.iter().map(|(m, _)| m).collect();
        let outcome = shared.write(&mutations);
        drop(mutations);
        {
            // Free before the replies go out: a caller answered now may commit at once.
            let mut queue = shared.queue();
            queue.busy = false;
        }
        for (_, reply) in batch {
            let _ = reply.send(outcome.clone());
        }
    }
}
