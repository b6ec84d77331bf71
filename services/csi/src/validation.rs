//! Request checks the CSI spec asks of every plugin: required fields, the capabilities a
//! single-node disk can serve, capacity ranges and topology. Each failure is an
//! INVALID_ARGUMENT (or the code the spec names) with a message saying which field.

use std::collections::BTreeMap;

use overcast_api::csi_v1 as csi;
use overcast_cloud::Zone;
use tonic::Status;

use csi::volume_capability::access_mode::Mode;
use csi::volume_capability::AccessType;

/// Topology keys shared with the node labels the cloud-controller-manager sets.
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";
pub const REGION_KEY: &str = "topology.kubernetes.io/region";
/// Parameters external-provisioner adds with --extra-create-metadata (and any other
/// key in its namespace): metadata about the claim, recorded on the disk.
pub const METADATA_PREFIX: &str = "csi.storage.k8s.io/";

/// The CSI general limit on a string field.
const MAX_STRING: usize = 128;
/// The CSI limit on all mount flags of one capability.
const MAX_MOUNT_FLAGS: usize = 4096;
const FS_TYPES: [&str; 3] = ["", "ext4", "xfs"];

pub fn require<'a>(field: &str, value: &'a str) -> Result<&'a str, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    if value.len() > MAX_STRING {
        return Err(Status::invalid_argument(format!(
            "{field} is longer than {MAX_STRING} bytes"
        )));
    }
    Ok(value)
}

/// A volume name: required, at most 128 bytes, none of the control characters the
/// spec bans.
pub fn volume_name(name: &str) -> Result<&str, Status> {
    require("name", name)?;
    let banned =
        |c: char| matches!(c as u32, 0x00..=0x08 | 0x0B | 0x0C | 0x0E..=0x1F | 0x7F..=0x9F);
    if name.chars().any(banned) {
        return Err(Status::invalid_argument(
            "name contains a control character",
        ));
    }
    Ok(name)
}

/// Why `cap` cannot be served by a single-node disk, if it cannot.
pub fn capability_problem(cap: &csi::VolumeCapability) -> Option<String> {
    let mode = cap.access_mode.as_ref().map(|m| m.mode());
    match mode {
        None | Some(Mode::Unknown) => return Some("access_mode is required".into()),
        Some(
            Mode::SingleNodeWriter
            | Mode::SingleNodeReaderOnly
            | Mode::SingleNodeSingleWriter
            | Mode::SingleNodeMultiWriter,
        ) => {}
        Some(m) => {
            return Some(format!(
                "access mode {} needs a disk several nodes can attach",
                m.as_str_name()
            ))
        }
    }
    match &cap.access_type {
        None => Some("access_type (block or mount) is required".into()),
        Some(AccessType::Block(_)) => None,
        Some(AccessType::Mount(m)) => {
            if !FS_TYPES.contains(&m.fs_type.as_str()) {
                return Some(format!(
                    "filesystem {:?} is not supported (ext4 or xfs)",
                    m.fs_type
                ));
            }
            if m.mount_flags.iter().map(String::len).sum::<usize>() > MAX_MOUNT_FLAGS {
                return Some(format!("mount_flags exceed {MAX_MOUNT_FLAGS} bytes"));
            }
            if !m.volume_mount_group.is_empty() {
                return Some("volume_mount_group is not supported".into());
            }
            None
        }
    }
}

/// Why no volume of this capability could be made, for GetCapacity: only what the
/// capability *says* counts. external-provisioner v2–v4 asks capacity with `mount{}` and
/// access mode UNKNOWN for every StorageClass (the class names no capability) and v5 with
/// none; both must get the real figure, or the scheduler is told there is no room.
pub fn capacity_problem(cap: &csi::VolumeCapability) -> Option<String> {
    let mode = cap.access_mode.as_ref().map(|m| m.mode());
    if let Some(
        m @ (Mode::MultiNodeReaderOnly | Mode::MultiNodeSingleWriter | Mode::MultiNodeMultiWriter),
    ) = mode
    {
        return Some(format!(
            "access mode {} needs a disk several nodes can attach",
            m.as_str_name()
        ));
    }
    match &cap.access_type {
        Some(AccessType::Mount(m)) if !FS_TYPES.contains(&m.fs_type.as_str()) => Some(format!(
            "filesystem {:?} is not supported (ext4 or xfs)",
            m.fs_type
        )),
        _ => None,
    }
}

/// Checks a required list of capabilities; INVALID_ARGUMENT names the first problem.
pub fn capabilities(caps: &[csi::VolumeCapability]) -> Result<(), Status> {
    if caps.is_empty() {
        return Err(Status::invalid_argument("volume_capabilities is required"));
    }
    for cap in caps {
        capability(Some(cap))?;
    }
    Ok(())
}

