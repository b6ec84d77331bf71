//! The `Disks` capability of the local cloud: name-idempotent creates of sparse (or
//! thick) files, blank or copied from a disk or a snapshot, attach as a loop device bound
//! once per file, detach that means no device reaches the file any more, online growth,
//! and snapshots (`snapshots`: copies of a disk's file).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use super::*;

/// How long a detach waits for a device the node has just let go of (see
/// [`loopdev::detach_when_released`]); a disk still mounted is refused after it.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

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

    fn clones(&self) -> bool {
        // A copy of the source's file (see `copy`).
        true
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
            let (disk_id, _busy) = self.claim(&id)?;
            self.store.commit(Mutation::Delete(id.clone())).await?;
            meta::remove(&self.disks_dir, &disk_id)?;
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
                    || existing.source != spec.source.as_ref().map(SourceRecord::of)
                {
                    return Err(CloudError::ParameterMismatch {
                        kind: "disk",
                        name: spec.name,
                        reason: format!(
                            "disk {} has {} bytes, thick={}, source {:?}",
                            existing.id, existing.size_bytes, existing.thick, existing.source
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

        // A clone's or a restore's content: the source disk is held (neither deleted nor
        // grown) until its copy is made; a snapshot's image, once opened, is read whole
        // even if the snapshot is deleted meanwhile.
        let (copy_from, _source_claim) = match &spec.source {
            None => (None, None),
            Some(DiskSource::Disk(raw)) => {
                let (source_id, claim) = self.claim(raw)?;
                let source = self.record(&source_id)?;
                if source.size_bytes > spec.size_bytes {
                    return Err(CloudError::OutOfRange(format!(
                        "the source disk {source_id} has {} bytes, more than the {} asked for",
                        source.size_bytes, spec.size_bytes
                    )));
                }
                (
                    Some(self.open_source(&self.path_of(&source_id), "disk", raw)?),
                    Some(claim),
                )
            }
            Some(DiskSource::Snapshot(raw)) => {
                let (image, snapshot) = self.snapshots.image_of(raw)?;
                if snapshot.size_bytes > spec.size_bytes {
                    return Err(CloudError::OutOfRange(format!(
                        "snapshot {raw} is of a disk of {} bytes, more than the {} asked for",
                        snapshot.size_bytes, spec.size_bytes
                    )));
                }
                (Some(self.open_source(&image, "snapshot", raw)?), None)
            }
        };
        let id = DiskId::generate();
        let size = spec.size_bytes;
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
            source: spec.source.as_ref().map(SourceRecord::of),
        };
        let disk_meta = DiskMeta::of(&record);
        if let Some(from) = copy_from {
            // As long as the source's data: off the runtime.
            let (dir, id) = (self.disks_dir.clone(), id.clone());
            blocking(move || make_disk_copy(&dir, &id, &disk_meta, thick, &from)).await?;
        } else if thick {
            // Allocating every block takes as long as the size asks: off the runtime.
            let (dir, id) = (self.disks_dir.clone(), id.clone());
            blocking(move || make_disk_file(&dir, &id, &disk_meta, true)).await?;
        } else {
            // A sparse file is a few small writes, cheaper than the hop to a blocking
            // thread (which, on a loaded machine, waits for a core).
            make_disk_file(&self.disks_dir, &id, &disk_meta, false)?;
        }
        if let Err(e) = self.store.commit(Mutation::Put(record.clone())).await {
            let _ = std::fs::remove_file(self.path_of(&id));
            let _ = meta::remove(&self.disks_dir, &id);
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
        {
            let mut index = self.index();
            index.disks.remove(id.as_str());
            index.by_name.remove(&record.name);
        }
        // Last: a crash before this leaves a metadata file without its disk, which the
        // next start removes (it describes nothing any more).
        meta::remove(&self.disks_dir, &id)
    }

    async fn attach_disk(&self, raw_id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        if !self.knows_node(node)? {
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
                loopdev::detach_when_released(index, &path, RELEASE_WAIT)
                    .map_err(|e| loop_error(&what, e))?;
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
        let loops: Vec<u32> = record.attachments.iter().map(|a| a.loop_index).collect();
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
        self.knows_node(node)
    }

    fn snapshots(&self) -> bool {
        true
    }

    async fn create_snapshot(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        self.validate_snapshot_parameters(&spec.parameters)?;
        // By name first: a repeated create answers without the disk (which an attach
        // may hold just now, or which may be gone since).
        if let Some(existing) = self.snapshots.by_name(&spec.name) {
            return existing.answer(&spec);
        }
        // The disk is held while it is copied: not deleted, grown, attached or detached
        // under the copy (those are ABORTED, and retried, meanwhile).
        let (id, _claim) = self.claim(&spec.source)?;
        let record = self.record(&id)?;
        let file = self.path_of(&id);
        let snapshots = Arc::clone(&self.snapshots);
        blocking(move || snapshots.create(&spec, &file, record.size_bytes)).await
    }

    async fn snapshot(&self, id: &str) -> Result<Snapshot> {
        self.snapshots.get(id)
    }

    async fn list_snapshots_page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<Snapshot>, bool)> {
        Ok(self.snapshots.page(source, after, max))
    }

    async fn delete_snapshot(&self, id: &str) -> Result<()> {
        self.snapshots.delete(id)
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

/// Makes the disk file of `id` with its metadata file beside it: the metadata first,
/// then the file, whose size comes last — so a crash at any point leaves no disk file, or
/// one shorter than its metadata says (never acknowledged: the next start removes both),
/// or a whole disk with its metadata. (No sync here: the store's commit that follows
/// makes the create durable, see [`meta::create`].)
fn make_disk_file(disks_dir: &Path, id: &DiskId, disk_meta: &DiskMeta, thick: bool) -> Result<()> {
    meta::create(disks_dir, id, disk_meta)?;
    let made = files::create(&disks_dir.join(id.file_name()), disk_meta.size_bytes, thick);
    if made.is_err() {
        let _ = meta::remove(disks_dir, id);
    }
    made
}

/// Makes the disk file of `id` as a copy of `from`, with its metadata file beside it:
/// the metadata first, then the copy, whose size comes last and which is synced before
/// the store's commit (its data is what the caller relies on).
fn make_disk_copy(
    disks_dir: &Path,
    id: &DiskId,
    disk_meta: &DiskMeta,
    thick: bool,
    from: &std::fs::File,
) -> Result<()> {
    meta::create(disks_dir, id, disk_meta)?;
    let made = files::create_copy(
        &disks_dir.join(id.file_name()),
        from,
        disk_meta.size_bytes,
        thick,
    );
    match made {
        Ok(how) => {
            tracing::info!(disk.id = %id, copy = ?how, "copied a disk's content");
            Ok(())
        }
        Err(e) => {
            let _ = meta::remove(disks_dir, id);
            Err(e)
        }
    }
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
