use super::*;
use crate::xml::Element;

#[test]
fn volume_ids_are_uuids_and_disk_uuids_are_plain_hex() {
    assert!(volume_id("0c2b3f0e-7d4a-4f62-9e1b-2a3b4c5d6e7f"));
    for bad in [
        "",
        "../../etc/passwd",
        "vol-/x",
        "0c2b3f0e7d4a4f629e1b2a3b4c5d6e7f0000",
        "0c2b3f0e-7d4a-4f62-9e1b-2a3b4c5d6e7g",
    ] {
        assert!(!volume_id(bad), "{bad}");
    }
    assert_eq!(disk_uuid("6000C29A-aaab-bbbc"), "6000c29aaaabbbbc");
    let devices = Element::parse(
        br#"<val><VirtualDevice xmlns:x="http://www.w3.org/2001/XMLSchema-instance" x:type="VirtualDisk"><key>203</key><backing x:type="VirtualDiskFlatVer2BackingInfo"><uuid>6000C29A-AAAB</uuid></backing><vDiskId><id>vol-1</id></vDiskId></VirtualDevice><VirtualDevice xmlns:x="http://www.w3.org/2001/XMLSchema-instance" x:type="VirtualDisk"><key>204</key></VirtualDevice><VirtualDevice xmlns:x="http://www.w3.org/2001/XMLSchema-instance" x:type="VirtualCdrom"><vDiskId><id>no</id></vDiskId></VirtualDevice></val>"#,
    )
    .unwrap();
    assert_eq!(
        volume_disks(&devices),
        [("vol-1".to_owned(), "6000c29aaaab".to_owned())]
    );
}
