//! What the VMs' devices and CNS's ids say: the volumes a VM holds, the disk UUID a
//! guest sees, the publish context the node plugin finds a disk by, and which ids are
//! volume ids at all.

use std::collections::BTreeMap;

use overcast_cloud::{Attachment, CloudError};

use super::{BLOCK_VOLUME_TYPE, CTX_DISK_UUID, CTX_TYPE};
use crate::xml::Element;

/// The volumes a VM's devices hold: (volume id, disk UUID) of each virtual disk with a
/// `vDiskId` (a First Class Disk, as CNS attaches them).
pub(super) fn volume_disks(devices: &Element) -> Vec<(String, String)> {
    devices
        .children
        .iter()
        .filter(|d| d.xsi_type.as_deref() == Some("VirtualDisk"))
        .filter_map(|d| {
            let id = d.text_at(&["vDiskId", "id"]).filter(|i| !i.is_empty())?;
            let uuid = d.text_at(&["backing", "uuid"]).unwrap_or_default();
            Some((id.to_owned(), disk_uuid(uuid)))
        })
        .collect()
}

/// A disk UUID as CNS answers it: lower-case hex without dashes (the device backing
/// writes `6000C29x-…`).
pub(super) fn disk_uuid(u: &str) -> String {
    u.chars()
        .filter(|c| *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

pub(super) fn attachment(node: &str, uuid: &str) -> Attachment {
    Attachment {
        node: node.to_owned(),
        readonly: false,
        // Upstream's keys, and the WWN our node plugin finds the disk by
        // (`/dev/disk/by-id/wwn-0x<uuid>`, sysfs `wwid` `naa.<uuid>`).
        publish_context: BTreeMap::from([
            (CTX_DISK_UUID.to_owned(), uuid.to_owned()),
            (CTX_TYPE.to_owned(), BLOCK_VOLUME_TYPE.to_owned()),
            (overcast_cloud::publish::WWN.to_owned(), uuid.to_owned()),
        ]),
    }
}

/// A CNS volume id: a UUID (anything else names no volume of ours and is never sent).
pub(super) fn volume_id(id: &str) -> bool {
    overcast_cloud::is_uuid(id)
}

pub(super) fn not_found(id: &str) -> CloudError {
    CloudError::NotFound {
        kind: "volume",
        id: id.to_owned(),
    }
}

pub(super) fn no_instance(node: &str) -> CloudError {
    CloudError::NotFound {
        kind: "instance",
        id: node.to_owned(),
    }
}
