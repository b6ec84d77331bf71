//! Growing a volume (in use at Cinder microversion 3.42 and later).

use super::*;

impl CinderDisks {
    pub(super) async fn expand(&self, id: &str, size_bytes: u64) -> Result<u64> {
        let v = self.get(id).await?;
        let gib = size_bytes.div_ceil(GIB);
        if gib <= v.size {
            return Ok(v.size * GIB);
        }
        let in_use = v.status == "in-use";
        let version = if in_use {
            self.os
                .require(
                    Service::BlockStorage,
                    EXTEND_IN_USE,
                    "extending an attached volume",
                )
                .await?;
            Some(EXTEND_IN_USE)
        } else {
            None
        };
        let body = json!({"os-extend": {"new_size": gib}});
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "volume_extend",
                Method::POST,
                &format!("/volumes/{id}/action"),
                Some(&body),
                version,
            )
            .await?;
        match resp.status.as_u16() {
            202 | 200 => {}
            404 => return Err(CloudError::not_found("volume", id)),
            413 => {
                return Err(CloudError::ResourceExhausted(
                    unexpected("volume_extend", &resp).to_string(),
                ))
            }
            400 => {
                return Err(CloudError::FailedPrecondition(
                    unexpected("volume_extend", &resp).to_string(),
                ))
            }
            _ => return Err(unexpected("volume_extend", &resp)),
        }
        let grown = self
            .wait(id, "being extended", self.waits.extended, move |v| {
                v.size >= gib && (v.status == "available" || v.status == "in-use")
            })
            .await?;
        Ok(grown.size * GIB)
    }
}
