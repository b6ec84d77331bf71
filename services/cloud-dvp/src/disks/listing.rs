//! How a disk's attachments are read without the namespace's others: by upstream's
//! `virtualMachineDiskName` label (the disk's, or empty) and by its absence (made by
//! hand), each answer filtered by what the attachment's spec names (issue 70).

use std::collections::BTreeMap;

use kube::ResourceExt;
use overcast_cloud::{is_label_value, Disk, Result};

use super::DvpDisks;
use crate::api::{self, VirtualDisk, Vmbda};

impl DvpDisks {
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
        // The volumes' attachments, 40 disks a selector, and the unlabelled once: the
        // parent's other attachments unread.
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
