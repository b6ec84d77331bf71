//! The publish context: what a provider's attach tells the node plugin about the disk it
//! attached, so that the node finds the device without asking the cloud. Both sides use
//! this type: the controller side writes it ([`PublishContext::to_map`], the CSI
//! `publish_context`), the node side reads it back ([`PublishContext::from_map`]) and
//! finds the device by it (`services/mount/src/device.rs`).
//!
//! A context must tie the device to its volume, not merely name a device: a loop disk by
//! its backing file (whose stem is the volume id), a cloud disk by the serial or WWN its
//! hypervisor gives the virtual disk. A bare device path is never enough (it names any
//! device on the host, and device names are not stable across reboots).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// `/dev/...` where the disk appeared, when the controller side knows it.
pub const DEVICE_PATH: &str = "devicePath";
/// The file behind a loop device; its stem is the volume id.
pub const BACKING_FILE: &str = "backingFile";
/// The disk's serial as the guest sees it (`/dev/disk/by-id/*-<serial>`, sysfs `serial`).
pub const SERIAL: &str = "serial";
/// The disk's WWN (`/dev/disk/by-id/wwn-<wwn>`, sysfs `wwid`).
pub const WWN: &str = "wwn";
/// vsphere-csi-driver's key for the same: the disk's UUID, lower-case, no dashes, which
/// its node finds as `/dev/disk/by-id/wwn-0x<uuid>`. Read as the WWN, so a volume that
/// driver attached before a cluster switched stages with ours.
pub const VSPHERE_DISK_UUID: &str = "diskUUID";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishContext {
    pub device_path: Option<PathBuf>,
    pub backing_file: Option<PathBuf>,
    pub serial: Option<String>,
    pub wwn: Option<String>,
}

impl PublishContext {
    /// The CSI `publish_context` map; absent fields are left out.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |key: &str, value: Option<String>| {
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                out.insert(key.to_owned(), v);
            }
        };
        put(
            DEVICE_PATH,
            self.device_path.as_ref().map(|p| p.display().to_string()),
        );
        put(
            BACKING_FILE,
            self.backing_file.as_ref().map(|p| p.display().to_string()),
        );
        put(SERIAL, self.serial.clone());
        put(WWN, self.wwn.clone());
        out
    }

    /// Reads a `publish_context` map back; unknown keys (another driver's, a newer
    /// version's) are ignored, empty values are absent.
    pub fn from_map<'a>(map: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Self::default();
        let mut disk_uuid = None;
        for (key, value) in map {
            if value.is_empty() {
                continue;
            }
            match key.as_str() {
                DEVICE_PATH => out.device_path = Some(PathBuf::from(value)),
                BACKING_FILE => out.backing_file = Some(PathBuf::from(value)),
                SERIAL => out.serial = Some(value.clone()),
                WWN => out.wwn = Some(value.clone()),
                VSPHERE_DISK_UUID => disk_uuid = Some(value.clone()),
                _ => {}
            }
        }
        out.wwn = out.wwn.or(disk_uuid);
        out
    }
}

/// How a node tells a volume's disk from the volume's id alone — with no record of its
/// own and no publish context: what lets the node plugin unstage or unpublish a volume
/// it has no record of (lost, or staged by another plugin) while never touching a mount
/// of anything else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DiskOfVolume {
    /// The id does not name the disk (DVP: the serial is a hash of the VirtualDisk's uid;
    /// vSphere: the disk's UUID is not the CNS volume id): a mount with no record is
    /// never taken for the volume's.
    #[default]
    Unknown,
    /// The disk is the file `<dir>/<volume id>.img` (the local cloud).
    BackingFile(PathBuf),
    /// The disk's serial is the volume id, or its first 20 characters as a virtio guest
    /// shows it (zVirt, OpenStack).
    Serial,
}

impl DiskOfVolume {
    /// The context a publish of `volume_id` gives, as far as the id alone tells it.
    /// `None` where it does not, or where the id could not be a disk of this kind (one
    /// that is not a plain file name is never joined into a path).
    pub fn context(&self, volume_id: &str) -> Option<PublishContext> {
        let plain = !volume_id.is_empty()
            && volume_id.len() <= 128
            && !volume_id.starts_with('.')
            && volume_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        match self {
            Self::Unknown => None,
            Self::BackingFile(dir) => plain.then(|| PublishContext {
                backing_file: Some(dir.join(format!("{volume_id}.img"))),
                ..PublishContext::default()
            }),
            Self::Serial => plain.then(|| PublishContext {
                serial: Some(volume_id.to_owned()),
                ..PublishContext::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_id_names_a_disk_only_where_the_cloud_says_so_and_never_a_path() {
        let local = DiskOfVolume::BackingFile("/var/lib/overcast/local/disks".into());
        let id = "vol-0123456789abcdef0123456789abcdef";
        assert_eq!(
            local.context(id).unwrap().backing_file.unwrap(),
            PathBuf::from(format!("/var/lib/overcast/local/disks/{id}.img"))
        );
        assert_eq!(
            DiskOfVolume::Serial
                .context("6f1c")
                .unwrap()
                .serial
                .as_deref(),
            Some("6f1c")
        );
        assert_eq!(DiskOfVolume::Unknown.context(id), None);
        for bad in ["", "../../etc/passwd", "a/b", ".hidden", "a\0b", "x y"] {
            assert_eq!(local.context(bad), None, "{bad:?}");
            assert_eq!(DiskOfVolume::Serial.context(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_contexts_other_drivers_attached_with_read_as_far_as_they_name_a_disk() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        // vsphere-csi-driver: its disk UUID is the WWN its node looks for.
        let uuid = "6000c29a5b1d8e3f9c2b7a4d1e0f3a5b";
        let vsphere = map(&[("type", "vSphere CNS Block Volume"), ("diskUUID", uuid)]);
        assert_eq!(
            PublishContext::from_map(&vsphere),
            PublishContext {
                wwn: Some(uuid.into()),
                ..Default::default()
            }
        );
        // cinder-csi-plugin's Nova device name (its own node ignores it), the oVirt and
        // DVP drivers' empty context: nothing that names a disk.
        assert_eq!(
            PublishContext::from_map(&map(&[("DevicePath", "/dev/vdb")])),
            PublishContext::default()
        );
        assert_eq!(
            PublishContext::from_map(&BTreeMap::new()),
            PublishContext::default()
        );
    }

    #[test]
    fn a_context_reads_back_as_it_was_written() {
        let ctx = PublishContext {
            device_path: Some("/dev/loop3".into()),
            backing_file: Some("/var/lib/overcast/disks/vol-1.img".into()),
            serial: Some("0QEMU_QEMU_HARDDISK_abc".into()),
            wwn: None,
        };
        let map = ctx.to_map();
        assert_eq!(map.len(), 3);
        assert_eq!(map[BACKING_FILE], "/var/lib/overcast/disks/vol-1.img");
        assert_eq!(PublishContext::from_map(&map), ctx);
        let mut other = map.clone();
        other.insert("someone-else".into(), "x".into());
        other.insert(WWN.into(), String::new());
        assert_eq!(PublishContext::from_map(&other), ctx);
    }
}
