//! This cluster's disks, read without reading the engine's others.
//!
//! The engine can narrow a disk listing but not page it: `GET /disks` with a `search`
//! runs the search whole and keeps its first `max` (BackendDisksResource; `page 2` and
//! later answer nothing), so the search itself must be narrow. Ours are told by their
//! description (it holds the cluster's name, see `names`) and the oVirt CSI driver's by
//! their `pvc-<uid>` alias: `alias=pvc-* or description=*<cluster>*` answers those
//! alone, and [`EngineDisks::ours`] keeps the exact ones. A cluster name the search
//! cannot hold as a bare value (anything but letters, digits and `-_.`) lists every disk.
//!
//! Where a disk is attached comes only with the disk read alone (`all_content=true`: no
//! listing carries a disk's `vms`, and a VM search cannot ask for the VMs holding a disk),
//! so the attachments of a page are its disks' reads, a few at a time — the cost follows
//! this cluster's disks, not the engine's VMs.

use futures::StreamExt;

use super::*;

/// Disk reads in flight at once for a page's attachments.
const READS_AT_ONCE: usize = 8;

impl EngineDisks {
    /// The cluster's disks as the engine lists them (no attachments), in id order.
    pub(crate) async fn ours_listed(&self) -> Result<Vec<Value>> {
        let path = match bare(&self.cluster) {
            true => {
                let search = format!("alias=pvc-* or description=*{}*", self.cluster);
                let query: String = form_urlencoded::Serializer::new(String::new())
                    .append_pair("search", &search)
                    .finish();
                format!("/disks?{query}")
            }
            false => "/disks".to_owned(),
        };
        let doc = self
            .engine
            .json("disk_search", Method::GET, &path, None)
            .await?;
        let mut ours: Vec<Value> = members(&doc, "disk")
            .filter(|d| self.ours(d))
            .cloned()
            .collect();
        ours.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        Ok(ours)
    }

    /// `listed` as disks, each with its attachments (one read each; a disk gone since
    /// the listing is left out).
    pub(crate) async fn with_attachments(&self, listed: Vec<Value>) -> Result<Vec<Disk>> {
        let reads = futures::stream::iter(listed.into_iter().map(|d| async move {
            let id = d["id"].as_str().unwrap_or_default().to_owned();
            match self.get(&id).await {
                Ok(full) => Ok(Some(self.to_disk(&full))),
                Err(CloudError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        }))
        .buffered(READS_AT_ONCE)
        .collect::<Vec<Result<Option<Disk>>>>()
        .await;
        let mut out = Vec::new();
        for read in reads {
            out.extend(read?);
        }
        Ok(out)
    }
}

/// Whether the search can hold `value` bare, wildcards around it: letters, digits and
/// `-_.` (`_` the backend escapes; `*`, quotes, spaces, `'`, `;`, `\` it would not take
/// as written).
fn bare(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::bare;

    #[test]
    fn only_a_plain_cluster_name_is_searched_bare() {
        for plain in ["prod", "k8s-1.test_a"] {
            assert!(bare(plain), "{plain}");
        }
        for hard in ["", "two words", "it's", "a;b", "x*", "q\"", "back\\", "ünï"] {
            assert!(!bare(hard), "{hard}");
        }
    }
}
