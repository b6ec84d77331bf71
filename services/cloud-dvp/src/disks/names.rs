//! What a VirtualDisk and its attachments say: names, the CSI name and zone recorded in
//! annotations, the publish context, the conditions' message.

use std::collections::BTreeMap;

use kube::ResourceExt;
use overcast_cloud::{PublishContext, Zone};

use crate::api::{self, VirtualDisk, Vmbda};

/// The publish context of a VirtualDisk: the serial its SCSI disk carries in the guest.
pub(super) fn context(uid: &str) -> BTreeMap<String, String> {
    PublishContext {
        serial: Some(api::disk_serial(uid)),
        ..PublishContext::default()
    }
    .to_map()
}

/// Whether a VirtualDisk was made as a volume (upstream's label naming it): the VMs'
/// root disks share the namespace, and no volume call may reach one — not even a
/// DeleteVolume of a PV someone pointed at it by hand.
pub(super) fn is_volume(vd: &VirtualDisk) -> bool {
    vd.labels().get(api::DISK_NAME_LABEL).map(String::as_str) == Some(vd.name_any().as_str())
}

pub(super) fn is_readonly(v: &Vmbda) -> bool {
    v.annotations()
        .get(api::READONLY_ANNOTATION)
        .is_some_and(|r| r == "true")
}

/// The node an attachment is for: upstream's label (the hostname), else the VM's name.
pub(super) fn attachment_node(v: &Vmbda) -> String {
    v.labels()
        .get(api::VMBDA_VM_LABEL)
        .cloned()
        .unwrap_or_else(|| v.spec.virtual_machine_name.clone())
}

pub(super) fn condition_message(conditions: &[api::Condition]) -> String {
    let parts: Vec<String> = conditions
        .iter()
        .filter(|c| c.status != "True")
        .filter_map(|c| {
            let msg = c.message.as_deref().filter(|m| !m.is_empty())?;
            Some(format!(
                "{} {}: {msg}",
                c.type_,
                c.reason.as_deref().unwrap_or("")
            ))
        })
        .collect();
    if parts.is_empty() {
        "no condition says why".to_owned()
    } else {
        parts.join("; ")
    }
}

/// The VirtualDisk for a CSI volume name: the name itself when it can be one (a PV's
/// `pvc-<uid>`, as upstream names them), else `csi-<md5 of the name>` — deterministic, so
/// a repeated create finds the same disk; the CSI name is kept in an annotation and
/// compared, so two names never share a disk.
pub fn disk_name(csi_name: &str) -> String {
    // The virtualization webhook refuses a VirtualDisk name with a '.' (its
    // name_validator: "allowed name symbols are [0-9a-zA-Z-]"), though Kubernetes
    // allows it in an object name.
    if is_name(csi_name) && csi_name.len() <= 63 && !csi_name.contains('.') {
        csi_name.to_owned()
    } else {
        format!("csi-{:x}", md5::compute(csi_name.as_bytes()))
    }
}

/// The CSI name a VirtualDisk was made for.
pub(super) fn csi_name_of(vd: &VirtualDisk) -> String {
    vd.annotations()
        .get(api::CSI_NAME_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| vd.name_any())
}

/// Whether `s` can be the name of a namespaced object (an RFC 1123 subdomain): the ids
/// and node names we are given are checked before they reach a URL.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A volume's zone, as its annotations record it (none when they record none).
pub(super) fn zone_of(annotations: &BTreeMap<String, String>) -> Zone {
    Zone {
        zone: annotations
            .get(api::ZONE_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        region: annotations
            .get(api::REGION_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    }
}

/// The annotations recording `zone`; `None` removes one (in a merge patch).
pub(super) fn zone_annotations(zone: &Zone) -> BTreeMap<&'static str, Option<String>> {
    let set = |v: &str| Some(v.to_owned()).filter(|v| !v.is_empty());
    BTreeMap::from([
        (api::ZONE_ANNOTATION, set(&zone.zone)),
        (api::REGION_ANNOTATION, set(&zone.region)),
    ])
}

pub(super) fn json_map(m: &BTreeMap<String, String>) -> String {
    serde_json::to_string(m).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_object_names_pass() {
        for ok in ["pvc-0a1b", "a", "disk.v1", "x-1"] {
            assert!(is_name(ok), "{ok}");
        }
        for bad in [
            "",
            "../../etc/passwd",
            "vol-/x",
            "A",
            "-a",
            "a-",
            "a..b",
            "a b",
            &"x".repeat(254),
        ] {
            assert!(!is_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_volume_name_that_cannot_name_a_disk_is_hashed_and_kept() {
        assert_eq!(
            disk_name("pvc-0a1b2c3d-0000-4000-8000-000000000001"),
            "pvc-0a1b2c3d-0000-4000-8000-000000000001"
        );
        let long = disk_name("sanity-Controller-Service-CreateVolume-1A2B3C4D-5E6F7081");
        assert!(
            long.starts_with("csi-") && long.len() == 36 && is_name(&long),
            "{long}"
        );
        assert_eq!(
            long,
            disk_name("sanity-Controller-Service-CreateVolume-1A2B3C4D-5E6F7081")
        );
        assert_ne!(
            long,
            disk_name("sanity-Controller-Service-CreateVolume-1A2B3C4D-5E6F7082")
        );
        assert!(disk_name(&"x".repeat(64)).starts_with("csi-"));
        // The real webhook refuses dots in a VirtualDisk's name.
        let dotted = disk_name("pvc.example");
        assert!(
            dotted.starts_with("csi-") && !dotted.contains('.'),
            "{dotted}"
        );
    }

    #[test]
    fn the_context_carries_the_serial_the_guest_sees() {
        let ctx = context("6a5a9c4e-7d0b-4f7e-9c61-1b2e3f4a5b6c");
        let serial = &ctx[overcast_cloud::publish::SERIAL];
        assert_eq!(serial.len(), 32);
        assert_eq!(
            serial,
            &format!(
                "{:x}",
                md5::compute(b"6a5a9c4e-7d0b-4f7e-9c61-1b2e3f4a5b6c")
            )
        );
        assert_eq!(ctx.len(), 1);
    }
}
