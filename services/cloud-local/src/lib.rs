//! The embedded local cloud: disks are sparse files in a state directory, attaching one
//! binds it to a loop device on this host, and the only instance is this host.
//!
//! Metadata lives in [`store`]; on start [`reconcile`] makes the kernel and the disks
//! directory agree with it, so a crash at any point is repaired by a restart.

pub mod cloud_config;
pub mod discovery;
mod files;
mod id;
pub mod instances;
pub mod lb;
pub mod loopdev;
pub mod provider;
mod reconcile;
mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

pub use id::DiskId;
pub use provider::PROVIDER;
use store::{AttachmentRecord, DiskRecord, Mutation, Store};

use overcast_cloud::{
    Attachment, CloudError, Disk, DiskCondition, DiskSpec, Disks, PublishContext, Result, Zone,
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
    pub zone: Zone,
    pub max_attachments_per_node: u64,
}

pub struct LocalCloud {
    cfg: LocalConfig,
    disks_dir: PathBuf,
    store: Store,
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
        let (cfg, disks_dir, store, records) = tokio::task::spawn_blocking(move || -> Result<_> {
            std::fs::create_dir_all(state_dir.join("disks"))
                .map_err(|e| CloudError::io(format!("create {}", state_dir.display()), e))?;
            let state_dir = std::fs::canonicalize(&state_dir)
                .map_err(|e| CloudError::io(format!("resolve {}", state_dir.display()), e))?;
            let disks_dir = state_dir.join("disks");
            let store = Store::open(&state_dir)?;
            let records = store.load()?;
            Ok((LocalConfig { state_dir, ..cfg }, disks_dir, store, records))
        })
        .await
        .map_err(|e| store_error(format!("open task: {e}")))??;

