//! Pins the CSI and plugin-registration wire: every message the sidecars, kubelet and
//! csi-sanity exchange with us, with its field names and numbers as the upstream spec
//! (v1.10) defines them. A renumbered field breaks interop silently; here it fails.

use std::collections::BTreeMap;

use prost::Message;
use prost_types::FileDescriptorSet;

/// `Message: field=number ...`, transcribed from the upstream csi.proto and api.proto.
const EXPECTED: &str = "
csi.v1.GetPluginInfoResponse: name=1 vendor_version=2 manifest=3
csi.v1.GetPluginCapabilitiesResponse: capabilities=1
csi.v1.PluginCapability: service=1 volume_expansion=2
csi.v1.ProbeResponse: ready=1
csi.v1.CreateVolumeRequest: name=1 capacity_range=2 volume_capabilities=3 parameters=4 secrets=5 volume_content_source=6 accessibility_requirements=7 mutable_parameters=8
csi.v1.CreateVolumeResponse: volume=1
csi.v1.VolumeCapability: block=1 mount=2 access_mode=3
csi.v1.VolumeCapability.MountVolume: fs_type=1 mount_flags=2 volume_mount_group=3
csi.v1.VolumeCapability.AccessMode: mode=1
csi.v1.CapacityRange: required_bytes=1 limit_bytes=2
csi.v1.Volume: capacity_bytes=1 volume_id=2 volume_context=3 content_source=4 accessible_topology=5
csi.v1.TopologyRequirement: requisite=1 preferred=2
csi.v1.Topology: segments=1
csi.v1.DeleteVolumeRequest: volume_id=1 secrets=2
csi.v1.ControllerPublishVolumeRequest: volume_id=1 node_id=2 volume_capability=3 readonly=4 secrets=5 volume_context=6
csi.v1.ControllerPublishVolumeResponse: publish_context=1
csi.v1.ControllerUnpublishVolumeRequest: volume_id=1 node_id=2 secrets=3
csi.v1.ValidateVolumeCapabilitiesRequest: volume_id=1 volume_context=2 volume_capabilities=3 parameters=4 secrets=5 mutable_parameters=6
csi.v1.ValidateVolumeCapabilitiesResponse: confirmed=1 message=2
csi.v1.ValidateVolumeCapabilitiesResponse.Confirmed: volume_context=1 volume_capabilities=2 parameters=3 mutable_parameters=4
csi.v1.ListVolumesRequest: max_entries=1 starting_token=2
csi.v1.ListVolumesResponse: entries=1 next_token=2
csi.v1.ListVolumesResponse.VolumeStatus: published_node_ids=1 volume_condition=2
csi.v1.ListVolumesResponse.Entry: volume=1 status=2
csi.v1.ControllerGetVolumeRequest: volume_id=1
csi.v1.ControllerGetVolumeResponse: volume=1 status=2
csi.v1.ControllerModifyVolumeRequest: volume_id=1 secrets=2 mutable_parameters=3
csi.v1.GetCapacityRequest: volume_capabilities=1 parameters=2 accessible_topology=3
csi.v1.GetCapacityResponse: available_capacity=1 maximum_volume_size=2 minimum_volume_size=3
csi.v1.ControllerServiceCapability.RPC: type=1
csi.v1.Snapshot: size_bytes=1 snapshot_id=2 source_volume_id=3 creation_time=4 ready_to_use=5 group_snapshot_id=6
csi.v1.ListSnapshotsRequest: max_entries=1 starting_token=2 source_volume_id=3 snapshot_id=4 secrets=5
csi.v1.ControllerExpandVolumeRequest: volume_id=1 capacity_range=2 secrets=3 volume_capability=4
csi.v1.ControllerExpandVolumeResponse: capacity_bytes=1 node_expansion_required=2
csi.v1.NodeStageVolumeRequest: volume_id=1 publish_context=2 staging_target_path=3 volume_capability=4 secrets=5 volume_context=6
csi.v1.NodeUnstageVolumeRequest: volume_id=1 staging_target_path=2
csi.v1.NodePublishVolumeRequest: volume_id=1 publish_context=2 staging_target_path=3 target_path=4 volume_capability=5 readonly=6 secrets=7 volume_context=8
csi.v1.NodeUnpublishVolumeRequest: volume_id=1 target_path=2
csi.v1.NodeGetVolumeStatsRequest: volume_id=1 volume_path=2 staging_target_path=3
csi.v1.NodeGetVolumeStatsResponse: usage=1 volume_condition=2
csi.v1.VolumeUsage: available=1 total=2 used=3 unit=4
csi.v1.VolumeCondition: abnormal=1 message=2
csi.v1.NodeGetInfoResponse: node_id=1 max_volumes_per_node=2 accessible_topology=3
csi.v1.NodeExpandVolumeRequest: volume_id=1 volume_path=2 capacity_range=3 staging_target_path=4 volume_capability=5 secrets=6
csi.v1.NodeExpandVolumeResponse: capacity_bytes=1
csi.v1.NodeServiceCapability.RPC: type=1
csi.v1.VolumeGroupSnapshot: group_snapshot_id=1 snapshots=2 creation_time=3 ready_to_use=4
csi.v1.GetMetadataDeltaRequest: base_snapshot_id=1 target_snapshot_id=2 starting_offset=3 max_results=4 secrets=5
pluginregistration.PluginInfo: type=1 name=2 endpoint=3 supported_versions=4
pluginregistration.RegistrationStatus: plugin_registered=1 error=2
";

