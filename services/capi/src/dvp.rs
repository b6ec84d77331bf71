//! capdvp on Overcast: the DeckhouseCluster and DeckhouseMachine controllers, on the DVP
//! provider's parent-cluster client (`overcast_cloud_dvp::ParentVms`).

pub mod cluster;
pub mod machine;

use std::time::Duration;

use overcast_cloud_dvp::machines::VmSpec;
use overcast_cloud_dvp::ParentVms;

use crate::crd::dvp::{Bootloader, DeckhouseMachineSpecTemplate, ImageKind};

/// What both controllers share.
pub struct Context {
    pub client: kube::Client,
    pub vms: ParentVms,
    /// How often a VM on its way (disks provisioning, starting) is looked at.
    pub poll: Duration,
    pub retries: crate::retry::Retries,
}

/// The parent VM a DeckhouseMachine asks for; a control-plane machine's live migration
/// is `PreferForced` (its memory changes too fast to converge otherwise), a worker's
/// `PreferSafe`, as capdvp chooses.
pub fn vm_spec(spec: &DeckhouseMachineSpecTemplate, control_plane: bool) -> Result<VmSpec, String> {
    let bytes = |what: &str, q: &str| {
        overcast_cloud_dvp::api::quantity_bytes(q)
            .ok_or_else(|| format!("{what} {q:?} is not a quantity"))
    };
    let mut additional = Vec::new();
    for (i, d) in spec.additional_disks.iter().enumerate() {
        additional.push((
            bytes(&format!("additionalDisks[{i}].size"), &d.size.0)?,
            Some(d.storage_class.clone()).filter(|c| !c.is_empty()),
        ));
    }
    Ok(VmSpec {
        class: spec.vm_class_name.clone(),
        cores: u32::try_from(spec.cpu.cores).unwrap_or(1).max(1),
        core_fraction: spec.cpu.fraction.clone(),
        memory: spec.memory.0.clone(),
        bootloader: match spec.bootloader {
            Bootloader::Bios => "BIOS",
            Bootloader::Efi => "EFI",
            Bootloader::EfiWithSecureBoot => "EFIWithSecureBoot",
        }
        .into(),
        run_policy: "AlwaysOnUnlessStoppedManually".into(),
        live_migration_policy: if control_plane {
            "PreferForced"
        } else {
            "PreferSafe"
        }
        .into(),
        image_kind: match spec.boot_disk_image_ref.kind {
            ImageKind::ClusterVirtualImage => "ClusterVirtualImage",
            ImageKind::VirtualImage => "VirtualImage",
            ImageKind::VirtualDiskSnapshot => "VirtualDiskSnapshot",
        }
        .into(),
        image_name: spec.boot_disk_image_ref.name.clone(),
        root_disk_bytes: bytes("rootDiskSize", &spec.root_disk_size.0)?,
        root_disk_storage_class: Some(spec.root_disk_storage_class.clone())
            .filter(|c| !c.is_empty()),
        additional_disks: additional,
    })
}
