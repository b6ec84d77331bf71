//! What the parent lets this cluster still claim: its namespace's ResourceQuotas on
//! `requests.storage`. A tenant sees no more of the parent's storage than that.

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Api;
use overcast_cloud::Result;

use crate::api::quantity_bytes;
use crate::parent::Parent;

const STORAGE: &str = "requests.storage";

/// Bytes still claimable under the tightest quota, `None` when no quota limits storage.
pub async fn available_storage(parent: &Parent) -> Result<Option<u64>> {
    let api: Api<ResourceQuota> = Api::namespaced(parent.client.clone(), &parent.namespace);
    let quotas = parent
        .call(
            "resourcequota_list",
            "list ResourceQuotas",
            api.list(&Default::default()),
        )
        .await?;
    Ok(quotas
        .items
        .iter()
        .filter_map(|q| {
            let hard = q.status.as_ref()?.hard.as_ref()?.get(STORAGE)?;
            let used = q
                .status
                .as_ref()
                .and_then(|s| s.used.as_ref())
                .and_then(|u| u.get(STORAGE))
                .and_then(|u| quantity_bytes(&u.0))
                .unwrap_or(0);
            Some(quantity_bytes(&hard.0)?.saturating_sub(used))
        })
        .min())
}
