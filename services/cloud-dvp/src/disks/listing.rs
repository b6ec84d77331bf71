//! How this cluster's volumes and a disk's attachments are read without the namespace's
//! others (issue 70). Volumes: by upstream's `virtualDiskName` label and, when the
//! cluster's UUID is configured, by `dvp.deckhouse.io/cluster-uuid` — this cluster's,
//! empty, or absent (dvp-csi-driver before it labelled, ours before this release), never
//! another cluster's. Attachments: by upstream's `virtualMachineDiskName` label (the
//! disk's, or empty) and by its absence (made by hand), each answer filtered by what the
//! attachment's spec names.

use std::collections::BTreeMap;

use kube::ResourceExt;
use overcast_cloud::{is_label_value, Disk, Result};

use super::{is_volume, DvpDisks};
use crate::api::{self, VirtualDisk, Vmbda};
use crate::machines::CLUSTER_UUID_LABEL;
use crate::parent::PAGE;

/// The label selectors whose answers together are this cluster's volume disks: the VMs'
/// boot disks share the namespace and carry no `virtualDiskName`. With the cluster's
/// UUID, those labelled with it or with the label empty (dvp-csi-driver writes it empty
/// when it was given none) and those without it; another cluster's labelled disks are
/// never read. Without the UUID, the namespace's every volume disk.
pub(crate) fn volume_selectors(cluster: Option<&str>) -> Vec<String> {
    let volumes = api::DISK_NAME_LABEL;
    match cluster {
        Some(uuid) => vec![
            // `in (a,)`: the trailing empty value takes the label set empty.
            format!("{volumes},{CLUSTER_UUID_LABEL} in ({uuid},)"),
            format!("{volumes},!{CLUSTER_UUID_LABEL}"),
        ],
        None => vec![volumes.to_owned()],
    }
}

impl DvpDisks {
    /// This cluster's volume disks, by name.
    pub(super) async fn volumes(&self) -> Result<Vec<VirtualDisk>> {
        let api = self.parent.disks();
        let mut found = Vec::new();
        for selector in volume_selectors(self.parent.cluster.as_deref()) {
            found.extend(
                self.parent
                    .list_all("virtualdisk_list", &api, Some(&selector))
                    .await?
                    .into_iter()
                    .filter(is_volume),
            );
        }
        found.sort_by_key(|vd| vd.name_any());
        Ok(found)
    }

