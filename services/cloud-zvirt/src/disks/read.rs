//! Reading a disk the engine answered: what it is to CSI, and whether it is this
//! cluster's.

use super::*;

impl EngineDisks {
    pub(super) fn to_disk(&self, d: &Value) -> Disk {
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
        Disk {
            id: d["id"].as_str().unwrap_or_default().to_owned(),
            name: description.name.unwrap_or_else(|| alias.to_owned()),
            size_bytes: number(&d["provisioned_size"]).unwrap_or(0),
            zone: Zone {
                region: description.region,
                zone: String::new(),
            },
            parameters: description.parameters,
            metadata: description.metadata,
            attachments,
            condition,
            source: None,
        }
    }

    pub(super) fn ours(&self, d: &Value) -> bool {
        d["description"]
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