/// Enum values that travel as numbers.
const ENUMS: &str = "
csi.v1.PluginCapability.Service.Type: UNKNOWN=0 CONTROLLER_SERVICE=1 VOLUME_ACCESSIBILITY_CONSTRAINTS=2 GROUP_CONTROLLER_SERVICE=3
csi.v1.PluginCapability.VolumeExpansion.Type: UNKNOWN=0 ONLINE=1 OFFLINE=2
csi.v1.VolumeCapability.AccessMode.Mode: UNKNOWN=0 SINGLE_NODE_WRITER=1 SINGLE_NODE_READER_ONLY=2 MULTI_NODE_READER_ONLY=3 MULTI_NODE_SINGLE_WRITER=4 MULTI_NODE_MULTI_WRITER=5 SINGLE_NODE_SINGLE_WRITER=6 SINGLE_NODE_MULTI_WRITER=7
csi.v1.ControllerServiceCapability.RPC.Type: UNKNOWN=0 CREATE_DELETE_VOLUME=1 PUBLISH_UNPUBLISH_VOLUME=2 LIST_VOLUMES=3 GET_CAPACITY=4 CREATE_DELETE_SNAPSHOT=5 LIST_SNAPSHOTS=6 CLONE_VOLUME=7 PUBLISH_READONLY=8 EXPAND_VOLUME=9 LIST_VOLUMES_PUBLISHED_NODES=10 VOLUME_CONDITION=11 GET_VOLUME=12 SINGLE_NODE_MULTI_WRITER=13 MODIFY_VOLUME=14
csi.v1.NodeServiceCapability.RPC.Type: UNKNOWN=0 STAGE_UNSTAGE_VOLUME=1 GET_VOLUME_STATS=2 EXPAND_VOLUME=3 VOLUME_CONDITION=4 SINGLE_NODE_MULTI_WRITER=5 VOLUME_MOUNT_GROUP=6
csi.v1.VolumeUsage.Unit: UNKNOWN=0 BYTES=1 INODES=2
";

fn parse(table: &str) -> BTreeMap<String, BTreeMap<String, i32>> {
    table
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (name, fields) = l.split_once(':').expect("name: fields");
            let fields = fields
                .split_whitespace()
                .map(|f| {
                    let (k, v) = f.split_once('=').expect("field=number");
                    (k.to_owned(), v.parse().expect("number"))
                })
                .collect();
            (name.trim().to_owned(), fields)
        })
        .collect()
}

/// Name -> (member -> number), for messages and for enums.
type Table = BTreeMap<String, BTreeMap<String, i32>>;

fn descriptors() -> (Table, Table, Vec<String>) {
    let set = FileDescriptorSet::decode(overcast_api::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let mut messages = BTreeMap::new();
    let mut enums = BTreeMap::new();
    let mut services = Vec::new();
    fn walk(
        prefix: &str,
        msgs: &[prost_types::DescriptorProto],
        en: &[prost_types::EnumDescriptorProto],
        messages: &mut BTreeMap<String, BTreeMap<String, i32>>,
        enums: &mut BTreeMap<String, BTreeMap<String, i32>>,
    ) {
        for e in en {
            let values = e
                .value
                .iter()
                .map(|v| (v.name().to_owned(), v.number()))
                .collect();
            enums.insert(format!("{prefix}.{}", e.name()), values);
        }
        for m in msgs {
            let name = format!("{prefix}.{}", m.name());
            let fields = m
                .field
                .iter()
                .map(|f| (f.name().to_owned(), f.number()))
                .collect();
            messages.insert(name.clone(), fields);
            walk(&name, &m.nested_type, &m.enum_type, messages, enums);
        }
    }
    for file in &set.file {
        walk(
            file.package(),
            &file.message_type,
            &file.enum_type,
            &mut messages,
            &mut enums,
        );
        for s in &file.service {
            for m in &s.method {
                services.push(format!("/{}.{}/{}", file.package(), s.name(), m.name()));
            }
        }
    }
    (messages, enums, services)
}

#[test]
fn every_pinned_field_has_its_upstream_number_and_no_other_fields() {
    let (messages, enums, _) = descriptors();
    for (name, want) in parse(EXPECTED) {
        let got = messages
            .get(&name)
            .unwrap_or_else(|| panic!("message {name} missing"));
        assert_eq!(got, &want, "{name}");
    }
    for (name, want) in parse(ENUMS) {
        let got = enums
            .get(&name)
            .unwrap_or_else(|| panic!("enum {name} missing"));
        assert_eq!(got, &want, "{name}");
    }
}

#[test]
fn the_rpc_paths_kubelet_and_the_sidecars_call_exist() {
    let (_, _, services) = descriptors();
    for path in [
        "/csi.v1.Identity/GetPluginInfo",
        "/csi.v1.Identity/Probe",
        "/csi.v1.Controller/CreateVolume",
        "/csi.v1.Controller/ControllerPublishVolume",
        "/csi.v1.Controller/ControllerExpandVolume",
        "/csi.v1.Controller/ControllerGetVolume",
        "/csi.v1.Controller/ControllerModifyVolume",
        "/csi.v1.GroupController/CreateVolumeGroupSnapshot",
        "/csi.v1.SnapshotMetadata/GetMetadataDelta",
        "/csi.v1.Node/NodeStageVolume",
        "/csi.v1.Node/NodeExpandVolume",
        "/csi.v1.Node/NodeGetInfo",
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    ] {
        assert!(
            services.iter().any(|s| s == path),
            "{path} missing from {services:?}"
        );
    }
    assert_eq!(
        services
            .iter()
            .filter(|s| s.starts_with("/csi.v1.Controller/"))
            .count(),
        14
    );
    assert_eq!(
        services
            .iter()
            .filter(|s| s.starts_with("/csi.v1.Node/"))
            .count(),
        8
    );
}
