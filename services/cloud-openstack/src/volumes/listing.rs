//! Cinder's volume listings, paged by `limit` and `marker` in id order.

use http::Method;
use overcast_cloud::Result;

use super::{unexpected, CinderDisks, Many, Volume};
use crate::client::{json, Service};

impl CinderDisks {
    pub async fn list_volumes(&self) -> Result<Vec<Volume>> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut path = format!("/volumes/detail?limit={}&sort=id:asc", self.page);
            if let Some(m) = &marker {
                path.push_str(&format!("&marker={m}"));
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
            if resp.status.as_u16() != 200 {
                return Err(unexpected("volume_list", &resp));
            }
            let page = json::<Many>("volume_list", &resp)?.volumes;
            let last = page.last().map(|v| v.id.clone());
            let full = page.len() >= self.page;
            out.extend(page);
            match (full, last) {
                (true, Some(id)) if marker.as_ref() != Some(&id) => marker = Some(id),
                _ => return Ok(out),
            }
        }
    }
}
