//! Making a volume, name-idempotent (cinder-csi-plugin's cluster metadata records the
//! parameters).

use super::*;

/// What cinder-csi writes as each new volume's description (`volumeDescription`,
/// pkg/csi/cinder/openstack/openstack_volumes.go): operators' scripts and dashboards
/// filter on it.
const VOLUME_DESCRIPTION: &str = "Created by OpenStack Cinder CSI driver";

impl CinderDisks {
    pub(super) async fn create(&self, spec: DiskSpec) -> Result<Disk> {
        self.validate_parameters(&spec.parameters)?;
        if spec.name.is_empty() || spec.name.len() > 255 {
            return Err(CloudError::InvalidArgument(format!(
                "volume name of {} characters (Cinder takes 1 to 255)",
                spec.name.len()
            )));
        }
        let gib = spec.size_bytes.div_ceil(GIB).max(1);
        let az = spec
            .parameters
            .get(AVAILABILITY_PARAMETER)
            .cloned()
            .or_else(|| Some(spec.zone.zone.clone()).filter(|z| !z.is_empty()));
        let volume_type = spec.parameters.get(TYPE_PARAMETER).cloned();
        let _slot = self.creating.claim(&spec.name)?;
        let mut existing = self.by_name(&spec.name).await?;
        if let [one] = existing.as_slice() {
            if one.status == "deleting" {
                // A volume of this name on its way out is not the one asked for: wait
                // for it to go, then make the new one.
                self.wait_gone(&one.id).await?;
                existing.clear();
            }
        }
        let mut metadata: BTreeMap<String, String> = spec.metadata.clone();
        metadata.insert(CLUSTER_METADATA.to_owned(), self.cluster.clone());
        metadata.insert(
            PARAMETERS_METADATA.to_owned(),
            serde_json::to_string(&spec.parameters).unwrap_or_default(),
        );
        let volume = match existing.as_slice() {
            [] => {
                let mut body = json!({"volume": {
                    "name": spec.name,
                    "size": gib,
                    "description": VOLUME_DESCRIPTION,
                    "metadata": metadata,
                }});
                if let Some(t) = &volume_type {
                    body["volume"]["volume_type"] = json!(t);
                }
                if let Some(az) = &az {
                    body["volume"]["availability_zone"] = json!(az);
                }
                match &spec.source {
                    None => {}
                    Some(DiskSource::Disk(source)) => {
                        if !is_uuid(source) {
                            return Err(CloudError::not_found("volume", source));
                        }
                        body["volume"]["source_volid"] = json!(source);
                    }
                    Some(DiskSource::Snapshot(source)) => {
                        if !is_uuid(source) {
                            return Err(CloudError::not_found("snapshot", source));
                        }
                        // Cinder puts the volume in the snapshot's zone when none is
                        // asked for, and refuses another (`cloned_volume_same_az`).
                        body["volume"]["snapshot_id"] = json!(source);
                    }
                }
                let mut resp = self.post_volume(&body, None).await?;
                if let (404, Some(DiskSource::Snapshot(source))) =
                    (resp.status.as_u16(), &spec.source)
                {
                    // No such snapshot: the id may be a backup's (a class of `type:
                    // backup`), asked after the miss so that a restore from a snapshot
                    // costs what it did.
                    match self.cinder_backup(source).await {
                        Ok(_) => {
                            if let Some(v) = body["volume"].as_object_mut() {
                                v.remove("snapshot_id");
                            }
                            self.restore_body(&mut body, source).await?;
                            resp = self
                                .post_volume(&body, Some(super::backups::VOLUME_FROM_BACKUP))
                                .await?;
                        }
                        Err(CloudError::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                match resp.status.as_u16() {
                    200 | 202 => json::<One>("volume_create", &resp)?.volume,
                    413 => {
                        return Err(CloudError::ResourceExhausted(format!(
                            "{}",
                            unexpected("volume_create", &resp)
                        )))
                    }
                    _ => return Err(unexpected("volume_create", &resp)),
                }
            }
            [one] => one.clone(),
            many => {
                return Err(CloudError::FailedPrecondition(format!(
                    "{} volumes are named {:?}; which one is the volume is ambiguous",
                    many.len(),
                    spec.name
                )))
            }
        };
        let same_type = match (&volume_type, &volume.volume_type) {
            (None, _) => true,
            (Some(asked), Some(have)) if asked == have => true,
            // Cinder answers a volume's type by name; a class may name it by id, as
            // cinder-csi-plugin accepts.
            (Some(asked), Some(have)) if is_uuid(asked) => {
                self.type_name(asked).await?.as_deref() == Some(have.as_str())
            }
            _ => false,
        };
        if volume.size < gib || !same_type {
            return Err(CloudError::ParameterMismatch {
                kind: "disk",
                name: spec.name,
                reason: format!(
                    "volume {} has {} GiB of type {:?}",
                    volume.id, volume.size, volume.volume_type
                ),
            });
        }
        let id = volume.id.clone();
        let ready = match self
            .wait(&id, "being made", self.waits.available, |v| {
                v.status == "available" || v.status == "in-use"
            })
            .await
        {
            Ok(v) => v,
            // Only `available` or `in-use` answers a create, first or repeated: an
            // `error` volume will never become available, so nothing is left behind.
            Err(CloudError::Internal(why)) => return Err(self.remove_failed(&id, why).await),
            Err(CloudError::NotFound { .. }) => {
                return Err(CloudError::Unavailable(format!(
                    "openstack: volume {id} named {:?} was deleted while it was being made; a retry makes it again",
                    spec.name
                )))
            }
            Err(e) => return Err(e),
        };
        let ready = self.restored_metadata(ready, &spec, metadata).await?;
        Ok(self.to_disk(&ready))
    }

    async fn post_volume(
        &self,
        body: &Value,
        microversion: Option<Microversion>,
    ) -> Result<overcast_cloud_http::Response> {
        self.os
            .call(
                Service::BlockStorage,
                "volume_create",
                Method::POST,
                "/volumes",
                Some(body),
                microversion,
            )
            .await
    }

    /// Waits until volume `id`, being deleted, is gone; `Busy` while it is still there
    /// when the wait ends.
    pub(super) async fn wait_gone(&self, id: &str) -> Result<()> {
        match self
            .wait(id, "being deleted", self.waits.deleted, |_| false)
            .await
        {
            Err(CloudError::NotFound { .. }) => Ok(()),
            Err(CloudError::DeadlineExceeded(why)) => Err(CloudError::Busy(format!(
                "{why}; a retry makes the volume again once it is gone"
            ))),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    /// Deletes volume `id` once Cinder says again that it is in `error` (an answer that
    /// could not be read is no reason to delete anything), and says why the create failed.
    async fn remove_failed(&self, id: &str, why: String) -> CloudError {
        match self.get(id).await {
            // `error_restoring`: a restore from a backup that failed.
            Ok(v) if v.status == "error" || v.status == "error_restoring" => {}
            _ => return CloudError::Internal(why),
        }
        let left = match self.delete_disk(id).await {
            Ok(()) => "deleted",
            Err(_) => "its deletion failed; the next create retries it",
        };
        if why.contains("quota") {
            CloudError::ResourceExhausted(format!("{why} ({left})"))
        } else {
            CloudError::Internal(format!("{why} ({left})"))
        }
    }

    /// The name of volume type `id` (`None` when Cinder has no such type).
    async fn type_name(&self, id: &str) -> Result<Option<String>> {
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "volume_type_get",
                Method::GET,
                &format!("/types/{id}"),
                None,
                None,
            )
            .await?;
        match resp.status.as_u16() {
            200 => {
                let doc: Value = json("volume_type_get", &resp)?;
                Ok(doc["volume_type"]["name"].as_str().map(str::to_owned))
            }
            404 => Ok(None),
            _ => Err(unexpected("volume_type_get", &resp)),
        }
    }
}
