//! Attaching a volume to a server through Nova's `os-volume_attachments`, and detaching it.

use super::*;

impl CinderDisks {
    pub(super) async fn attach(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        // Cinder attaches read-write either way; a read-only publish is the node's mount.
        if !is_uuid(node) {
            return Err(CloudError::not_found("server", node));
        }
        let node_owned = node.to_owned();
        // Nova reserves the volume before it answers the attach; a volume `available`
        // again afterwards means the attach failed in the compute service and was rolled
        // back (seen here: its database was locked): it is asked again, a few times,
        // within the call's one wait, rather than waited on until the deadline.
        let started = Instant::now();
        let mut asked = 0;
        loop {
            let v = self.get(id).await?;
            if attached_to(&v, node) {
                break;
            }
            if !v.attachments.is_empty() && !v.multiattach {
                return Err(CloudError::FailedPrecondition(format!(
                    "volume {id} is attached to {} and is not multiattach",
                    v.attachments
                        .iter()
                        .filter_map(|a| a.server_id.clone())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            // A multiattach volume attached elsewhere stays `in-use` while it is attached
            // here too.
            let attachable = v.status == "available" || (v.multiattach && v.status == "in-use");
            if attachable {
                if asked == 3 {
                    return Err(CloudError::Unavailable(format!(
                        "openstack: Nova took the attach of volume {id} to server {node} {asked} times and rolled it back each time"
                    )));
                }
                asked += 1;
                let microversion = match v.multiattach {
                    true => {
                        self.os
                            .require(
                                Service::Compute,
                                MULTIATTACH,
                                "attaching a multiattach volume",
                            )
                            .await?;
                        Some(MULTIATTACH)
                    }
                    false => None,
                };
                let body = json!({"volumeAttachment": {"volumeId": id}});
                let resp = self
                    .os
                    .call(
                        Service::Compute,
                        "server_volume_attach",
                        Method::POST,
                        &format!("/servers/{node}/os-volume_attachments"),
                        Some(&body),
                        microversion,
                    )
                    .await?;
                match resp.status.as_u16() {
                    200 | 202 => {}
                    404 => return Err(CloudError::not_found("server", node)),
                    // A server whose state forbids the call (ERROR, SHELVED): no retry
                    // changes it. Else the volume or server is in a transition
                    // (attaching, detaching, a task under way): wait below.
                    409 => {
                        if let Some(refused) = state_refusal(&resp) {
                            return Err(refused);
                        }
                    }
                    // Nova still holds its record of an attachment to this very server
                    // that Cinder has let go (a detach finishing): retried.
                    400 if bad_request(&resp)
                        .contains(&format!("already attached to instances: {node}")) =>
                    {
                        return Err(CloudError::Conflict(format!(
                            "openstack: Nova still records volume {id} on server {node}: {}",
                            bad_request(&resp)
                        )))
                    }
                    _ => return Err(unexpected("server_volume_attach", &resp)),
                }
            }
            // A rolled-back attach of a multiattach volume held elsewhere leaves it
            // `in-use`, like one still attaching: that one waits out the call's wait and
            // the CO's retry asks again.
            let left = self.waits.attached.saturating_sub(started.elapsed());
            let node = node_owned.clone();
            let v = self
                .wait(id, "being attached", left, move |v| {
                    attached_to(v, &node) && v.status == "in-use" || v.status == "available"
                })
                .await?;
            if v.status == "in-use" && attached_to(&v, &node_owned) {
                break;
            }
        }
        Ok(Attachment {
            node: node.to_owned(),
            readonly,
            publish_context: context(id),
        })
    }

    pub(super) async fn detach(&self, id: &str, node: &str) -> Result<()> {
        let v = match self.get(id).await {
            Ok(v) => v,
            // A volume that is gone is attached nowhere.
            Err(CloudError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        if !attached_to(&v, node) {
            return Ok(());
        }
        let resp = self
            .os
            .call(
                Service::Compute,
                "server_volume_detach",
                Method::DELETE,
                &format!("/servers/{node}/os-volume_attachments/{id}"),
                None,
                None,
            )
            .await?;
        match resp.status.as_u16() {
            202 | 204 => {}
            404 => {
                // Nova says the server (or the attachment) is gone. A server deleted
                // while Cinder could not be told (cinder-api down, a crashed compute)
                // leaves Cinder's attachment behind and the volume `in-use` for good
                // (cloud-provider-openstack #1056): once Nova says the server is gone,
                // its attachment is removed through Cinder's own attachments API.
                if !self.server_exists(node).await? {
                    self.remove_stale_attachments(&v, node).await?;
                }
            }
            409 => {
                if let Some(refused) = state_refusal(&resp) {
                    return Err(refused);
                }
            }
            // Cinder's begin_detaching refuses a volume whose attach has not completed
            // (or whose detach is under way): a transition, retried, not a bad request.
            400 if bad_request(&resp).contains("Unable to detach volume") => {
                return Err(CloudError::Conflict(format!(
                    "openstack: volume {id} is between states on server {node}: {}",
                    bad_request(&resp)
                )))
            }
            _ => return Err(unexpected("server_volume_detach", &resp)),
        }
        let started = Instant::now();
        let node_owned = node.to_owned();
        self.wait(id, "being detached", self.waits.detached, move |v| {
            !attached_to(v, &node_owned)
        })
        .await?;
        // Cinder lets the attachment go before nova-compute drops its own record of it
        // (the block device mapping): an attach to the same server in between is refused
        // ("already attached") or left reserved. Done is when Nova no longer lists it.
        let mut delay = Duration::from_millis(100);
        loop {
            let resp = self
                .os
                .call(
                    Service::Compute,
                    "server_volume_get",
                    Method::GET,
                    &format!("/servers/{node}/os-volume_attachments/{id}"),
                    None,
                    None,
                )
                .await?;
            match resp.status.as_u16() {
                404 => return Ok(()),
                200 => {}
                _ => return Err(unexpected("server_volume_get", &resp)),
            }
            if started.elapsed() + delay > self.waits.detached {
                return Err(CloudError::DeadlineExceeded(format!(
                    "openstack: Nova still lists volume {id} on server {node} after {:?}",
                    self.waits.detached
                )));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// Removes Cinder's attachments of volume `v` to `server`, a server Nova says is
    /// gone (`DELETE /attachments/{id}`, microversion 3.27).
    async fn remove_stale_attachments(&self, v: &Volume, server: &str) -> Result<()> {
        let stale: Vec<&str> = v
            .attachments
            .iter()
            .filter(|a| a.server_id.as_deref() == Some(server))
            .filter_map(|a| a.attachment_id.as_deref())
            .filter(|a| is_uuid(a))
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        self.os
            .require(
                Service::BlockStorage,
                ATTACHMENTS,
                "removing the attachment of a deleted server",
            )
            .await?;
        for attachment in stale {
            let resp = self
                .os
                .call(
                    Service::BlockStorage,
                    "attachment_delete",
                    Method::DELETE,
                    &format!("/attachments/{attachment}"),
                    None,
                    Some(ATTACHMENTS),
                )
                .await?;
            match resp.status.as_u16() {
                200 | 202 | 204 | 404 => {}
                _ => return Err(unexpected("attachment_delete", &resp)),
            }
        }
        Ok(())
    }
}

/// Nova's 409 for a server whose state forbids the call — "Cannot 'detach_volume'
/// instance … while it is in vm_state error" (`InstanceInvalidState`) — as the
/// FAILED_PRECONDITION no retry changes, with Nova's own reason. A 409 naming a
/// `task_state` (a task under way) or another conflict (the volume busy) is `None`:
/// waited on.
/// The message of a Nova 400 (`badRequest.message`), or "".
pub(super) fn bad_request(resp: &overcast_cloud_http::Response) -> String {
    serde_json::from_slice::<Value>(&resp.body)
        .ok()
        .and_then(|d| d["badRequest"]["message"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn state_refusal(resp: &overcast_cloud_http::Response) -> Option<CloudError> {
    let doc: Value = serde_json::from_slice(&resp.body).ok()?;
    let message = doc["conflictingRequest"]["message"].as_str()?;
    message
        .contains("while it is in vm_state")
        .then(|| CloudError::FailedPrecondition(format!("openstack: Nova refused: {message}")))
}
