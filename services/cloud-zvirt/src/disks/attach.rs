//! Attaching a disk to a VM (a disk attachment, `virtio_scsi`, active) and detaching it.

use super::*;

impl EngineDisks {
    pub(super) async fn attach(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        if !is_id(node) {
            return Err(CloudError::not_found("vm", node));
        }
        // The VM is not looked up first: the engine says when it is gone.
        let d = self.get(id).await?;
        let elsewhere: Vec<&str> = members(&d["vms"], "vm")
            .filter_map(|vm| vm["id"].as_str())
            .filter(|vm| *vm != node)
            .collect();
        if !elsewhere.is_empty() && !boolean(&d["shareable"]) {
            return Err(CloudError::FailedPrecondition(format!(
                "zvirt: disk {id} is attached to VM {} and is not shareable",
                elsewhere.join(", ")
            )));
        }
        let existing = self.attachment(id, node).await?;
        // Attached but inactive (deactivated by hand, or a hot-plug that failed): the
        // engine will not activate it by itself.
        if existing.as_ref().is_some_and(|a| !boolean(&a["active"])) {
            self.engine
                .json(
                    "diskattachment_update",
                    Method::PUT,
                    &format!("/vms/{node}/diskattachments/{id}"),
                    Some(&json!({"active": "true"})),
                )
                .await?;
        }
        if existing.is_none() {
            let body = json!({
                "disk": {"id": id},
                "interface": "virtio_scsi",
                "bootable": "false",
                "active": "true",
                "read_only": readonly.to_string(),
            });
            match self
                .engine
                .json(
                    "diskattachment_add",
                    Method::POST,
                    &format!("/vms/{node}/diskattachments"),
                    Some(&body),
                )
                .await
            {
                Ok(_) => {}
                // AttachDiskToVmCommand answers a gone VM with 400
                // ACTION_TYPE_FAILED_VM_NOT_FOUND, not a 404: read the fault.
                Err(CloudError::NotFound { .. }) => return Err(CloudError::not_found("vm", node)),
                Err(CloudError::InvalidArgument(why)) if why.contains("VM is not found") => {
                    return Err(CloudError::not_found("vm", node))
                }
                // Attached elsewhere since it was read, or illegal: no retry changes it.
                Err(CloudError::Conflict(why)) if why.contains("already attached to a VM") => {
                    return Err(CloudError::FailedPrecondition(why))
                }
                Err(CloudError::InvalidArgument(why)) if why.contains("illegal state") => {
                    return Err(CloudError::FailedPrecondition(why))
                }
                // The disk's storage domain is not in the VM's data center
                // (ACTION_TYPE_FAILED_STORAGE_POOL_NOT_MATCH): no retry changes that.
                Err(CloudError::Conflict(why)) if why.contains("Data Center does not contain") => {
                    return Err(CloudError::FailedPrecondition(format!(
                        "zvirt: disk {id} is on storage of another data center than VM {node}'s: {why}"
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            match self.attachment(id, node).await? {
                Some(a) if boolean(&a["active"]) => break,
                Some(_) => {}
                None => {
                    return Err(CloudError::Unavailable(format!(
                        "zvirt: the attachment of disk {id} to VM {node} went away while being activated"
                    )))
                }
            }
            if started.elapsed() + delay > self.waits.active {
                return Err(CloudError::DeadlineExceeded(format!(
                    "zvirt: the attachment of disk {id} to VM {node} is not active after {:?}",
                    self.waits.active
                )));
            }
            tokio::time::sleep(delay).await;
            delay = next_delay(started, delay);
        }
        Ok(Attachment {
            node: node.to_owned(),
            readonly,
            publish_context: context(id),
        })
    }

    pub(super) async fn detach(&self, id: &str, node: &str) -> Result<()> {
        // A node that cannot be a VM id has nothing attached; nor does a gone VM.
        if !is_id(node) || !is_id(id) {
            return Ok(());
        }
        match self
            .engine
            .json(
                "diskattachment_remove",
                Method::DELETE,
                &format!("/vms/{node}/diskattachments/{id}"),
                None,
            )
            .await
        {
            Ok(_) | Err(CloudError::NotFound { .. }) => {}
            // DetachDiskFromVmCommand answers a gone VM and a disk that is not attached
            // with 400 (ACTION_TYPE_FAILED_VM_NOT_FOUND,
            // ACTION_TYPE_FAILED_CANNOT_DETACH_DISK_IS_NOT_ATTACHED_TO_VM): detached.
            Err(CloudError::InvalidArgument(why))
                if why.contains("VM is not found") || why.contains("is not attached to the VM") =>
            {
                return Ok(())
            }
            Err(e) => return Err(e),
        }
        let started = Instant::now();
        while self.attachment(id, node).await?.is_some() {
            if started.elapsed() > self.waits.gone {
                return Err(CloudError::DeadlineExceeded(format!(
                    "zvirt: disk {id} still attached to VM {node} {:?} after the detach",
                    self.waits.gone
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }
}