pub fn capability(cap: Option<&csi::VolumeCapability>) -> Result<&csi::VolumeCapability, Status> {
    let cap = cap.ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
    match capability_problem(cap) {
        Some(problem) => Err(Status::invalid_argument(problem)),
        None => Ok(cap),
    }
}

pub fn is_block(cap: Option<&csi::VolumeCapability>) -> bool {
    matches!(
        cap.and_then(|c| c.access_type.as_ref()),
        Some(AccessType::Block(_))
    )
}

/// Sizes a disk for a capacity range: the default when none is asked, rounded up to the
/// cloud's granularity, never past the limit. OUT_OF_RANGE when no size fits.
pub fn disk_size(
    range: Option<&csi::CapacityRange>,
    default: u64,
    granularity: u64,
    max: u64,
) -> Result<u64, Status> {
    let (required, limit) = range_bounds(range)?;
    let round_up = |n: u64| n.div_ceil(granularity).saturating_mul(granularity);
    let size = match (required, limit) {
        (0, 0) => round_up(default),
        (0, limit) => round_up(default.min(limit)),
        (required, _) => round_up(required),
    };
    let size = match limit {
        // Rounding must not cross the limit: fall back to the largest whole unit under it.
        0 => size,
        limit if size <= limit => size,
        limit => (limit / granularity) * granularity,
    };
    if size == 0 || size < required || size > max {
        return Err(Status::out_of_range(format!(
            "no size in [{required}, {}] is a multiple of {granularity} bytes up to {max}",
            if limit == 0 {
                "unbounded".to_owned()
            } else {
                limit.to_string()
            }
        )));
    }
    Ok(size)
}

/// (required, limit) with 0 meaning unset; INVALID_ARGUMENT for negatives, OUT_OF_RANGE
/// for a limit below the requirement.
pub fn range_bounds(range: Option<&csi::CapacityRange>) -> Result<(u64, u64), Status> {
    let Some(range) = range else {
        return Ok((0, 0));
    };
    let required = u64::try_from(range.required_bytes)
        .map_err(|_| Status::invalid_argument("capacity_range.required_bytes is negative"))?;
    let limit = u64::try_from(range.limit_bytes)
        .map_err(|_| Status::invalid_argument("capacity_range.limit_bytes is negative"))?;
    if limit != 0 && required > limit {
        return Err(Status::out_of_range(format!(
            "required_bytes {required} exceeds limit_bytes {limit}"
        )));
    }
    Ok((required, limit))
}

/// Whether an existing size satisfies a capacity range.
pub fn size_fits(size: u64, range: Option<&csi::CapacityRange>) -> Result<bool, Status> {
    let (required, limit) = range_bounds(range)?;
    Ok(size >= required && (limit == 0 || size <= limit))
}

/// The keys a driver's topology carries: the well-known ones, and the zone and region
/// again under the keys of the driver it replaces (cinder-csi-plugin's
/// `topology.cinder.csi.openstack.org/zone`, vsphere-csi-driver's
/// `topology.csi.vmware.com/<category>`), so the PVs that driver made keep scheduling
/// after a switch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopologyKeys {
    pub zone_aliases: Vec<String>,
    pub region_aliases: Vec<String>,
}

impl TopologyKeys {
    /// The topology segments of `zone`; a cloud without zones (both empty) has none, so
    /// its volumes carry no node affinity.
    pub fn of(&self, zone: &Zone) -> csi::Topology {
        let zone_keys =
            std::iter::once(ZONE_KEY).chain(self.zone_aliases.iter().map(String::as_str));
        let region_keys =
            std::iter::once(REGION_KEY).chain(self.region_aliases.iter().map(String::as_str));
        csi::Topology {
            segments: zone_keys
                .map(|k| (k, &zone.zone))
                .chain(region_keys.map(|k| (k, &zone.region)))
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_owned(), v.clone()))
                .collect(),
        }
    }

    /// Whether a topology segment map names `zone`: every key it carries is one of ours
    /// and agrees. A zone that is a whole region (empty zone, region set) agrees with
    /// every zone value: each zone of the region reaches it.
    pub fn matches(&self, topology: &csi::Topology, zone: &Zone) -> bool {
        let whole_region = zone.zone.is_empty() && !zone.region.is_empty();
        let zone_agrees = |v: &String| whole_region || *v == zone.zone;
        topology.segments.iter().all(|(k, v)| match k.as_str() {
            ZONE_KEY => zone_agrees(v),
            REGION_KEY => *v == zone.region,
            k if self.zone_aliases.iter().any(|a| a == k) => zone_agrees(v),
            k if self.region_aliases.iter().any(|a| a == k) => *v == zone.region,
            _ => false,
        })
    }
}

