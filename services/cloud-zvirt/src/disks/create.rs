//! Making a disk, name-idempotent by alias.

use super::*;

impl EngineDisks {
    pub(super) async fn create(&self, spec: DiskSpec) -> Result<Disk> {
        self.validate_parameters(&spec.parameters)?;
        let _slot = self.creating.claim(&spec.name)?;
        if let Some(found) = self.by_alias(&spec.name).await?.into_iter().next() {
            let disk = self.to_disk(&found);
            // The oVirt CSI driver's disk (a create it began before the switch, repeated
            // to us) records no parameters: its size is all there is to compare, as that
            // driver compares nothing.
            let unlike = !read::upstream_made(&found) && disk.parameters != spec.parameters;
            if disk.size_bytes < spec.size_bytes || unlike {
                return Err(CloudError::ParameterMismatch {
                    kind: "disk",
                    name: spec.name,
                    reason: format!(
                        "disk {} has {} bytes and {:?}",
                        disk.id, disk.size_bytes, disk.parameters
                    ),
                });
            }
            // Found is not made: only a disk the engine says is `ok` answers a create.
            // `locked` is a disk still being made — or being removed, which the engine
            // shows the same way — so it is waited for: gone, it is made anew below.
            match self
                .wait(&disk.id, "being made", self.waits.unlocked, |d| {
                    d["status"] == "ok"
                })
                .await
            {
                Ok(d) => return Ok(self.to_disk(&d)),
                Err(CloudError::NotFound { .. }) => {}
                // `illegal`: the engine failed to make its image; it holds nothing
                // anybody was given (a create is repeated only until it answers OK).
                Err(CloudError::Internal(why)) => {
                    return Err(self.remove_illegal(&disk.id, why).await)
                }
                Err(e) => return Err(e),
            }
        }
        let thin = self.overcommits(&spec.parameters);
        let domain = spec.parameters[STORAGE_DOMAIN_PARAMETER].trim();
        // A class naming a domain the engine does not have: the caller's mistake, said
        // before anything is made (NOT_FOUND is CSI's answer for a missing *source*).
        let region = match self.region(domain).await? {
            Some(region) => region,
            None if self.domains().await?.contains_key(domain) => String::new(),
            None => {
                return Err(CloudError::InvalidArgument(format!(
                    "zvirt: {STORAGE_DOMAIN_PARAMETER} {domain:?} names no data storage domain of the engine"
                )))
            }
        };
        let alias = alias_for(&spec.name);
        let description = names::description_text(&Description {
            cluster: self.cluster.clone(),
            parameters: spec.parameters.clone(),
            metadata: spec.metadata.clone(),
            region,
            name: (alias != spec.name).then(|| spec.name.clone()),
        })?;
        let size = spec.size_bytes.div_ceil(MIB) * MIB;
        let body = json!({
            "alias": alias,
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
        self.wrote(&spec.name, &id);
        match self
            .wait(&id, "being made", self.waits.unlocked, |d| {
                d["status"] == "ok"
            })
            .await
        {
            Ok(d) => Ok(self.to_disk(&d)),
            // An illegal new disk holds nothing: removed, and the create reported.
            Err(CloudError::Internal(why)) => Err(self.remove_illegal(&id, why).await),
            Err(e) => Err(e),
        }
    }

    /// Removes disk `id` once the engine says again that it is `illegal` (an answer that
    /// could not be read is no reason to remove anything), and says what became of it.
    async fn remove_illegal(&self, id: &str, why: String) -> CloudError {
        match self.get(id).await {
            Ok(d) if d["status"] == "illegal" => {}
            _ => return CloudError::Internal(why),
        }
        let left = match self.delete_disk(id).await {
            Ok(()) => "removed",
            Err(_) => "its removal failed; the next create retries it",
        };
        CloudError::Internal(format!("{why} ({left})"))
    }
}
