//! The embedded local cloud: disks are sparse files in a state directory, attaching one
//! binds it to a loop device on this host, and the only instance is this host.
//!
//! Metadata lives in [`store`]; on start [`reconcile`] makes the kernel and the disks
//! directory agree with it, so a crash at any point is repaired by a restart.

pub mod cloud_config;
pub mod copy;
pub mod discovery;
mod disks;
mod files;
mod format;
mod id;
pub mod instances;
pub mod lb;
pub mod loopdev;
mod meta;
pub mod provider;
mod reconcile;
mod snapshots;
mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

pub use id::DiskId;
use meta::DiskMeta;
pub use provider::PROVIDER;
use snapshots::Snapshots;
use store::{AttachmentRecord, DiskRecord, Mutation, SourceRecord, Store};

use overcast_cloud::{
    Attachment, CloudError, Disk, DiskCondition, DiskSource, DiskSpec, Disks, PublishContext,
    Result, Snapshot, SnapshotSpec, Zone,
};

/// StorageClass parameter asking for a fully allocated (thick) backing file.
pub const PARAM_THICK: &str = "thickProvisioning";
/// Publish context keys the local cloud writes (the loop device, and the backing file,
/// which identifies it even after a re-attach gave it another number).
pub use overcast_cloud::publish::{
    BACKING_FILE as CTX_BACKING_FILE, DEVICE_PATH as CTX_DEVICE_PATH,
};

const MIB: u64 = 1 << 20;
/// ext4's largest file with 4 KiB blocks.
const MAX_DISK_SIZE: u64 = 16 << 40;

#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub state_dir: PathBuf,
    /// This host's name as nodes know it (the CSI node id).
    pub node_name: String,
    /// The further machines the ccm lists (`instancesFile`). Every machine of the local
    /// cloud is on this one (a second kubelet beside the first, in its own namespaces):
    /// a disk attaches to any of them, as a loop device of this kernel.
    pub instances_file: Option<PathBuf>,
    pub zone: Zone,
    pub max_attachments_per_node: u64,
}

pub struct LocalCloud {
    cfg: LocalConfig,
    disks_dir: PathBuf,
    store: Store,
    snapshots: Arc<Snapshots>,
    index: Arc<Mutex<Index>>,
    /// Serialises loop allocation: concurrent GET_FREE calls would race for one device.
    attach_lock: Arc<Mutex<()>>,
}

#[derive(Default)]
struct Index {
    disks: BTreeMap<String, DiskRecord>,
    by_name: HashMap<String, String>,
    /// Names being created and ids being changed: a second caller gets `Busy`.
    creating: HashSet<String>,
    busy: HashSet<String>,
    /// Attach slots taken by attaches still in flight, per node.
    reserved: HashMap<String, u64>,
}

impl LocalCloud {
    /// Opens the state directory (creating it), reconciles it with the kernel, and
    /// returns a cloud ready to serve.
    pub async fn open(cfg: LocalConfig) -> Result<Self> {
        let state_dir = cfg.state_dir.clone();
        let (cfg, disks_dir, store, snapshots, records, inventory) =
            tokio::task::spawn_blocking(move || -> Result<_> {
                std::fs::create_dir_all(state_dir.join("disks"))
                    .map_err(|e| CloudError::io(format!("create {}", state_dir.display()), e))?;
                let state_dir = std::fs::canonicalize(&state_dir)
                    .map_err(|e| CloudError::io(format!("resolve {}", state_dir.display()), e))?;
                let disks_dir = state_dir.join("disks");
                // Before anything in it is read: a newer release's directory is refused whole.
                format::check(&state_dir)?;
                // Read before the store opens: its writer rewrites the file from the store at
                // once, which a lost store would leave empty.
                let inventory = reconcile::read_inventory(&state_dir);
                let store = Store::open(&state_dir)?;
                let records = store.load()?;
                let (snapshots, found) = Snapshots::open(&state_dir.join("snapshots"))?;
                tracing::info!(
                    snapshots = found.snapshots,
                    unfinished_removed = found.unfinished_removed,
                    left_alone = found.left_alone,
                    "snapshots found"
                );
                Ok((
                    LocalConfig { state_dir, ..cfg },
                    disks_dir,
                    store,
                    snapshots,
                    records,
                    inventory,
                ))
            })
            .await
            .map_err(|e| store_error(format!("open task: {e}")))??;

        let records = reconcile::run(
            &disks_dir,
            &cfg.node_name,
            &cfg.zone,
            &store,
            records,
            &inventory,
        )
        .await?;
        let mut index = Index::default();
        for r in records {
            index.by_name.insert(r.name.clone(), r.id.clone());
            index.disks.insert(r.id.clone(), r);
        }
        Ok(Self {
            cfg,
            disks_dir,
            store,
            snapshots: Arc::new(snapshots),
            index: Arc::new(Mutex::new(index)),
            attach_lock: Arc::new(Mutex::new(())),
        })
    }

