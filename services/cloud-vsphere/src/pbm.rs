//! Storage policies (SPBM, `/pbm`): the storage requirement profiles, by name and id, as
//! Deckhouse's discoverer lists them (`PbmQueryProfile` for resource type STORAGE and
//! category REQUIREMENT, then `PbmRetrieveContent`).

use std::sync::Arc;

use overcast_cloud::CloudError;
use tokio::sync::OnceCell;

use crate::session::{Endpoint, Vcenter};
use crate::soap::{el, Moref};

/// A storage policy: its name and its profile id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    pub id: String,
}

pub struct Pbm {
    vc: Arc<Vcenter>,
    profile_manager: OnceCell<Moref>,
}

impl Pbm {
    pub fn new(vc: Arc<Vcenter>) -> Self {
        Self {
            vc,
            profile_manager: OnceCell::new(),
        }
    }

    async fn manager(&self) -> Result<&Moref, CloudError> {
        self.profile_manager
            .get_or_try_init(|| async {
                let this = Moref::new("PbmServiceInstance", "ServiceInstance");
                let r = self
                    .vc
                    .call(
                        Endpoint::Pbm,
                        "PbmRetrieveServiceContent",
                        &this.xml("_this"),
                        true,
                    )
                    .await?;
                r.at(&["returnval", "profileManager"])
                    .and_then(Moref::of)
                    .ok_or_else(|| {
                        CloudError::Unavailable(format!(
                            "vsphere: {}: PBM names no profile manager",
                            self.vc.server()
                        ))
                    })
            })
            .await
    }

    /// Every storage requirement profile.
    pub async fn policies(&self) -> Result<Vec<Policy>, CloudError> {
        let manager = self.manager().await?.clone();
        let params = format!(
            "{}<resourceType>{}</resourceType>{}",
            manager.xml("_this"),
            el("resourceType", "STORAGE"),
            el("profileCategory", "REQUIREMENT")
        );
        let r = self
            .vc
            .call(Endpoint::Pbm, "PbmQueryProfile", &params, true)
            .await?;
        let ids: Vec<String> = r
            .all("returnval")
            .filter_map(|id| id.text_at(&["uniqueId"]).map(str::to_owned))
            .collect();
        // PbmRetrieveContent refuses an empty list.
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut params = manager.xml("_this");
        for id in &ids {
            params.push_str(&format!("<profileIds>{}</profileIds>", el("uniqueId", id)));
        }
        let r = self
            .vc
            .call(Endpoint::Pbm, "PbmRetrieveContent", &params, true)
            .await?;
        Ok(r.all("returnval")
            .filter_map(|p| {
                Some(Policy {
                    name: p.text_at(&["name"])?.to_owned(),
                    id: p.text_at(&["profileId", "uniqueId"])?.to_owned(),
                })
            })
            .collect())
    }
}
