//! Cinder's volume listings, paged by `limit` and `marker` in id order: the whole
//! project (what cinder-csi-plugin's ListVolumes answers), one ListVolumes page read as
//! one page of Cinder's, and the volumes of one cluster by Cinder's metadata filter.

use http::Method;
use overcast_cloud::Result;

use super::{encode, unexpected, CinderDisks, Many, Volume, CLUSTER_METADATA};
use crate::client::{json, Service};

impl CinderDisks {
    /// Every volume of the project.
    pub async fn list_volumes(&self) -> Result<Vec<Volume>> {
        self.read("", None, usize::MAX).await?.ok_or_else(|| {
            overcast_cloud::CloudError::Unavailable("openstack: volume_list refused".into())
        })
    }

    /// The volumes cinder-csi-plugin (and this driver) made for `cluster`: metadata
    /// `cinder.csi.openstack.org/cluster` is its id. Cinder filters them
    /// (`metadata` is one of its volume filters at every 3.x microversion, read as a
    /// Python literal); the answer is filtered again here, so a Cinder that ignored the
    /// filter costs bytes, never a wrong list — and one whose operator took `metadata`
    /// out of its `resource_filters.json` (a 400) is listed whole.
    pub async fn cluster_volumes(&self, cluster: &str) -> Result<Vec<Volume>> {
        let filter = serde_json::json!({ CLUSTER_METADATA: cluster }).to_string();
        let volumes = match self
            .read(&format!("&metadata={}", encode(&filter)), None, usize::MAX)
            .await?
        {
            Some(volumes) => volumes,
            None => {
                tracing::warn!(
                    "Cinder refused the metadata filter; listing every volume of the project"
                );
                self.list_volumes().await?
            }
        };
        Ok(volumes
            .into_iter()
            .filter(|v| v.metadata.get(CLUSTER_METADATA).map(String::as_str) == Some(cluster))
            .collect())
    }

    /// At most `max` volumes whose id sorts after `after`, and whether more follow: one
    /// ListVolumes page, read as `max + 1` volumes from Cinder. `None` when Cinder no
    /// longer knows `after` (deleted since the page before): the caller pages another way.
    pub async fn volumes_after(
        &self,
        after: Option<&str>,
        max: usize,
    ) -> Result<Option<(Vec<Volume>, bool)>> {
        let Some(mut volumes) = self.read("", after, max.saturating_add(1)).await? else {
            return Ok(None);
        };
        let more = volumes.len() > max;
        volumes.truncate(max);
        Ok(Some((volumes, more)))
    }

    /// Up to `want` volumes (sorted by id) after `after`, matching `filter` (`&key=value`
    /// pairs), page by page. `None`: Cinder refused the first page's question — its
    /// marker unknown (`MarkerNotFound`, a 404 or a 400 by release) or its filter not
    /// allowed (a 400).
    async fn read(
        &self,
        filter: &str,
        after: Option<&str>,
        want: usize,
    ) -> Result<Option<Vec<Volume>>> {
        let mut out: Vec<Volume> = Vec::new();
        let mut marker: Option<String> = after.map(str::to_owned);
        loop {
            let limit = self.page.min(want - out.len());
            let mut path = format!("/volumes/detail?limit={limit}&sort=id:asc{filter}");
            if let Some(m) = &marker {
                path.push_str(&format!("&marker={}", encode(m)));
            }
            let resp = self
                .os
                .call(
                    Service::BlockStorage,
                    "volume_list",
                    Method::GET,
                    &path,
                    None,
                    None,
                )
                .await?;
            match resp.status.as_u16() {
                200 => {}
                // Only a question with a marker or a filter can be refused so; a plain
                // listing answered 404 is an error (a wrong endpoint), never "no volume".
                400 | 404
                    if out.is_empty()
                        && marker.as_deref() == after
                        && (after.is_some() || !filter.is_empty()) =>
                {
                    tracing::info!(
                        marker = after.unwrap_or_default(),
                        filter,
                        status = resp.status.as_u16(),
                        "Cinder refused a listing's first page"
                    );
                    return Ok(None);
                }
                _ => return Err(unexpected("volume_list", &resp)),
            }
            let page = json::<Many>("volume_list", &resp)?.volumes;
            let last = page.last().map(|v| v.id.clone());
            let full = page.len() >= limit;
            out.extend(page);
            if out.len() >= want {
                return Ok(Some(out));
            }
            match (full, last) {
                (true, Some(id)) if marker.as_ref() != Some(&id) => marker = Some(id),
                _ => return Ok(Some(out)),
            }
        }
    }
}
