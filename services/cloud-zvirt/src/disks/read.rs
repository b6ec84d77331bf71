//! Reading a disk the engine answered: what it is to CSI, and whether it is this
//! cluster's.
//!
//! A cluster switched from the oVirt CSI driver (Deckhouse's zVirt module deploys
//! openshift/ovirt-csi-driver as `csi.ovirt.org`) has disks that driver made: aliased by
//! their PV's name (`pvc-<PVC uid>`, the external-provisioner's), with no description at
//! all — that driver writes none, and recognises its disks by the alias alone. Those are
//! taken as this cluster's too: listed, reported, published, expanded and deleted like
//! ours. The alias is all there is to go by, so a disk of another cluster on the same
//! engine made by that driver is listed as well; it is only ever reported (no PV names
//! it), never deleted by anything but a DeleteVolume of its id.

use overcast_cloud::discovery::{MADE_BY, PV_NAME_KEY};

use super::*;

impl EngineDisks {
    pub(crate) fn to_disk(&self, d: &Value) -> Disk {
        let description: Description = d["description"]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let attachments = members(&d["vms"], "vm")
            .filter_map(|vm| vm["id"].as_str())
            .map(|vm| Attachment {
                node: vm.to_owned(),
                readonly: false,
                publish_context: context(d["id"].as_str().unwrap_or_default()),
            })
            .collect();
        let condition = match d["status"].as_str() {
            Some("illegal") => DiskCondition::Abnormal("the engine marks the disk illegal".into()),
            _ => DiskCondition::Healthy,
        };
        let alias = d["alias"]
            .as_str()
            .or(d["name"].as_str())
            .unwrap_or_default();
        let mut metadata = description.metadata;
        if upstream_made(d) {
            // Its alias is its PV's name: what the orphan report matches PVs by.
            metadata.insert(PV_NAME_KEY.to_owned(), alias.to_owned());
            metadata.insert(MADE_BY.to_owned(), UPSTREAM_DRIVER.to_owned());
        }
        Disk {
            id: d["id"].as_str().unwrap_or_default().to_owned(),
            name: description.name.unwrap_or_else(|| alias.to_owned()),
            size_bytes: number(&d["provisioned_size"]).unwrap_or(0),
            zone: Zone {
                region: description.region,
                zone: String::new(),
            },
            parameters: description.parameters,
            metadata,
            attachments,
            condition,
            source: None,
        }
    }

    pub(super) fn ours(&self, d: &Value) -> bool {
        upstream_made(d)
            || d["description"]
                .as_str()
                .and_then(|s| serde_json::from_str::<Description>(s).ok())
                .is_some_and(|desc| desc.cluster == self.cluster)
    }

    /// The disks of this cluster made for CSI volume `name`: searched by their alias
    /// (which the search can always express, see `names`), and — when the search answers
    /// nothing for a disk this process made — looked up by id, never taken as absent on
    /// the search's word alone.
    pub(super) async fn by_alias(&self, name: &str) -> Result<Vec<Value>> {
        let alias = alias_for(name);
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("search", &format!("alias=\"{alias}\""))
            .finish();
        let doc = self
            .engine
            .json("disk_search", Method::GET, &format!("/disks?{query}"), None)
            .await?;
        let found: Vec<Value> = members(&doc, "disk")
            .filter(|d| d["alias"].as_str() == Some(alias.as_str()) && self.ours(d))
            .filter(|d| self.to_disk(d).name == name)
            .cloned()
            .collect();
        if !found.is_empty() {
            return Ok(found);
        }
        let known = self.written.lock().expect("written").get(name).cloned();
        let Some(id) = known else {
            return Ok(found);
        };
        match self.get(&id).await {
            Ok(d) if self.ours(&d) && self.to_disk(&d).name == name => Ok(vec![d]),
            Ok(_) => Ok(Vec::new()),
            Err(CloudError::NotFound { .. }) => {
                self.written.lock().expect("written").remove(name);
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// Remembers that this process made disk `id` for CSI volume `name`.
    pub(super) fn wrote(&self, name: &str, id: &str) {
        let mut written = self.written.lock().expect("written");
        // Only a bound on memory: what is forgotten is still found by the search.
        if written.len() >= 4096 {
            written.clear();
        }
        written.insert(name.to_owned(), id.to_owned());
    }
}

/// The driver whose disks are recognised beside ours.
pub(super) const UPSTREAM_DRIVER: &str = "ovirt-csi-driver";

/// A disk as the oVirt CSI driver makes it: no description, aliased `pvc-<uuid>`.
pub(super) fn upstream_made(d: &Value) -> bool {
    let described = d["description"].as_str().is_some_and(|s| !s.is_empty());
    !described
        && d["alias"]
            .as_str()
            .and_then(|a| a.strip_prefix("pvc-"))
            .is_some_and(overcast_cloud::is_uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ovirt_csi_driver_s_disks_are_told_by_their_alias_and_empty_description() {
        let upstream = |alias: &str, description: Option<&str>| {
            let mut d = json!({"id": "11111111-2222-3333-4444-555555555555", "alias": alias});
            if let Some(text) = description {
                d["description"] = json!(text);
            }
            upstream_made(&d)
        };
        let pv = "pvc-0b3c1f4e-6a8d-4c1e-9f2a-7d5e3b9c1a20";
        assert!(upstream(pv, None));
        assert!(upstream(pv, Some("")));
        // Ours (a description), a user's disk, another naming: not that driver's.
        assert!(!upstream(pv, Some("{\"cluster\":\"c\"}")));
        assert!(!upstream("data-disk", None));
        assert!(!upstream("pvc-not-a-uid", None));
        assert!(!upstream("PVC-0b3c1f4e-6a8d-4c1e-9f2a-7d5e3b9c1a20", None));
    }
}
