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

/// The parent VM a DeckhouseMachine asks for; unless the machine names its live migration
/// policy, a control-plane machine's is `PreferForced` (its memory changes too fast to
/// converge otherwise) and a worker's `PreferSafe`, as capdvp chooses. The policies' Rust
/// names are DVP's spellings.
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
        run_policy: format!("{:?}", spec.run_policy),
        live_migration_policy: match spec.live_migration_policy {
            Some(p) => format!("{p:?}"),
            None if control_plane => "PreferForced".into(),
            None => "PreferSafe".into(),
        },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::dvp::{LiveMigrationPolicy, RunPolicy};

    fn spec(extra: serde_json::Value) -> DeckhouseMachineSpecTemplate {
        let mut v = serde_json::json!({
            "vmClassName": "generic", "cpu": {"cores": 2, "cpuFraction": "100%"},
            "memory": "4Gi", "rootDiskSize": "10Gi", "rootDiskStorageClass": "",
            "bootDiskImageRef": {"kind": "ClusterVirtualImage", "name": "ubuntu"},
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_policies_are_the_machine_s_else_capdvp_s_choice_by_role() {
        let plain = spec(serde_json::json!({}));
        assert_eq!(plain.run_policy, RunPolicy::AlwaysOnUnlessStoppedManually);
        let worker = vm_spec(&plain, false).unwrap();
        assert_eq!(worker.run_policy, "AlwaysOnUnlessStoppedManually");
        assert_eq!(worker.live_migration_policy, "PreferSafe");
        assert_eq!(
            vm_spec(&plain, true).unwrap().live_migration_policy,
            "PreferForced"
        );
        let named =
            spec(serde_json::json!({"runPolicy": "AlwaysOn", "liveMigrationPolicy": "AlwaysSafe"}));
        assert_eq!(
            named.live_migration_policy,
            Some(LiveMigrationPolicy::AlwaysSafe)
        );
        let master = vm_spec(&named, true).unwrap();
        assert_eq!(
            (
                master.run_policy.as_str(),
                master.live_migration_policy.as_str()
            ),
            ("AlwaysOn", "AlwaysSafe")
        );
    }
}