/// [`TopologyKeys::of`] with the well-known keys alone.
pub fn topology_of(zone: &Zone) -> csi::Topology {
    TopologyKeys::default().of(zone)
}

/// [`TopologyKeys::matches`] with the well-known keys alone.
pub fn topology_matches(topology: &csi::Topology, zone: &Zone) -> bool {
    TopologyKeys::default().matches(topology, zone)
}

/// Picks the zone for a new volume: the first preferred topology we serve, else the
/// first requisite one, else our first zone. RESOURCE_EXHAUSTED when requisite names
/// none of our zones (the spec's code for "unable to provision in accessible_topology").
pub fn pick_zone(
    req: Option<&csi::TopologyRequirement>,
    zones: &[Zone],
    keys: &TopologyKeys,
) -> Result<Zone, Status> {
    let first = zones
        .first()
        .cloned()
        .ok_or_else(|| Status::unavailable("the cloud offers no zone"))?;
    let Some(req) = req else { return Ok(first) };
    let find = |list: &[csi::Topology]| {
        list.iter()
            .find_map(|t| zones.iter().find(|z| keys.matches(t, z)).cloned())
    };
    let allowed =
        |z: &Zone| req.requisite.is_empty() || req.requisite.iter().any(|t| keys.matches(t, z));
    if let Some(z) = find(&req.preferred).filter(allowed) {
        return Ok(z);
    }
    if req.requisite.is_empty() {
        return Ok(first);
    }
    find(&req.requisite).ok_or_else(|| {
        Status::resource_exhausted(format!(
            "none of the requisite topologies is served here (zones: {})",
            zones
                .iter()
                .map(|z| format!("{}/{}", z.region, z.zone))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// Checks a class's own placement (see `Disks::placement`) against the requisite
/// topologies: a disk there must be reachable from one of them, else RESOURCE_EXHAUSTED
/// before anything is made (the spec's code for "unable to provision in
/// accessible_topology"). Preferred topologies only order; they never refuse.
pub fn check_placement(
    req: Option<&csi::TopologyRequirement>,
    placement: &Zone,
    keys: &TopologyKeys,
) -> Result<(), Status> {
    let Some(req) = req.filter(|r| !r.requisite.is_empty()) else {
        return Ok(());
    };
    if req.requisite.iter().any(|t| keys.matches(t, placement)) {
        return Ok(());
    }
    Err(Status::resource_exhausted(format!(
        "the StorageClass places its disks in region {:?}{}, which none of the requisite topologies reaches",
        placement.region,
        if placement.zone.is_empty() {
            String::new()
        } else {
            format!(" zone {:?}", placement.zone)
        }
    )))
}

/// Splits CreateVolume parameters into the disk-shaping ones and claim metadata.
pub fn split_parameters(
    parameters: &std::collections::HashMap<String, String>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut disk = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for (k, v) in parameters {
        if k.starts_with(METADATA_PREFIX) {
            metadata.insert(k.clone(), v.clone());
        } else {
            disk.insert(k.clone(), v.clone());
        }
    }
    (disk, metadata)
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi::volume_capability::{AccessMode, BlockVolume, MountVolume};

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn range(required: i64, limit: i64) -> Option<csi::CapacityRange> {
        Some(csi::CapacityRange {
            required_bytes: required,
            limit_bytes: limit,
        })
    }

    #[test]
    fn capacity_ranges() {
        let size = |r: Option<csi::CapacityRange>| {
            disk_size(r.as_ref(), GIB, MIB, 16 * GIB).map_err(|s| s.code())
        };
        use tonic::Code::{InvalidArgument, OutOfRange};
        let cases: [(Option<csi::CapacityRange>, Result<u64, tonic::Code>); 10] = [
            (None, Ok(GIB)),
            (range(0, 0), Ok(GIB)),
            (range(1, 0), Ok(MIB)),
            (range(MIB as i64 + 1, 0), Ok(2 * MIB)),
            (range(0, 10 * MIB as i64), Ok(10 * MIB)),
            (range(MIB as i64 + 1, 3 * MIB as i64 / 2), Err(OutOfRange)),
            (range(5 * MIB as i64, 4 * MIB as i64), Err(OutOfRange)),
            (range(-1, 0), Err(InvalidArgument)),
            (range(0, -1), Err(InvalidArgument)),
            (range(17 * GIB as i64, 0), Err(OutOfRange)),
        ];
        for (r, want) in cases {
            assert_eq!(size(r), want, "{r:?}");
        }
        assert!(size_fits(2 * MIB, range(MIB as i64, 0).as_ref()).unwrap());
        assert!(!size_fits(2 * MIB, range(3 * MIB as i64, 0).as_ref()).unwrap());
        assert!(!size_fits(2 * MIB, range(0, MIB as i64).as_ref()).unwrap());
    }

    fn cap(mode: Mode, access: AccessType) -> csi::VolumeCapability {
        csi::VolumeCapability {
            access_type: Some(access),
            access_mode: Some(AccessMode { mode: mode as i32 }),
        }
    }

    fn mount(fs: &str) -> AccessType {
        AccessType::Mount(MountVolume {
            fs_type: fs.into(),
            ..Default::default()
        })
    }

    #[test]
    fn capabilities_a_single_node_disk_serves() {
        let ok = [
            cap(Mode::SingleNodeWriter, mount("")),
            cap(Mode::SingleNodeWriter, mount("ext4")),
            cap(Mode::SingleNodeReaderOnly, mount("xfs")),
            cap(
                Mode::SingleNodeMultiWriter,
                AccessType::Block(BlockVolume {}),
            ),
            cap(
                Mode::SingleNodeSingleWriter,
                AccessType::Block(BlockVolume {}),
            ),
        ];
        for c in &ok {
            assert_eq!(capability_problem(c), None, "{c:?}");
        }
        let bad = [
            cap(Mode::MultiNodeMultiWriter, mount("ext4")),
            cap(Mode::MultiNodeReaderOnly, AccessType::Block(BlockVolume {})),
            cap(Mode::Unknown, mount("ext4")),
            cap(Mode::SingleNodeWriter, mount("ntfs")),
            csi::VolumeCapability {
                access_type: None,
                access_mode: Some(AccessMode { mode: 1 }),
            },
            csi::VolumeCapability {
                access_type: Some(mount("ext4")),
                access_mode: None,
            },
        ];
        for c in &bad {
            assert!(capability_problem(c).is_some(), "{c:?}");
        }
        assert_eq!(
            capabilities(&[]).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn a_zone_alias_is_reported_and_understood_like_the_zone_key() {
        let keys = TopologyKeys {
            zone_aliases: vec!["topology.cinder.csi.openstack.org/zone".into()],
            ..TopologyKeys::default()
        };
        let nova = Zone {
            region: "RegionOne".into(),
            zone: "nova".into(),
        };
        let t = keys.of(&nova);
        assert_eq!(t.segments["topology.cinder.csi.openstack.org/zone"], "nova");
        assert_eq!(t.segments[ZONE_KEY], "nova");
        // A PV cinder-csi-plugin made names only its own key.
        let old = csi::Topology {
            segments: [(
                "topology.cinder.csi.openstack.org/zone".to_owned(),
                "nova".to_owned(),
            )]
            .into(),
        };
        assert!(keys.matches(&old, &nova));
        assert!(!TopologyKeys::default().matches(&old, &nova));
        let other = csi::Topology {
            segments: [(
                "topology.cinder.csi.openstack.org/zone".to_owned(),
                "az2".to_owned(),
            )]
            .into(),
        };
        assert!(!keys.matches(&other, &nova));
        // No zone: no segments under any key.
        assert!(keys.of(&Zone::default()).segments.is_empty());
    }

    #[test]
    fn a_region_alias_is_reported_and_understood_like_the_region_key() {
        // vsphere-csi-driver's topology-categories keys.
        let keys = TopologyKeys {
            zone_aliases: vec!["topology.csi.vmware.com/k8s-zone".into()],
            region_aliases: vec!["topology.csi.vmware.com/k8s-region".into()],
        };
        let a = Zone {
            region: "region-1".into(),
            zone: "zone-a".into(),
        };
        let t = keys.of(&a);
        assert_eq!(t.segments["topology.csi.vmware.com/k8s-region"], "region-1");
        assert_eq!(t.segments[REGION_KEY], "region-1");
        assert_eq!(t.segments.len(), 4);
        let upstream = |region: &str| csi::Topology {
            segments: [
                (
                    "topology.csi.vmware.com/k8s-zone".to_owned(),
                    "zone-a".to_owned(),
                ),
                (
                    "topology.csi.vmware.com/k8s-region".to_owned(),
                    region.to_owned(),
                ),
            ]
            .into(),
        };
        assert!(keys.matches(&upstream("region-1"), &a));
        assert!(!keys.matches(&upstream("region-2"), &a));
        // A whole region is reached from a zone of it, under the alias too.
        let whole = Zone {
            region: "region-1".into(),
            zone: String::new(),
        };
        assert!(keys.matches(&upstream("region-1"), &whole));
        assert_eq!(keys.of(&whole).segments.len(), 2);
    }

    #[test]
    fn a_whole_region_is_reached_from_each_of_its_zones_and_nowhere_else() {
        let keys = TopologyKeys {
            zone_aliases: vec!["topology.csi.zvirt.example/zone".into()],
            ..TopologyKeys::default()
        };
        let dc1 = Zone {
            region: "dc1".into(),
            zone: String::new(),
        };
        let node = |zone: &str, region: &str| csi::Topology {
            segments: [
                (ZONE_KEY.to_owned(), zone.to_owned()),
                (REGION_KEY.to_owned(), region.to_owned()),
                (
                    "topology.csi.zvirt.example/zone".to_owned(),
                    zone.to_owned(),
                ),
            ]
            .into(),
        };
        assert!(keys.matches(&node("cluster-a", "dc1"), &dc1));
        assert!(keys.matches(&node("cluster-b", "dc1"), &dc1));
        assert!(!keys.matches(&node("cluster-a", "dc2"), &dc1));
        // The PV of such a disk names the region alone.
        let pv = keys.of(&dc1);
        assert_eq!(pv.segments.len(), 1, "{pv:?}");
        assert_eq!(pv.segments[REGION_KEY], "dc1");
        // A cloud without zones (both empty) is no region: a zone value does not match it.
        let zone_only = csi::Topology {
            segments: [(ZONE_KEY.to_owned(), "a".to_owned())].into(),
        };
        assert!(!keys.matches(&zone_only, &Zone::default()));

        let req = |requisite: Vec<csi::Topology>, preferred: Vec<csi::Topology>| {
            csi::TopologyRequirement {
                requisite,
                preferred,
            }
        };
        assert!(check_placement(None, &dc1, &keys).is_ok());
        assert!(check_placement(
            Some(&req(vec![node("x", "dc2"), node("y", "dc1")], vec![])),
            &dc1,
            &keys
        )
        .is_ok());
        // Preferred alone never refuses.
        assert!(check_placement(Some(&req(vec![], vec![node("x", "dc2")])), &dc1, &keys).is_ok());
        let refused = check_placement(
            Some(&req(vec![node("x", "dc2")], vec![node("x", "dc2")])),
            &dc1,
            &keys,
        )
        .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("dc1"), "{}", refused.message());
    }

    #[test]
    fn zones_follow_preferred_then_requisite() {
        let a = Zone {
            region: "r".into(),
            zone: "a".into(),
        };
        let b = Zone {
            region: "r".into(),
            zone: "b".into(),
        };
        let zones = [a.clone(), b.clone()];
        let topo = |z: &str| csi::Topology {
            segments: [(ZONE_KEY.to_owned(), z.to_owned())].into(),
        };
        let req = |requisite: Vec<csi::Topology>, preferred: Vec<csi::Topology>| {
            csi::TopologyRequirement {
                requisite,
                preferred,
            }
        };
        assert_eq!(
            pick_zone(None, &zones, &TopologyKeys::default()).unwrap(),
            a
        );
        assert_eq!(
            pick_zone(
                Some(&req(vec![topo("b")], vec![])),
                &zones,
                &TopologyKeys::default()
            )
            .unwrap(),
            b
        );
        assert_eq!(
            pick_zone(
                Some(&req(vec![topo("a"), topo("b")], vec![topo("b")])),
                &zones,
                &TopologyKeys::default(),
            )
            .unwrap(),
            b
        );
        assert_eq!(
            pick_zone(
                Some(&req(vec![], vec![topo("x")])),
                &zones,
                &TopologyKeys::default()
            )
            .unwrap(),
            a
        );
        assert_eq!(
            pick_zone(
                Some(&req(vec![topo("x")], vec![])),
                &zones,
                &TopologyKeys::default()
            )
            .unwrap_err()
            .code(),
            tonic::Code::ResourceExhausted
        );
        let foreign = csi::Topology {
            segments: [("example.com/rack".to_owned(), "1".to_owned())].into(),
        };
        assert!(!topology_matches(&foreign, &a));
        assert!(topology_matches(&topology_of(&b), &b));
    }

    #[test]
    fn names_refuse_control_characters_and_length() {
        assert!(volume_name("pvc-1 with space").is_ok());
        assert!(volume_name("").is_err());
        assert!(volume_name("bad\u{7}name").is_err());
        assert!(volume_name(&"x".repeat(129)).is_err());
    }
}