    pub fn config(&self) -> &LocalConfig {
        &self.cfg
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `node` is a machine of this cloud: this host, or one the instances file
    /// lists (read now: it changes; unreadable is no answer, not "unknown node").
    fn knows_node(&self, node: &str) -> Result<bool> {
        if node == self.cfg.node_name {
            return Ok(true);
        }
        match &self.cfg.instances_file {
            None => Ok(false),
            Some(file) => Ok(instances::machine_names(file)?.iter().any(|n| n == node)),
        }
    }

    fn path_of(&self, id: &DiskId) -> PathBuf {
        self.disks_dir.join(id.file_name())
    }

    /// Marks `id` busy until the returned claim drops; `Busy` if it already is.
    fn claim(&self, raw_id: &str) -> Result<(DiskId, Claim)> {
        let id = DiskId::parse(raw_id).ok_or_else(|| CloudError::not_found("disk", raw_id))?;
        let mut index = self.index();
        if !index.busy.insert(id.as_str().to_owned()) {
            return Err(CloudError::Busy(format!(
                "an operation on disk {id} is in progress"
            )));
        }
        let claim = Claim {
            index: Arc::clone(&self.index),
            key: id.as_str().to_owned(),
            name: false,
        };
        Ok((id, claim))
    }

    /// Opens what a new disk's content is copied from: `NotFound` of `kind` when it is
    /// gone (a snapshot deleted, a disk's file missing).
    fn open_source(&self, path: &Path, kind: &'static str, raw: &str) -> Result<std::fs::File> {
        std::fs::File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                CloudError::not_found(kind, raw)
            } else {
                CloudError::io(format!("open {}", path.display()), e)
            }
        })
    }

    fn record(&self, id: &DiskId) -> Result<DiskRecord> {
        self.index()
            .disks
            .get(id.as_str())
            .cloned()
            .ok_or_else(|| CloudError::not_found("disk", id.as_str()))
    }

    fn to_disk(&self, record: &DiskRecord, check: bool) -> Disk {
        let path = DiskId::parse(&record.id)
            .map(|id| self.path_of(&id))
            .unwrap_or_default();
        let attachments = record
            .attachments
            .iter()
            .map(|a| Attachment {
                node: a.node.clone(),
                readonly: a.readonly,
                publish_context: publish_context(a.loop_index, &path),
            })
            .collect();
        let condition = if check {
            condition(record, &path)
        } else {
            DiskCondition::Healthy
        };
        Disk {
            id: record.id.clone(),
            name: record.name.clone(),
            size_bytes: record.size_bytes,
            zone: record.zone.clone(),
            parameters: record.parameters.clone(),
            metadata: record.metadata.clone(),
            attachments,
            condition,
            source: record.source.as_ref().map(SourceRecord::to_source),
        }
    }

    async fn put(&self, record: DiskRecord) -> Result<()> {
        self.store.commit(Mutation::Put(record.clone())).await?;
        self.index().disks.insert(record.id.clone(), record);
        Ok(())
    }
}

/// Releases a busy id (or a name being created) when dropped, however the operation ends.
struct Claim {
    index: Arc<Mutex<Index>>,
    key: String,
    name: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if self.name {
            index.creating.remove(&self.key);
        } else {
            index.busy.remove(&self.key);
        }
    }
}

/// Drops an attach slot reservation when the attach ends, successfully or not.
struct Reservation {
    index: Arc<Mutex<Index>>,
    node: String,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = index.reserved.get_mut(&self.node) {
            *n = n.saturating_sub(1);
        }
    }
}

fn publish_context(loop_index: u32, path: &Path) -> BTreeMap<String, String> {
    PublishContext {
        device_path: Some(loopdev::device_path(loop_index)),
        backing_file: Some(path.to_owned()),
        ..PublishContext::default()
    }
    .to_map()
}

fn condition(record: &DiskRecord, path: &Path) -> DiskCondition {
    if let Some(why) = record.metadata.get(reconcile::UNEXPLAINED) {
        return DiskCondition::Abnormal(format!(
            "kept at start-up, {why}; its CSI name and parameters are unknown: delete it by id once nothing uses it"
        ));
    }
    match std::fs::metadata(path) {
        Err(_) => {
            return DiskCondition::Abnormal(format!("backing file {} is missing", path.display()))
        }
        Ok(m) if m.len() < record.size_bytes => {
            return DiskCondition::Abnormal(format!(
                "backing file {} holds {} bytes, the disk {}",
                path.display(),
                m.len(),
                record.size_bytes
            ))
        }
        Ok(_) => {}
    }
    // Every machine of the local cloud is this one: each attachment is a device here.
    for a in &record.attachments {
        if !loopdev::backs(a.loop_index, path) {
            return DiskCondition::Abnormal(format!(
                "/dev/loop{} no longer backs the disk",
                a.loop_index
            ));
        }
    }
    DiskCondition::Healthy
}

fn parse_thick(parameters: &BTreeMap<String, String>) -> Result<bool> {
    match parameters.get(PARAM_THICK).map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(CloudError::InvalidArgument(format!(
            "parameter {PARAM_THICK} must be \"true\" or \"false\", not {other:?}"
        ))),
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CloudError::io("blocking task", std::io::Error::other(e.to_string())))?
}

/// The local cloud's store failed: the provider's own failure.
pub(crate) fn store_error(message: impl Into<String>) -> CloudError {
    CloudError::Internal(format!("metadata store: {}", message.into()))
}

#[cfg(test)]
mod conformance_tests;
