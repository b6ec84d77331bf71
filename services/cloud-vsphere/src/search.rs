//! SearchIndex lookups: VMs by BIOS UUID, by their guest's DNS name, by IP address
//! (upstream's node discovery, `FindByUuid` / `FindAllByDnsName` / `FindAllByIp` with
//! `vmSearch`). One call each, answered from the vCenter's index: cheaper than reading the
//! inventory when one VM is wanted. The `All` forms are used so that two VMs answering to
//! one name are seen as two rather than one picked at random (vCenter answers the first).

use overcast_cloud::CloudError;

use crate::session::{Endpoint, Vcenter};
use crate::soap::{el, Moref};

/// The VM whose BIOS UUID (`config.uuid`, the providerID's) is `uuid`, in `datacenter` or
/// anywhere; `None` when there is none.
pub async fn vm_by_uuid(
    vc: &Vcenter,
    datacenter: Option<&Moref>,
    uuid: &str,
) -> Result<Option<Moref>, CloudError> {
    let params = format!(
        "{}{}{}{}{}",
        vc.content().await?.search_index.xml("_this"),
        datacenter.map(|d| d.xml("datacenter")).unwrap_or_default(),
        el("uuid", uuid),
        el("vmSearch", "true"),
        el("instanceUuid", "false"),
    );
    let r = vc.call(Endpoint::Vim, "FindByUuid", &params, true).await?;
    Ok(r.child("returnval").and_then(Moref::of))
}

/// The VMs whose guest reports `name` as its host name.
pub async fn vms_by_dns_name(
    vc: &Vcenter,
    datacenter: Option<&Moref>,
    name: &str,
) -> Result<Vec<Moref>, CloudError> {
    all(vc, "FindAllByDnsName", datacenter, "dnsName", name).await
}

/// The VMs whose guest reports `ip` as its address.
pub async fn vms_by_ip(
    vc: &Vcenter,
    datacenter: Option<&Moref>,
    ip: &str,
) -> Result<Vec<Moref>, CloudError> {
    all(vc, "FindAllByIp", datacenter, "ip", ip).await
}

async fn all(
    vc: &Vcenter,
    method: &'static str,
    datacenter: Option<&Moref>,
    key: &str,
    value: &str,
) -> Result<Vec<Moref>, CloudError> {
    let params = format!(
        "{}{}{}{}",
        vc.content().await?.search_index.xml("_this"),
        datacenter.map(|d| d.xml("datacenter")).unwrap_or_default(),
        el(key, value),
        el("vmSearch", "true"),
    );
    let r = vc.call(Endpoint::Vim, method, &params, true).await?;
    Ok(r.all("returnval").filter_map(Moref::of).collect())
}
