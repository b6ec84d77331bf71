//! Making a disk, name-idempotent by alias.

use super::*;

impl EngineDisks {
    pub(super) async fn create(&self, spec: DiskSpec) -> Result<Disk> {
        self.validate_parameters(&spec.parameters)?;
        // The engine's search cannot name such an alias, so a retried create could not
        // find the disk the first one made and would make another.
        if spec.name.contains('"') {
            return Err(CloudError::InvalidArgument(format!(
                "zvirt: a disk name cannot hold '\"' (the engine's search could not find it again): {:?}",
                spec.name
            )));
        }
        let _slot = self.creating.claim(&spec.name)?;
        if let Some(found) = self.by_alias(&spec.name).await?.into_iter().next() {
            let disk = self.to_disk(&found);
            if disk.size_bytes < spec.size_bytes || disk.parameters != spec.parameters {
                return Err(CloudError::ParameterMismatch {
                    name: spec.name,
                    reason: format!(
                        "disk {} has {} bytes and {:?}",
                        disk.id, disk.size_bytes, disk.parameters
                    ),
                });
            }
            let d = self
                .wait(&disk.id, "being made", self.waits.unlocked, |d| {
                    d["status"] == "ok"
                })
                .await?;
            return Ok(self.to_disk(&d));
        }
        let thin = self.overcommits(&spec.parameters);
        let domain = spec.parameters[STORAGE_DOMAIN_PARAMETER].trim();
        let description = serde_json::to_string(&Description {
            cluster: self.cluster.clone(),
            parameters: spec.parameters.clone(),
            metadata: spec.metadata.clone(),
            region: self.region(domain).await?.unwrap_or_default(),
        })
        .unwrap_or_default();
        let size = spec.size_bytes.div_ceil(MIB) * MIB;
        let body = json!({
            "alias": spec.name,
            "description": description,
            "provisioned_size": size.to_string(),
            "format": if thin { "cow" } else { "raw" },
            "sparse": thin.to_string(),
            "storage_domains": {"storage_domain": [{"name": domain}]},
        });
        let made = self
            .engine
            .json("disk_add", Method::POST, "/disks", Some(&body))
            .await
            .map_err(space_error)?;
        let id = made["id"].as_str().unwrap_or_default().to_owned();
        if !is_id(&id) {
            return Err(CloudError::Internal(format!(
                "zvirt: disk_add answered no disk id: {made}"
            )));
        }
        match self
            .wait(&id, "being made", self.waits.unlocked, |d| {
                d["status"] == "ok"
            })
            .await
        {
            Ok(d) => Ok(self.to_disk(&d)),
            Err(CloudError::Internal(why)) => {
                // An illegal new disk holds nothing: removed, and the create reported.
                let _ = self.delete_disk(&id).await;
                Err(CloudError::Internal(why))
            }
            Err(e) => Err(e),
        }
    }
}
