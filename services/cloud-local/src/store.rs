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
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::store_error;
use overcast_cloud::{CloudError, Result, Zone};

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

/// A record's bytes (little endian): magic, payload length, CRC-32 of the payload, CRC-32
/// of those twelve bytes, payload. The header's own checksum is what tells a damaged
/// length (which would make every later record look like a torn tail) from a torn write.
fn frame(payload: &[u8]) -> std::result::Result<Vec<u8>, Failure> {
    let len =
        u32::try_from(payload.len()).map_err(|_| Failure::message("a store record over 4 GiB"))?;
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let header_crc = crc32fast::hash(&out);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// What reading a file of records found.
#[derive(Debug, PartialEq, Eq)]
enum Scan<'a> {
    /// Whole records, and where the last one ends (a torn record after it, if any, is
    /// not included: `end` may be less than the file's length).
    Records(Vec<&'a [u8]>, usize),
    /// A damaged record with more after it, at this offset.
    Corrupt(usize),
}

fn scan(buf: &[u8]) -> Scan<'_> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let Some(header) = buf.get(at..at + HEADER) else {
            break; // a torn header at the end
        };
        let word = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
        let (magic, len, crc) = (word(0), word(4) as usize, word(8));
        let end = at + HEADER + len;
        if magic != MAGIC || crc32fast::hash(&header[..12]) != word(12) {
            // A write that extended the file but did not reach the disk reads as zeros.
            // (A header is far smaller than a sector: it is written whole or not at all.)
            if buf[at..].iter().all(|&b| b == 0) {
                break;
            }
            return Scan::Corrupt(at);
        }
        let Some(payload) = buf.get(at + HEADER..end) else {
            break; // a whole header, its payload cut short: torn at the end
        };
        if crc32fast::hash(payload) != crc {
            if end == buf.len() {
                break; // the last record, torn
            }
            return Scan::Corrupt(at);
        }
        records.push(payload);
        at = end;
    }
    Scan::Records(records, at)
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
fn inventory_loop(shared: Weak<Shared>, path: &Path) {
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
        let path = dir.path();
        {
            let store = Store::open(path).unwrap();
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
            match Store::open(path) {
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

    /// Opens the store once its previous handle's writer has let go of the lock.
    fn reopen(dir: &Path) -> Store {
        for _ in 0..500 {
            if let Ok(s) = Store::open(dir) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Store::open(dir).unwrap()
    }

    fn ids(store: &Store) -> Vec<String> {
        store.load().unwrap().into_iter().map(|r| r.id).collect()
    }

    #[tokio::test]
    async fn a_second_process_is_kept_out() {
        let dir = tempfile::tempdir().unwrap();
        let _store = Store::open(dir.path()).unwrap();
        let err = Store::open(dir.path()).err().expect("refused");
        assert!(err.to_string().contains("held by another process"), "{err}");
    }

    #[tokio::test]
    async fn a_torn_last_record_is_cut_off_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            for id in ["a", "b"] {
                store.commit(Mutation::Put(record(id))).await.unwrap();
            }
        }
        let log = dir.path().join(LOG);
        let whole = std::fs::metadata(&log).unwrap().len();
        // A crash in the middle of the next write: half a record, then one that
        // extended the file but whose bytes never reached the disk.
        let next = frame(&serde_json::to_vec(&[Mutation::Put(record("c"))]).unwrap()).unwrap();
        for torn in [&next[..next.len() / 2], &vec![0u8; 100][..], &next[..5]] {
            let f = OpenOptions::new().write(true).open(&log).unwrap();
            f.write_all_at(torn, whole).unwrap();
            drop(f);
            let store = reopen(dir.path());
            assert_eq!(ids(&store), ["a", "b"]);
            assert_eq!(std::fs::metadata(&log).unwrap().len(), whole, "cut back");
            drop(store);
        }
        // A whole record whose last byte flipped, at the end: torn as well.
        let mut flipped = next.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let f = OpenOptions::new().write(true).open(&log).unwrap();
        f.write_all_at(&flipped, whole).unwrap();
        drop(f);
        let store = reopen(dir.path());
        assert_eq!(ids(&store), ["a", "b"]);
        store.commit(Mutation::Put(record("c"))).await.unwrap();
        drop(store);
        assert_eq!(ids(&reopen(dir.path())), ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn a_damaged_record_with_records_after_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            for id in ["a", "b", "c"] {
                store.commit(Mutation::Put(record(id))).await.unwrap();
            }
        }
        let log = dir.path().join(LOG);
        let mut bytes = std::fs::read(&log).unwrap();
        bytes[HEADER + 3] ^= 0xff; // inside the first record's payload
        std::fs::write(&log, &bytes).unwrap();
        let mut last = None;
        for _ in 0..500 {
            match Store::open(dir.path()) {
                Err(e) if e.to_string().contains("held by another") => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => {
                    last = Some(other);
                    break;
                }
            }
        }
        let err = last.unwrap().err().expect("refused");
        assert!(err.to_string().contains("damaged at byte 0"), "{err}");
        assert_eq!(std::fs::read(&log).unwrap(), bytes, "nothing was cut");

        // A damaged length in the first record points past the end of the file: without
        // the header's checksum that read as a torn tail, and the two acknowledged records
        // after it were cut off.
        let mut bytes = bytes.clone();
        bytes[HEADER + 3] ^= 0xff; // the payload as it was
        bytes[6] ^= 0x7f; // the length's third byte: ~8 MiB more
        std::fs::write(&log, &bytes).unwrap();
        let err = Store::open(dir.path()).err().expect("refused");
        assert!(err.to_string().contains("damaged at byte 0"), "{err}");
        assert_eq!(std::fs::read(&log).unwrap(), bytes, "nothing was cut");
    }

    #[tokio::test]
    async fn the_log_folds_into_a_snapshot_and_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let want = {
            let store = Store::open(dir.path()).unwrap();
            // Enough puts of a fat record to pass the fold threshold more than once.
            let mut fat = record("x");
            fat.metadata.insert("pad".into(), "p".repeat(8 << 10));
            for i in 0..1200 {
                let mut r = fat.clone();
                r.id = format!("{:04}", i % 300);
                store.commit(Mutation::Put(r)).await.unwrap();
            }
            for i in (0..300).step_by(3) {
                store
                    .commit(Mutation::Delete(format!("{i:04}")))
                    .await
                    .unwrap();
            }
            let want = ids(&store);
            assert_eq!(want.len(), 200);
            want
        };
        assert!(dir.path().join(SNAPSHOT).exists());
        let log_len = std::fs::metadata(dir.path().join(LOG)).unwrap().len();
        assert!(
            log_len < FOLD_AT,
            "the log was emptied by a fold ({log_len} bytes)"
        );
        let store = reopen(dir.path());
        assert_eq!(ids(&store), want);
        drop(store);
        // A crash after a fold wrote its snapshot but before it emptied the log: the old
        // log replays over the new snapshot to the same state.
        let snapshot_state = {
            let store = reopen(dir.path());
            store.commit(Mutation::Delete("0001".into())).await.unwrap();
            let log = std::fs::read(dir.path().join(LOG)).unwrap();
            let state = ids(&store);
            let mut guard = store.shared().log();
            guard.fold().unwrap();
            drop(guard);
            drop(store);
            std::fs::write(dir.path().join(LOG), log).unwrap();
            state
        };
        assert_eq!(ids(&reopen(dir.path())), snapshot_state);
    }

    #[tokio::test]
    async fn a_store_of_the_earlier_format_is_converted_once() {
        use redb::TableDefinition;
        const DISKS: TableDefinition<&str, &[u8]> = TableDefinition::new("disks");
        let dir = tempfile::tempdir().unwrap();
        {
            let db = redb::Database::create(dir.path().join(LEGACY)).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut t = txn.open_table(DISKS).unwrap();
                for id in ["vol-a", "vol-b"] {
                    let bytes = serde_json::to_vec(&record(id)).unwrap();
                    t.insert(id, bytes.as_slice()).unwrap();
                }
            }
            txn.commit().unwrap();
        }
        {
            let store = Store::open(dir.path()).unwrap();
            assert_eq!(store.load().unwrap(), [record("vol-a"), record("vol-b")]);
            store
                .commit(Mutation::Delete("vol-a".into()))
                .await
                .unwrap();
        }
        assert!(!dir.path().join(LEGACY).exists());
        assert!(dir.path().join(format!("{LEGACY}.converted")).exists());
        // Read from the log from now on, not converted again.
        assert_eq!(ids(&reopen(dir.path())), ["vol-b"]);

        // An older version ran again after the conversion (a rollback) and wrote a new
        // redb store, and neither has a snapshot to say which is current: refused.
        let other = tempfile::tempdir().unwrap();
        std::fs::copy(
            dir.path().join(format!("{LEGACY}.converted")),
            other.path().join(LEGACY),
        )
        .unwrap();
        std::fs::copy(dir.path().join(LOG), other.path().join(LOG)).unwrap();
        let err = Store::open(other.path()).err().expect("refused");
        assert!(err.to_string().contains("both hold disks"), "{err}");
        assert!(other.path().join(LEGACY).exists(), "nothing renamed");
    }
}
