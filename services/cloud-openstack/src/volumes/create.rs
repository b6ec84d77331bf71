//! Making a volume, name-idempotent (cinder-csi-plugin's cluster metadata records the
//! parameters).

use super::*;

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
        let existing = self.by_name(&spec.name).await?;
        let volume = match existing.as_slice() {
            [] => {
                let mut metadata: BTreeMap<String, String> = spec.metadata.clone();
                metadata.insert(CLUSTER_METADATA.to_owned(), self.cluster.clone());
                metadata.insert(
                    PARAMETERS_METADATA.to_owned(),
                    serde_json::to_string(&spec.parameters).unwrap_or_default(),
                );
                let mut body = json!({"volume": {
                    "name": spec.name,
                    "size": gib,
                    "metadata": metadata,
                }});
                if let Some(t) = &volume_type {
                    body["volume"]["volume_type"] = json!(t);
                }
                if let Some(az) = &az {
                    body["volume"]["availability_zone"] = json!(az);
                }
                if let Some(source) = &spec.source {
                    if !is_uuid(source) {
                        return Err(CloudError::not_found("volume", source));
                    }
                    body["volume"]["source_volid"] = json!(source);
                }
                let resp = self
                    .os
                    .call(
                        Service::BlockStorage,
                        "volume_create",
                        Method::POST,
                        "/volumes",
                        Some(&body),
                        None,
                    )
                    .await?;
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
        if volume.size < gib
            || volume_type
                .as_ref()
                .is_some_and(|t| volume.volume_type.as_ref() != Some(t))
        {
            return Err(CloudError::ParameterMismatch {
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
            Err(CloudError::Internal(why)) => {
                // It will never become available: leave nothing behind.
                let _ = self.delete_disk(&id).await;
                return Err(if why.contains("quota") {
                    CloudError::ResourceExhausted(why)
                } else {
                    CloudError::Internal(format!("{why} (deleted)"))
                });
            }
            Err(e) => return Err(e),
        };
        Ok(self.to_disk(&ready))
    }
}