    /// A page of this cluster's volume disks through the parent's own paging, in its
    /// order (by name, the id), and whether more follow: from the start, the first
    /// `max + 1` of each selector read alone; after `after`, the disks before it are read
    /// a page of 500 at a time and dropped (the API server pages from a token of its own,
    /// not from a name).
    pub(super) async fn volumes_page(
        &self,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<VirtualDisk>, bool)> {
        let limit = match after {
            None => u32::try_from(max + 1).unwrap_or(u32::MAX).min(PAGE),
            Some(_) => PAGE,
        };
        let api = self.parent.disks();
        let mut found: Vec<VirtualDisk> = Vec::new();
        for selector in volume_selectors(self.parent.cluster.as_deref()) {
            let mut of_this: Vec<VirtualDisk> = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let (page, next) = self
                    .parent
                    .list_page(
                        "virtualdisk_list",
                        &api,
                        Some(&selector),
                        limit,
                        token.as_deref(),
                    )
                    .await?;
                of_this.extend(page.into_iter().filter(|vd| {
                    is_volume(vd) && after.is_none_or(|a| vd.name_any().as_str() > a)
                }));
                match next {
                    Some(next) if of_this.len() <= max => token = Some(next),
                    _ => break,
                }
            }
            found.extend(of_this);
        }
        // The API server orders by the keys' bytes, as the ids compare; the selectors'
        // answers merged.
        found.sort_by_key(|vd| vd.name_any());
        let more = found.len() > max;
        found.truncate(max);
        Ok((found, more))
    }

    /// Every attachment of the disk, found by what it points at (`spec.blockDeviceRef`):
    /// one made by hand or by another tool carries none of our labels, and missing it
    /// would report the volume unpublished and let DeleteVolume remove a disk in use.
    /// (A CRD's field selectors cannot name the spec: the labels narrow the read, the
    /// spec decides.)
    pub(super) async fn attachments_of(&self, disk: &str) -> Result<Vec<Vmbda>> {
        let mut found = self.attachments_among(&[disk]).await?;
        found.retain(|v| v.spec.block_device_ref.name == disk);
        Ok(found)
    }

    /// The attachments of these disks, without reading the namespace's others: those
    /// labelled with one of them (upstream's `virtualMachineDiskName`, as ours are, or the
    /// label empty) and those without the label (made by hand) — the label a hint only,
    /// the answer filtered by what each attachment's spec names. A name that cannot be a
    /// label value reads every attachment. Attachments of a `VirtualDisk` alone.
    async fn attachments_among(&self, disks: &[&str]) -> Result<Vec<Vmbda>> {
        let mut found = if disks.iter().all(|d| is_selectable(d)) {
            let mut found = self.labelled_attachments(disks).await?;
            found.extend(self.unlabelled_attachments().await?);
            found
        } else {
            let vmbdas = self.parent.vmbdas();
            self.parent.list_all("vmbda_list", &vmbdas, None).await?
        };
        found.retain(|v| of_these(v, disks));
        Ok(found)
    }

    /// The attachments labelled with one of `disks`, or with the label empty.
    async fn labelled_attachments(&self, disks: &[&str]) -> Result<Vec<Vmbda>> {
        // `in (a,b,)`: the trailing empty value takes the label set empty.
        let named = format!("{} in ({},)", api::VMBDA_DISK_LABEL, disks.join(","));
        let vmbdas = self.parent.vmbdas();
        self.parent
            .list_all("vmbda_list", &vmbdas, Some(&named))
            .await
    }

    /// The attachments without upstream's disk label (made by hand, or by another tool).
    async fn unlabelled_attachments(&self) -> Result<Vec<Vmbda>> {
        let unlabelled = format!("!{}", api::VMBDA_DISK_LABEL);
        let vmbdas = self.parent.vmbdas();
        self.parent
            .list_all("vmbda_list", &vmbdas, Some(&unlabelled))
            .await
    }

    /// The disks with their attachments, read by the disks' label (40 a selector) and
    /// the unlabelled once: the parent's other attachments unread.
    pub(super) async fn with_attachments(&self, disks: &[&VirtualDisk]) -> Result<Vec<Disk>> {
        let names: Vec<String> = disks.iter().map(|vd| vd.name_any()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut vmbdas = Vec::new();
        if names.iter().all(|d| is_selectable(d)) {
            for batch in names.chunks(40) {
                vmbdas.extend(self.labelled_attachments(batch).await?);
            }
            vmbdas.extend(self.unlabelled_attachments().await?);
        } else {
            let all = self.parent.vmbdas();
            vmbdas = self.parent.list_all("vmbda_list", &all, None).await?;
        }
        vmbdas.retain(|v| of_these(v, &names));
        let mut by_disk: BTreeMap<&str, Vec<Vmbda>> = BTreeMap::new();
        for v in &vmbdas {
            by_disk
                .entry(v.spec.block_device_ref.name.as_str())
                .or_default()
                .push(v.clone());
        }
        let mut out: Vec<Disk> = disks
            .iter()
            .map(|vd| {
                let name = vd.name_any();
                self.to_disk(
                    vd,
                    by_disk.get(name.as_str()).map(Vec::as_slice).unwrap_or(&[]),
                )
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

/// Whether a disk's name can stand in a label selector as a value.
fn is_selectable(disk: &str) -> bool {
    !disk.is_empty() && is_label_value(disk)
}

/// Whether an attachment's spec names one of `disks` (a `VirtualDisk`).
fn of_these(v: &Vmbda, disks: &[&str]) -> bool {
    v.spec.block_device_ref.kind == "VirtualDisk"
        && disks.contains(&v.spec.block_device_ref.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::volume_selectors;

    #[test]
    fn this_clusters_volumes_are_selected_labelled_with_it_empty_or_unlabelled() {
        assert_eq!(volume_selectors(None), ["virtualDiskName"]);
        assert_eq!(
            volume_selectors(Some("6b4e0b5c-1d0a-4f6e-9a43-2f4b7f0c9d11")),
            [
                "virtualDiskName,dvp.deckhouse.io/cluster-uuid in (6b4e0b5c-1d0a-4f6e-9a43-2f4b7f0c9d11,)",
                "virtualDiskName,!dvp.deckhouse.io/cluster-uuid",
            ]
        );
    }
}