        let records = reconcile::run(&disks_dir, &cfg.node_name, &store, records).await?;
        let mut index = Index::default();
        for r in records {
            index.by_name.insert(r.name.clone(), r.id.clone());
            index.disks.insert(r.id.clone(), r);
        }
        Ok(Self {
            cfg,
            disks_dir,
            store,
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
            condition(record, &path, &self.cfg.node_name)
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
            source: None,
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

/// Binds `file` to a loop device unless one already reaches it, in which case that one
/// is adopted: a file bound to two devices is two writers on one filesystem. A binding
/// left by a crash (or by a detach the kernel had not finished) is reused when its
/// read-only flag matches, and refused when it does not.
fn bind_once(file: &Path, readonly: bool, label: &str) -> Result<u32> {
    let existing =
        loopdev::devices_backing(file).map_err(|e| CloudError::io("list loop devices", e))?;
    match existing.as_slice() {
        [] => loopdev::attach(file, readonly, label)
            .map_err(|e| CloudError::io(format!("attach {}", file.display()), e)),
        [index] => {
            let ro = loopdev::is_read_only(*index)
                .map_err(|e| CloudError::io(format!("read /dev/loop{index}'s flags"), e))?;
            if ro != readonly {
                return Err(CloudError::InUse(format!(
                    "{} is already bound to /dev/loop{index} with readonly={ro}",
                    file.display()
                )));
            }
            loopdev::keep_bound(*index, file)
                .map_err(|e| CloudError::io(format!("adopt /dev/loop{index}"), e))?;
            tracing::info!(device = index, file = %file.display(), "adopted an existing loop device");
            Ok(*index)
        }
        several => Err(CloudError::InUse(format!(
            "{} is bound to several loop devices ({several:?}); detach all but one",
            file.display()
        ))),
    }
}

/// A loop device error as the cloud reports it: a device still in use is a state the
/// caller can wait out, anything else is the system's failure.
fn loop_error(what: &str, e: std::io::Error) -> CloudError {
    if e.kind() == std::io::ErrorKind::ResourceBusy {
        CloudError::InUse(format!(
            "{what}: {e}; the node must unstage it first (the detach is retried)"
        ))
    } else {
        CloudError::io(what.to_owned(), e)
    }
}

fn condition(record: &DiskRecord, path: &Path, this_node: &str) -> DiskCondition {
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
    for a in record.attachments.iter().filter(|a| a.node == this_node) {
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

#[async_trait]
impl Disks for LocalCloud {
    async fn zones(&self) -> Result<Vec<Zone>> {
        Ok(vec![self.cfg.zone.clone()])
    }

    fn size_granularity(&self) -> u64 {
        MIB
    }

    fn max_disk_size(&self) -> u64 {
        MAX_DISK_SIZE
    }

    fn max_attachments_per_node(&self) -> u64 {
        self.cfg.max_attachments_per_node
    }

    fn overcommits(&self, parameters: &BTreeMap<String, String>) -> bool {
        !matches!(parse_thick(parameters), Ok(true))
    }

    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        if let Some(unknown) = parameters.keys().find(|k| k.as_str() != PARAM_THICK) {
            return Err(CloudError::InvalidArgument(format!(
                "unknown parameter {unknown:?} (the local cloud accepts {PARAM_THICK})"
            )));
        }
        parse_thick(parameters).map(drop)
    }

    async fn create_disk(&self, spec: DiskSpec) -> Result<Disk> {
        self.validate_parameters(&spec.parameters)?;
        let thick = parse_thick(&spec.parameters)?;
        if spec.zone != self.cfg.zone {
            return Err(CloudError::ResourceExhausted(format!(
                "the local cloud serves zone {}/{}, not {}/{}",
                self.cfg.zone.region, self.cfg.zone.zone, spec.zone.region, spec.zone.zone
            )));
        }
        if spec.size_bytes == 0
            || spec.size_bytes > MAX_DISK_SIZE
            || !spec.size_bytes.is_multiple_of(MIB)
        {
            return Err(CloudError::OutOfRange(format!(
                "disk size {} is not a whole number of MiB between 1 MiB and {MAX_DISK_SIZE}",
                spec.size_bytes
            )));
        }
        // A record whose file is gone is a delete a crash interrupted (the file goes
        // first, see `delete_disk`): that disk is on its way out, never an answer to a
        // create. Finishing its delete here lets the create make the disk asked for.
        let interrupted = {
            let index = self.index();
            index.by_name.get(&spec.name).and_then(|id| {
                let existing = &index.disks[id];
                let path = DiskId::parse(id).map(|id| self.path_of(&id))?;
                (existing.attachments.is_empty() && !path.exists()).then(|| id.clone())
            })
        };
        if let Some(id) = interrupted {
            let (_, _busy) = self.claim(&id)?;
            self.store.commit(Mutation::Delete(id.clone())).await?;
            let mut index = self.index();
            index.disks.remove(&id);
            index.by_name.remove(&spec.name);
        }
        let _claim = {
            let mut index = self.index();
            if let Some(id) = index.by_name.get(&spec.name) {
                let existing = &index.disks[id];
                if existing.thick != thick
                    || existing.zone != spec.zone
                    || existing.size_bytes < spec.size_bytes
                {
                    return Err(CloudError::ParameterMismatch {
                        name: spec.name,
                        reason: format!(
                            "disk {} has {} bytes, thick={}",
                            existing.id, existing.size_bytes, existing.thick
                        ),
                    });
                }
                return Ok(self.to_disk(existing, false));
            }
            if !index.creating.insert(spec.name.clone()) {
                return Err(CloudError::Busy(format!(
                    "disk named {:?} is being created",
                    spec.name
                )));
            }
            Claim {
                index: Arc::clone(&self.index),
                key: spec.name.clone(),
                name: true,
            }
        };

        let id = DiskId::generate();
        let path = self.path_of(&id);
        let size = spec.size_bytes;
        if thick {
            // Allocating every block takes as long as the size asks: off the runtime.
            let file = path.clone();
            blocking(move || files::create(&file, size, true)).await?;
        } else {
            // A sparse file is one create and one truncate, cheaper than the hop to a
            // blocking thread (which, on a loaded machine, waits for a core).
            files::create(&path, size, false)?;
        }
        let record = DiskRecord {
            id: id.as_str().to_owned(),
            name: spec.name.clone(),
            size_bytes: size,
            zone: spec.zone,
            thick,
            parameters: spec.parameters,
            metadata: spec.metadata,
            created_unix: now_unix(),
            attachments: vec![],
        };
        if let Err(e) = self.store.commit(Mutation::Put(record.clone())).await {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        let mut index = self.index();
        index.by_name.insert(record.name.clone(), record.id.clone());
        let disk = self.to_disk(&record, false);
        index.disks.insert(record.id.clone(), record);
        Ok(disk)
    }

    async fn disk(&self, raw_id: &str) -> Result<Disk> {
        let id = DiskId::parse(raw_id).ok_or_else(|| CloudError::not_found("disk", raw_id))?;
        let record = self.record(&id)?;
        Ok(self.to_disk(&record, true))
    }

    async fn disk_by_name(&self, name: &str) -> Result<Option<Disk>> {
        let index = self.index();
        Ok(index
            .by_name
            .get(name)
            .map(|id| self.to_disk(&index.disks[id], false)))
    }

    async fn list_disks(&self) -> Result<Vec<Disk>> {
        let records: Vec<DiskRecord> = self.index().disks.values().cloned().collect();
        Ok(records.iter().map(|r| self.to_disk(r, true)).collect())
    }

    async fn delete_disk(&self, raw_id: &str) -> Result<()> {
        let (id, _claim) = self.claim(raw_id)?;
        let record = self.record(&id)?;
        if let Some(a) = record.attachments.first() {
            return Err(CloudError::FailedPrecondition(format!(
                "disk {id} is attached to node {}",
                a.node
            )));
        }
        let path = self.path_of(&id);
        // No record, but the kernel may still reach the file (a detach an older version
        // reported too early, a device bound by hand): unlinking it would leave a live
        // mount on a deleted file.
        // Inline, like the unlink below: one read of /proc/partitions, cheaper than the
        // hop to a blocking thread.
        let bound =
            loopdev::devices_backing(&path).map_err(|e| CloudError::io("list loop devices", e))?;
        if let Some(index) = bound.first() {
            return Err(CloudError::InUse(format!(
                "disk {id} is still bound to /dev/loop{index}; unpublish it first"
            )));
        }
        // The file goes first, then the record. On a full filesystem the unlink is what
        // frees the space the store needs to record the deletion, so the other order
        // could never delete anything there. A crash between the two leaves a record
        // whose file is gone (reported abnormal); the CO's retry of DeleteVolume, which
        // never got its answer, finishes it.
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(CloudError::io(format!("remove {}", path.display()), e)),
        }
        self.store
            .commit(Mutation::Delete(id.as_str().to_owned()))
            .await?;
        let mut index = self.index();
        index.disks.remove(id.as_str());
        index.by_name.remove(&record.name);
        Ok(())
    }

    async fn attach_disk(&self, raw_id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        if node != self.cfg.node_name {
            return Err(CloudError::not_found("node", node));
        }
        let (id, _claim) = self.claim(raw_id)?;
        let mut record = self.record(&id)?;
        let path = self.path_of(&id);
        if let Some(pos) = record.attachments.iter().position(|a| a.node == node) {
            let current = &record.attachments[pos];
            if current.readonly != readonly {
                return Err(CloudError::FailedPrecondition(format!(
                    "disk {id} is attached to node {node} with readonly={}",
                    current.readonly
                )));
            }
            if loopdev::backs(current.loop_index, &path) {
                return Ok(self.to_disk(&record, false).attachments.swap_remove(pos));
            }
            // The device vanished behind our back: attach again below.
            record.attachments.remove(pos);
        }
        let _slot = {
            let mut index = self.index();
            let used = index
                .disks
                .values()
                .flat_map(|r| &r.attachments)
                .filter(|a| a.node == node)
                .count() as u64;
            let reserved = index.reserved.entry(node.to_owned()).or_default();
            if used + *reserved >= self.cfg.max_attachments_per_node {
                return Err(CloudError::ResourceExhausted(format!(
                    "node {node} already has {} disks attached (limit {})",
                    used + *reserved,
                    self.cfg.max_attachments_per_node
                )));
            }
            *reserved += 1;
            Reservation {
                index: Arc::clone(&self.index),
                node: node.to_owned(),
            }
        };
        let lock = Arc::clone(&self.attach_lock);
        let file = path.clone();
        let label = id.as_str().to_owned();
        let loop_index = blocking(move || {
            let _serial = lock.lock().unwrap_or_else(|p| p.into_inner());
            bind_once(&file, readonly, &label)
        })
        .await?;
        record.attachments.push(AttachmentRecord {
            node: node.to_owned(),
            loop_index,
            readonly,
        });
        if let Err(e) = self.put(record.clone()).await {
            let _ = loopdev::detach(loop_index, &path);
            return Err(e);
        }
        Ok(Attachment {
            node: node.to_owned(),
            readonly,
            publish_context: publish_context(loop_index, &path),
        })
    }

    async fn detach_disk(&self, raw_id: &str, node: &str) -> Result<()> {
        let (id, _claim) = self.claim(raw_id)?;
        let mut record = self.record(&id)?;
        let Some(pos) = record.attachments.iter().position(|a| a.node == node) else {
            return Ok(());
        };
        let attachment = record.attachments.remove(pos);
        let path = self.path_of(&id);
        let what = format!("detach disk {id} from node {node}");
        blocking(move || {
            // The recorded device, and any other binding of the file (one a crash or an
            // older version left): "detached" must mean no device reaches the file.
            let mut devices = loopdev::devices_backing(&path)
                .map_err(|e| CloudError::io("list loop devices", e))?;
            if !devices.contains(&attachment.loop_index) {
                devices.push(attachment.loop_index);
            }
            for index in devices {
                loopdev::detach(index, &path).map_err(|e| loop_error(&what, e))?;
            }
            Ok(())
        })
        .await?;
        self.put(record).await
    }

    async fn expand_disk(&self, raw_id: &str, size_bytes: u64) -> Result<u64> {
        let (id, _claim) = self.claim(raw_id)?;
        let mut record = self.record(&id)?;
        if size_bytes <= record.size_bytes {
            return Ok(record.size_bytes);
        }
        if size_bytes > MAX_DISK_SIZE || !size_bytes.is_multiple_of(MIB) {
            return Err(CloudError::OutOfRange(format!(
                "disk size {size_bytes} is not a whole number of MiB up to {MAX_DISK_SIZE}"
            )));
        }
        let path = self.path_of(&id);
        let thick = record.thick;
        let loops: Vec<u32> = record
            .attachments
            .iter()
            .filter(|a| a.node == self.cfg.node_name)
            .map(|a| a.loop_index)
            .collect();
        blocking(move || {
            files::grow(&path, size_bytes, thick)?;
            for index in loops {
                loopdev::refresh_capacity(index, &path)
                    .map_err(|e| CloudError::io(format!("resize /dev/loop{index}"), e))?;
            }
            Ok(())
        })
        .await?;
        record.size_bytes = size_bytes;
        self.put(record).await?;
        Ok(size_bytes)
    }

    async fn available_capacity(&self, zone: Option<&Zone>) -> Result<u64> {
        if zone.is_some_and(|z| *z != self.cfg.zone) {
            return Ok(0);
        }
        files::available_bytes(&self.cfg.state_dir)
    }

    async fn node_exists(&self, node: &str) -> Result<bool> {
        Ok(node == self.cfg.node_name)
    }

    async fn probe(&self) -> Result<()> {
        // A state directory that cannot be written to cannot record anything: not ready,
        // before the next change finds out. A write (not statvfs) is what tells: ext4's
        // emergency read-only after an error does not show as a read-only mount.
        let marker = self.cfg.state_dir.join(".probe");
        std::fs::write(&marker, b"ok")
            .map_err(|e| CloudError::io(format!("write {}", marker.display()), e))?;
        self.store.check()?;
        loopdev::available()
            .map_err(|e| CloudError::Unavailable(format!("/dev/loop-control: {e}")))?;
        std::fs::metadata(&self.disks_dir)
            .map(drop)
            .map_err(|e| CloudError::Unavailable(format!("{}: {e}", self.disks_dir.display())))
    }
}

/// The local cloud's store failed: the provider's own failure.
pub(crate) fn store_error(message: impl Into<String>) -> CloudError {
    CloudError::Internal(format!("metadata store: {}", message.into()))
}

#[cfg(test)]
mod conformance_tests {
    //! The provider conformance suite against the local cloud (root: real loop devices).

    use super::*;
    use overcast_cloud::conformance::{self, DiskHarness};
    use std::time::Duration;

    /// Detaches every loop device still backed by a file of `dir`, also when a check
    /// panicked half-way.
    struct Loops(PathBuf);

    impl Drop for Loops {
        fn drop(&mut self) {
            let Ok(entries) = std::fs::read_dir(&self.0) else {
                return;
            };
            for file in entries.flatten().map(|e| e.path()) {
                for index in loopdev::devices_backing(&file).unwrap_or_default() {
                    let _ = loopdev::detach(index, &file);
                }
            }
        }
    }

    /// The local cloud's in-between states. A disk is recorded only once its file is
    /// whole, so none is ever seen half-made or failed; the one it has is a delete that a
    /// crash interrupted between the unlink and the record (`delete_disk`).
    struct LocalStates(PathBuf);

    #[async_trait]
    impl conformance::DiskStates for LocalStates {
        async fn enter(&self, disk: &Disk, state: conformance::DiskState) -> bool {
            if state != conformance::DiskState::Deleting {
                return false;
            }
            let id = DiskId::parse(&disk.id).expect("a local disk id");
            std::fs::remove_file(self.0.join(id.file_name())).expect("unlink the disk's file");
            true
        }
        async fn release(&self, _disk: &Disk, _state: conformance::DiskState) {}
    }

    /// A local cloud in `dir` serving `node`, the harness for it (with `gone_node` as the
    /// node that names no instance), and the guard that detaches what it leaves bound.
    async fn harness(dir: &Path, node: &str, gone_node: &str) -> (DiskHarness, Loops) {
        let zone = Zone {
            region: "local".into(),
            zone: "local-a".into(),
        };
        let cloud = LocalCloud::open(LocalConfig {
            state_dir: dir.join("state"),
            node_name: node.into(),
            zone: zone.clone(),
            max_attachments_per_node: 16,
        })
        .await
        .unwrap();
        let loops = Loops(cloud.disks_dir.clone());
        let disks_dir = cloud.disks_dir.clone();
        let harness = DiskHarness {
            disks: Arc::new(cloud),
            node: node.into(),
            gone_node: gone_node.into(),
            zone,
            parameters: BTreeMap::new(),
            prefix: "conformance-".into(),
            states: Some(Arc::new(LocalStates(disks_dir))),
            held_for: Duration::from_secs(2),
        };
        (harness, loops)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_local_cloud_passes_the_provider_conformance_suite() {
        let dir = tempfile::tempdir().unwrap();
        let (harness, _loops) = harness(dir.path(), "conformance-node", "no-such-node").await;
        conformance::disks(&harness).await;
        let instances =
            instances::LocalInstances::new("conformance-node".into(), harness.zone.clone(), None);
        conformance::instances(&instances, "conformance-node").await;
    }

    /// The suite can fail: a harness that calls a live node "gone" is caught.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_suite_catches_a_broken_rule() {
        let dir = tempfile::tempdir().unwrap();
        let (harness, _loops) = harness(dir.path(), "n", "n").await;
        let harness = Arc::new(harness);
        let h = Arc::clone(&harness);
        let outcome =
            tokio::spawn(
                async move { conformance::attach_to_a_gone_instance_is_not_found(&h).await },
            )
            .await;
        assert!(outcome.unwrap_err().is_panic());
        // What the failed check left attached is detached before the directory goes.
        for d in harness.disks.list_disks().await.unwrap() {
            harness.disks.detach_disk(&d.id, "n").await.unwrap();
        }
    }
}
