//! The Controller and Identity services of the real `csi` binary over a real Unix
//! socket, on the local cloud: real sparse files, real loop devices.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;

use overcast_integration::csi_v1 as csi;
use overcast_integration::*;
use tonic::Code;

fn code<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> Code {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => s.code(),
    }
}

async fn create(c: &mut ControllerClient, name: &str, bytes: i64) -> csi::Volume {
    c.create_volume(create_request(name, bytes))
        .await
        .expect("create")
        .into_inner()
        .volume
        .expect("volume")
}

#[tokio::test]
async fn identity_reports_name_capabilities_and_readiness() {
    let csi = Csi::start(&["--driver-name=it.csi.overcast.dev"]).await;
    let mut id = csi.identity().await;
    let info = id
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "it.csi.overcast.dev");
    assert!(!info.vendor_version.is_empty());

    use csi::plugin_capability::{service, volume_expansion, Type};
    let caps = id
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut services = HashSet::new();
    let mut expansion = HashSet::new();
    for c in caps.capabilities {
        match c.r#type.unwrap() {
            Type::Service(s) => services.insert(s.r#type()),
            Type::VolumeExpansion(e) => expansion.insert(e.r#type()),
        };
    }
    assert!(services.contains(&service::Type::ControllerService));
    assert!(services.contains(&service::Type::VolumeAccessibilityConstraints));
    assert_eq!(
        expansion,
        HashSet::from([
            volume_expansion::Type::Online,
            volume_expansion::Type::Offline
        ])
    );
    assert_eq!(
        id.probe(csi::ProbeRequest {})
            .await
            .unwrap()
            .into_inner()
            .ready,
        Some(true)
    );

    let caps = csi
        .controller()
        .await
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await;
    let caps: HashSet<i32> = caps
        .unwrap()
        .into_inner()
        .capabilities
        .into_iter()
        .map(|c| match c.r#type.unwrap() {
            csi::controller_service_capability::Type::Rpc(r) => r.r#type,
        })
        .collect();
    use csi::controller_service_capability::rpc::Type as Rpc;
    for want in [
        Rpc::CreateDeleteVolume,
        Rpc::PublishUnpublishVolume,
        Rpc::ListVolumes,
        Rpc::GetCapacity,
        Rpc::ExpandVolume,
        Rpc::GetVolume,
        // The local cloud cuts snapshots and clones (issue 73).
        Rpc::CreateDeleteSnapshot,
        Rpc::ListSnapshots,
        Rpc::CloneVolume,
    ] {
        assert!(caps.contains(&(want as i32)), "{want:?} advertised");
    }
    assert!(
        !caps.contains(&(Rpc::ModifyVolume as i32)),
        "ModifyVolume must not be advertised"
    );
}

#[tokio::test]
async fn create_volume_validates_every_field() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let base = create_request("v", MIB);
    let cases: Vec<(&str, csi::CreateVolumeRequest, Code)> = vec![
        (
            "no name",
            csi::CreateVolumeRequest {
                name: String::new(),
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        (
            "control char",
            csi::CreateVolumeRequest {
                name: "a\u{1}b".into(),
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        (
            "no capabilities",
            csi::CreateVolumeRequest {
                volume_capabilities: vec![],
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        (
            "ntfs",
            csi::CreateVolumeRequest {
                volume_capabilities: vec![mount_cap("ntfs")],
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        (
            "multi-node",
            csi::CreateVolumeRequest {
                volume_capabilities: vec![csi::VolumeCapability {
                    access_mode: Some(csi::volume_capability::AccessMode { mode: 5 }),
                    ..mount_cap("ext4")
                }],
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        (
            "negative",
            csi::CreateVolumeRequest {
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: -1,
                    limit_bytes: 0,
                }),
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        (
            "limit below required",
            csi::CreateVolumeRequest {
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: 4 * MIB,
                    limit_bytes: 2 * MIB,
                }),
                ..base.clone()
            },
            Code::OutOfRange,
        ),
        (
            "too large",
            csi::CreateVolumeRequest {
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: 1 << 50,
                    limit_bytes: 0,
                }),
                ..base.clone()
            },
            Code::OutOfRange,
        ),
        (
            "unknown parameter",
            csi::CreateVolumeRequest {
                parameters: [("color".into(), "blue".into())].into(),
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        (
            "bad thick value",
            csi::CreateVolumeRequest {
                parameters: [("thickProvisioning".into(), "yes".into())].into(),
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        // The local cloud restores and clones (issue 73): a source without its id is
        // the request's fault, one that does not exist NOT_FOUND (the spec's code).
        (
            "snapshot source without an id",
            csi::CreateVolumeRequest {
                volume_content_source: Some(csi::VolumeContentSource {
                    r#type: Some(csi::volume_content_source::Type::Snapshot(
                        csi::volume_content_source::SnapshotSource {
                            snapshot_id: String::new(),
                        },
                    )),
                }),
                ..base.clone()
            },
            Code::InvalidArgument,
        ),
        (
            "snapshot source that does not exist",
            csi::CreateVolumeRequest {
                volume_content_source: Some(csi::VolumeContentSource {
                    r#type: Some(csi::volume_content_source::Type::Snapshot(
                        csi::volume_content_source::SnapshotSource {
                            snapshot_id: "s".into(),
                        },
                    )),
                }),
                ..base.clone()
            },
            Code::NotFound,
        ),
        (
            "volume source that does not exist",
            csi::CreateVolumeRequest {
                volume_content_source: Some(csi::VolumeContentSource {
                    r#type: Some(csi::volume_content_source::Type::Volume(
                        csi::volume_content_source::VolumeSource {
                            volume_id: "vol-0123456789abcdef0123456789abcdef".into(),
                        },
                    )),
                }),
                ..base.clone()
            },
            Code::NotFound,
        ),
        (
            "foreign requisite zone",
            csi::CreateVolumeRequest {
                accessibility_requirements: Some(csi::TopologyRequirement {
                    requisite: vec![csi::Topology {
                        segments: [(ZONE_KEY.into(), "elsewhere".into())].into(),
                    }],
                    preferred: vec![],
                }),
                ..base.clone()
            },
            Code::ResourceExhausted,
        ),
    ];
    for (what, req, want) in cases {
        assert_eq!(code(c.create_volume(req).await), want, "{what}");
    }
    assert!(
        csi.all_disk_dir_files().is_empty(),
        "no failed create leaves a file"
    );
}

#[tokio::test]
async fn create_volume_is_idempotent_by_name_and_honours_ranges_and_topology() {
    let csi = Csi::start(&["--default-volume-size=8388608"]).await;
    let mut c = csi.controller().await;
    let mut req = create_request("pvc-1", 3 * MIB + 1);
    req.parameters = [
        ("csi.storage.k8s.io/pvc/name".into(), "data".into()),
        ("csi.storage.k8s.io/pvc/namespace".into(), "default".into()),
        ("csi.storage.k8s.io/pv/name".into(), "pvc-1".into()),
    ]
    .into();
    req.secrets = [("token".into(), "not-logged".into())].into();
    req.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![csi::Topology {
            segments: [
                (ZONE_KEY.into(), ZONE.into()),
                (REGION_KEY.into(), REGION.into()),
            ]
            .into(),
        }],
        preferred: vec![],
    });
    let v1 = c
        .create_volume(req.clone())
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(v1.capacity_bytes, 4 * MIB, "rounded up to whole MiB");
    assert_eq!(
        v1.accessible_topology,
        vec![csi::Topology {
            segments: [
                (ZONE_KEY.into(), ZONE.into()),
                (REGION_KEY.into(), REGION.into())
            ]
            .into()
        }]
    );
    let v2 = c
        .create_volume(req.clone())
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(
        v1, v2,
        "the same name and parameters return the same volume"
    );

    let bigger = csi::CreateVolumeRequest {
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 64 * MIB,
            limit_bytes: 0,
        }),
        ..req.clone()
    };
    assert_eq!(code(c.create_volume(bigger).await), Code::AlreadyExists);
    let thick = csi::CreateVolumeRequest {
        parameters: [("thickProvisioning".into(), "true".into())].into(),
        ..req.clone()
    };
    assert_eq!(code(c.create_volume(thick).await), Code::AlreadyExists);
    assert_eq!(csi.disk_files(), vec![format!("{}.img", v1.volume_id)]);

    // No capacity: the configured default. Only a limit: the default, capped by it.
    let d = c
        .create_volume(csi::CreateVolumeRequest {
            capacity_range: None,
            ..create_request("dflt", 0)
        })
        .await;
    assert_eq!(
        d.unwrap().into_inner().volume.unwrap().capacity_bytes,
        8 * MIB
    );
    let capped = csi::CreateVolumeRequest {
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 0,
            limit_bytes: 2 * MIB,
        }),
        ..create_request("capped", 0)
    };
    assert_eq!(
        c.create_volume(capped)
            .await
            .unwrap()
            .into_inner()
            .volume
            .unwrap()
            .capacity_bytes,
        2 * MIB
    );

    // Thin files are sparse, thick ones allocated.
    let thin = std::fs::metadata(csi.disks_dir().join(format!("{}.img", v1.volume_id))).unwrap();
    assert_eq!(thin.len(), 4 * MIB as u64);
    assert_eq!(thin.blocks(), 0);
    let t = c
        .create_volume(csi::CreateVolumeRequest {
            parameters: [("thickProvisioning".into(), "true".into())].into(),
            ..create_request("thick", 4 * MIB)
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let thick = std::fs::metadata(csi.disks_dir().join(format!("{}.img", t.volume_id))).unwrap();
    assert!(thick.blocks() * 512 >= 4 * MIB as u64);

    assert!(
        !csi.log_text().contains("not-logged"),
        "secrets never reach the log"
    );
}

#[tokio::test]
async fn concurrent_creates_of_one_name_make_exactly_one_volume() {
    let csi = Csi::start(&[]).await;
    let channel = csi.channel().await;
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let mut c = csi::controller_client::ControllerClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            c.create_volume(create_request("same-name", 16 * MIB)).await
        }));
    }
    let mut ids = HashSet::new();
    let mut aborted = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(r) => {
                ids.insert(r.into_inner().volume.unwrap().volume_id);
            }
            Err(s) if s.code() == Code::Aborted => aborted += 1,
            Err(s) => panic!("unexpected {s:?}"),
        }
    }
    // Those that were turned away get the same volume when they retry.
    let mut c = csi.controller().await;
    for _ in 0..aborted {
        ids.insert(create(&mut c, "same-name", 16 * MIB).await.volume_id);
    }
    assert_eq!(ids.len(), 1, "one id for one name: {ids:?}");
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(listed.len(), 1);
    assert_eq!(csi.disk_files().len(), 1);
}

#[tokio::test]
async fn publish_attaches_a_real_loop_device_and_unpublish_detaches_it() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let v = create(&mut c, "pub", 8 * MIB).await;
    let file = std::fs::canonicalize(csi.disks_dir().join(format!("{}.img", v.volume_id))).unwrap();

    let ctx = c
        .controller_publish_volume(publish_request(&v.volume_id, false))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    let device = ctx
        .get("devicePath")
        .expect("devicePath in publish_context")
        .clone();
    let loops = csi.loops();
    assert_eq!(loops.len(), 1);
    assert_eq!(loops[0].1, file);
    assert_eq!(device, format!("/dev/loop{}", loops[0].0));
    assert_eq!(block_size_bytes(loops[0].0), 8 * MIB as u64);
    assert_eq!(ctx.get("backingFile").map(String::as_str), file.to_str());

    // Idempotent: same answer, no second device.
    let again = c
        .controller_publish_volume(publish_request(&v.volume_id, false))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    assert_eq!(again, ctx);
    assert_eq!(csi.loops().len(), 1);
    // Published with other capabilities: ALREADY_EXISTS.
    assert_eq!(
        code(
            c.controller_publish_volume(publish_request(&v.volume_id, true))
                .await
        ),
        Code::AlreadyExists
    );
    // Deleting an attached volume is refused and loses nothing.
    assert_eq!(
        code(c.delete_volume(delete_request(&v.volume_id)).await),
        Code::FailedPrecondition
    );
    assert!(file.exists());

    let got = c
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: v.volume_id.clone(),
        })
        .await
        .unwrap();
    let status = got.into_inner().status.unwrap();
    assert_eq!(status.published_node_ids, vec![NODE_ID.to_owned()]);
    assert!(!status.volume_condition.unwrap().abnormal);

    c.controller_unpublish_volume(unpublish_request(&v.volume_id))
        .await
        .unwrap();
    assert!(csi.loops().is_empty(), "detach removed the loop device");
    c.controller_unpublish_volume(unpublish_request(&v.volume_id))
        .await
        .expect("unpublish is idempotent");

    // Read-only publish gives a read-only device.
    c.controller_publish_volume(publish_request(&v.volume_id, true))
        .await
        .unwrap();
    let (index, _) = csi.loops()[0].clone();
    assert_eq!(
        std::fs::read_to_string(format!("/sys/block/loop{index}/ro"))
            .unwrap()
            .trim(),
        "1"
    );
    // An empty node id unpublishes from every node.
    c.controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(csi.loops().is_empty());

    c.delete_volume(delete_request(&v.volume_id)).await.unwrap();
    assert!(!file.exists());
    c.controller_unpublish_volume(unpublish_request(&v.volume_id))
        .await
        .expect("unpublish of a deleted volume is OK");
}

#[tokio::test]
async fn publish_errors_carry_the_spec_codes() {
    let csi = Csi::start(&["--max-volumes-per-node=2"]).await;
    let mut c = csi.controller().await;
    let unknown = "vol-0123456789abcdef0123456789abcdef";
    assert_eq!(
        code(
            c.controller_publish_volume(publish_request(unknown, false))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(
            c.controller_publish_volume(publish_request("../../etc/passwd", false))
                .await
        ),
        Code::NotFound
    );
    let v = create(&mut c, "a", MIB).await;
    let other_node = csi::ControllerPublishVolumeRequest {
        node_id: "no-such-node".into(),
        ..publish_request(&v.volume_id, false)
    };
    assert_eq!(
        code(c.controller_publish_volume(other_node).await),
        Code::NotFound
    );
    let no_id = csi::ControllerPublishVolumeRequest {
        volume_id: String::new(),
        ..publish_request(&v.volume_id, false)
    };
    assert_eq!(
        code(c.controller_publish_volume(no_id).await),
        Code::InvalidArgument
    );
    let no_node = csi::ControllerPublishVolumeRequest {
        node_id: String::new(),
        ..publish_request(&v.volume_id, false)
    };
    assert_eq!(
        code(c.controller_publish_volume(no_node).await),
        Code::InvalidArgument
    );
    let no_cap = csi::ControllerPublishVolumeRequest {
        volume_capability: None,
        ..publish_request(&v.volume_id, false)
    };
    assert_eq!(
        code(c.controller_publish_volume(no_cap).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.controller_unpublish_volume(unpublish_request("")).await),
        Code::InvalidArgument
    );
    assert!(
        csi.loops().is_empty(),
        "no failed publish attached anything"
    );

    // The node's attach limit.
    let b = create(&mut c, "b", MIB).await;
    let d = create(&mut c, "c", MIB).await;
    c.controller_publish_volume(publish_request(&v.volume_id, false))
        .await
        .unwrap();
    c.controller_publish_volume(publish_request(&b.volume_id, false))
        .await
        .unwrap();
    assert_eq!(
        code(
            c.controller_publish_volume(publish_request(&d.volume_id, false))
                .await
        ),
        Code::ResourceExhausted
    );
    assert_eq!(csi.loops().len(), 2);
    c.controller_unpublish_volume(unpublish_request(&b.volume_id))
        .await
        .unwrap();
    c.controller_publish_volume(publish_request(&d.volume_id, false))
        .await
        .expect("a freed slot is usable");
    for id in [&v.volume_id, &d.volume_id] {
        c.controller_unpublish_volume(unpublish_request(id))
            .await
            .unwrap();
    }
    assert!(csi.loops().is_empty());
}

#[tokio::test]
async fn delete_is_idempotent_and_never_trusts_an_id_as_a_path() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let v = create(&mut c, "del", MIB).await;
    // A file next to the state directory that a path-joining driver might remove.
    let bait = csi.state_dir.join("bait.img");
    std::fs::write(&bait, b"keep").unwrap();
    for id in [
        "reallyfakevolumeid",
        "../bait",
        "vol-0123456789abcdef0123456789abcdef",
    ] {
        c.delete_volume(delete_request(id))
            .await
            .expect("unknown ids delete fine");
    }
    assert!(bait.exists());
    assert_eq!(
        code(c.delete_volume(delete_request("")).await),
        Code::InvalidArgument
    );
    c.delete_volume(delete_request(&v.volume_id)).await.unwrap();
    c.delete_volume(delete_request(&v.volume_id))
        .await
        .expect("twice is fine");
    assert!(csi.all_disk_dir_files().is_empty());
}

#[tokio::test]
async fn validate_volume_capabilities() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let v = create(&mut c, "val", MIB).await;
    let req = |caps: Vec<csi::VolumeCapability>| csi::ValidateVolumeCapabilitiesRequest {
        volume_id: v.volume_id.clone(),
        volume_capabilities: caps,
        ..Default::default()
    };
    let ok = c
        .validate_volume_capabilities(req(vec![mount_cap("xfs"), block_cap()]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.confirmed.unwrap().volume_capabilities.len(), 2);
    let multi = csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode { mode: 3 }),
        ..block_cap()
    };
    let no = c
        .validate_volume_capabilities(req(vec![multi]))
        .await
        .unwrap()
        .into_inner();
    assert!(no.confirmed.is_none());
    assert!(!no.message.is_empty());
    assert_eq!(
        code(c.validate_volume_capabilities(req(vec![])).await),
        Code::InvalidArgument
    );
    let unknown = csi::ValidateVolumeCapabilitiesRequest {
        volume_id: "vol-0123456789abcdef0123456789abcdef".into(),
        ..req(vec![block_cap()])
    };
    assert_eq!(
        code(c.validate_volume_capabilities(unknown).await),
        Code::NotFound
    );
    let none = csi::ValidateVolumeCapabilitiesRequest {
        volume_id: String::new(),
        ..req(vec![block_cap()])
    };
    assert_eq!(
        code(c.validate_volume_capabilities(none).await),
        Code::InvalidArgument
    );
}

#[tokio::test]
async fn list_volumes_pages_survive_changes_between_calls() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(create(&mut c, &format!("list-{i}"), MIB).await.volume_id);
    }
    ids.sort();
    c.controller_publish_volume(publish_request(&ids[0], false))
        .await
        .unwrap();

    let page1 = c
        .list_volumes(csi::ListVolumesRequest {
            max_entries: 2,
            starting_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page1.entries.len(), 2);
    assert!(!page1.next_token.is_empty());
    let first = &page1.entries[0];
    assert_eq!(first.volume.as_ref().unwrap().volume_id, ids[0]);
    assert_eq!(
        first.status.as_ref().unwrap().published_node_ids,
        vec![NODE_ID.to_owned()]
    );

    // The last volume of page 1 goes away and a new one comes: the token still works.
    c.delete_volume(delete_request(&ids[1])).await.unwrap();
    let added = create(&mut c, "list-new", MIB).await.volume_id;
    let mut seen: Vec<String> = page1
        .entries
        .iter()
        .map(|e| e.volume.as_ref().unwrap().volume_id.clone())
        .collect();
    let mut token = page1.next_token;
    while !token.is_empty() {
        let page = c
            .list_volumes(csi::ListVolumesRequest {
                max_entries: 2,
                starting_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.entries.len() <= 2);
        seen.extend(
            page.entries
                .iter()
                .map(|e| e.volume.as_ref().unwrap().volume_id.clone()),
        );
        token = page.next_token;
    }
    for id in &ids[2..] {
        assert!(seen.contains(id), "{id} listed");
    }
    let all = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.entries.len(), 5);
    assert!(all.next_token.is_empty());
    assert!(all
        .entries
        .iter()
        .any(|e| e.volume.as_ref().unwrap().volume_id == added));

    assert_eq!(
        code(
            c.list_volumes(csi::ListVolumesRequest {
                max_entries: 1,
                starting_token: "invalid-token".into()
            })
            .await
        ),
        Code::Aborted
    );
    assert_eq!(
        code(
            c.list_volumes(csi::ListVolumesRequest {
                max_entries: -1,
                starting_token: String::new()
            })
            .await
        ),
        Code::InvalidArgument
    );
    c.controller_unpublish_volume(unpublish_request(&ids[0]))
        .await
        .unwrap();
}

#[tokio::test]
async fn get_capacity_per_topology_segment() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let ours = csi::Topology {
        segments: [
            (ZONE_KEY.into(), ZONE.into()),
            (REGION_KEY.into(), REGION.into()),
        ]
        .into(),
    };
    let r = c
        .get_capacity(csi::GetCapacityRequest {
            accessible_topology: Some(ours),
            volume_capabilities: vec![mount_cap("ext4")],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.available_capacity > 0);
    assert!(
        r.maximum_volume_size.unwrap() >= r.available_capacity,
        "thin disks may exceed free space"
    );
    assert_eq!(r.minimum_volume_size, Some(MIB));
    let thick = c
        .get_capacity(csi::GetCapacityRequest {
            parameters: [("thickProvisioning".into(), "true".into())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(thick.maximum_volume_size.unwrap() <= thick.available_capacity + 64 * MIB);
    let theirs = csi::Topology {
        segments: [(ZONE_KEY.into(), "zone-b".into())].into(),
    };
    let r = c
        .get_capacity(csi::GetCapacityRequest {
            accessible_topology: Some(theirs),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.into_inner().available_capacity, 0);
    let bad = csi::GetCapacityRequest {
        parameters: [("color".into(), "x".into())].into(),
        ..Default::default()
    };
    assert_eq!(code(c.get_capacity(bad).await), Code::InvalidArgument);
}

#[tokio::test]
async fn expand_grows_the_file_and_the_attached_device_online() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let v = create(&mut c, "grow", 8 * MIB).await;
    c.controller_publish_volume(publish_request(&v.volume_id, false))
        .await
        .unwrap();
    let r = c
        .controller_expand_volume(expand_request(&v.volume_id, 20 * MIB))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.capacity_bytes, 20 * MIB);
    assert!(
        r.node_expansion_required,
        "a mount volume needs its filesystem grown"
    );
    let (index, file) = csi.loops()[0].clone();
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 20 * MIB as u64);
    assert_eq!(
        block_size_bytes(index),
        20 * MIB as u64,
        "the loop device sees the new size"
    );

    // Asking for less is not a shrink.
    let same = c
        .controller_expand_volume(expand_request(&v.volume_id, 4 * MIB))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(same.capacity_bytes, 20 * MIB);
    let block = csi::ControllerExpandVolumeRequest {
        volume_capability: Some(block_cap()),
        ..expand_request(&v.volume_id, 24 * MIB)
    };
    assert!(
        !c.controller_expand_volume(block)
            .await
            .unwrap()
            .into_inner()
            .node_expansion_required
    );
    let limited = csi::ControllerExpandVolumeRequest {
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 0,
            limit_bytes: 2 * MIB,
        }),
        ..expand_request(&v.volume_id, 0)
    };
    assert_eq!(
        code(c.controller_expand_volume(limited).await),
        Code::OutOfRange
    );
    let no_range = csi::ControllerExpandVolumeRequest {
        capacity_range: None,
        ..expand_request(&v.volume_id, 0)
    };
    assert_eq!(
        code(c.controller_expand_volume(no_range).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            c.controller_expand_volume(expand_request("vol-0123456789abcdef0123456789abcdef", MIB))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(c.controller_expand_volume(expand_request("", MIB)).await),
        Code::InvalidArgument
    );
    c.controller_unpublish_volume(unpublish_request(&v.volume_id))
        .await
        .unwrap();
}

#[tokio::test]
async fn get_volume_reports_a_vanished_backing_file_as_abnormal() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let v = create(&mut c, "gone", MIB).await;
    let get = csi::ControllerGetVolumeRequest {
        volume_id: v.volume_id.clone(),
    };
    let ok = c
        .controller_get_volume(get.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.volume.unwrap().volume_id, v.volume_id);
    assert!(!ok.status.unwrap().volume_condition.unwrap().abnormal);
    std::fs::remove_file(csi.disks_dir().join(format!("{}.img", v.volume_id))).unwrap();
    let bad = c
        .controller_get_volume(get)
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap()
        .volume_condition
        .unwrap();
    assert!(bad.abnormal);
    assert!(bad.message.contains("missing"), "{}", bad.message);
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(
        listed.entries[0]
            .status
            .as_ref()
            .unwrap()
            .volume_condition
            .as_ref()
            .unwrap()
            .abnormal
    );
    assert_eq!(
        code(
            c.controller_get_volume(csi::ControllerGetVolumeRequest {
                volume_id: "vol-0123456789abcdef0123456789abcdef".into()
            })
            .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(
            c.controller_get_volume(csi::ControllerGetVolumeRequest {
                volume_id: String::new()
            })
            .await
        ),
        Code::InvalidArgument
    );
}

#[tokio::test]
async fn concurrent_operations_on_one_volume_succeed_or_abort_and_a_retry_succeeds() {
    let csi = Csi::start(&[]).await;
    let channel = csi.channel().await;
    let mut c = csi::controller_client::ControllerClient::new(channel.clone());
    // Whether these collide depends on timing; what must hold is that each call either
    // succeeds or is turned away with ABORTED (never another code), and that a retry
    // succeeds. ABORTED itself is pinned by the in-flight unit test and the 64-way create.
    let v = c
        .create_volume(csi::CreateVolumeRequest {
            parameters: [("thickProvisioning".into(), "true".into())].into(),
            ..create_request("busy", MIB)
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let mut outcomes = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut c = csi::controller_client::ControllerClient::new(channel.clone());
        let id = v.volume_id.clone();
        tasks.push(tokio::spawn(async move {
            c.controller_expand_volume(expand_request(&id, (256 + i) * MIB))
                .await
        }));
    }
    for t in tasks {
        outcomes.push(
            t.await
                .unwrap()
                .map(|r| r.into_inner().capacity_bytes)
                .map_err(|s| s.code()),
        );
    }
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(_) | Err(Code::Aborted))),
        "{outcomes:?}"
    );
    assert!(outcomes.iter().any(|o| o.is_ok()));
    let r = c
        .controller_expand_volume(expand_request(&v.volume_id, 300 * MIB))
        .await
        .expect("the retry succeeds");
    assert_eq!(r.into_inner().capacity_bytes, 300 * MIB);
}

/// Exactly what external-provisioner's capacity tracking sends for the local overlay's
/// default StorageClass (`csi.storage.k8s.io/fstype: ext4`, passed as is), per zone: v2–v4 with one `mount{}`
/// capability of access mode UNKNOWN (the class names no capability), v5 with none. Both
/// must get the free space of the disks' filesystem, or kube-scheduler is told there is no
/// room and WaitForFirstConsumer pods stay Pending. A capability no disk can serve still
/// gets 0.
#[tokio::test]
async fn get_capacity_answers_the_provisioners_own_request_with_the_free_space() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let parameters: std::collections::HashMap<String, String> =
        [("csi.storage.k8s.io/fstype".to_owned(), "ext4".to_owned())].into();
    let zone = csi::Topology {
        segments: [(ZONE_KEY.into(), ZONE.into())].into(),
    };
    let v4_capability = csi::VolumeCapability {
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume::default(),
        )),
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::Unknown as i32,
        }),
    };
    let free = || {
        let s = nix::sys::statvfs::statvfs(&csi.state_dir).unwrap();
        s.blocks_available() as i64 * s.fragment_size() as i64
    };
    for (who, caps) in [("v4", vec![v4_capability]), ("v5", vec![])] {
        let before = free();
        let r = c
            .get_capacity(csi::GetCapacityRequest {
                volume_capabilities: caps,
                parameters: parameters.clone(),
                accessible_topology: Some(zone.clone()),
            })
            .await
            .unwrap_or_else(|e| panic!("{who}: {e}"))
            .into_inner();
        let after = free();
        // Other tests write beside us: the answer lies between two readings, give or take.
        let slack = 256 * MIB;
        assert!(
            r.available_capacity >= before.min(after) - slack
                && r.available_capacity <= before.max(after) + slack,
            "{who}: {} bytes, the filesystem has {before}..{after} free",
            r.available_capacity
        );
        assert!(r.available_capacity > 0, "{who}");
    }
    let multi = csi::VolumeCapability {
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume::default(),
        )),
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::MultiNodeMultiWriter as i32,
        }),
    };
    let r = c
        .get_capacity(csi::GetCapacityRequest {
            volume_capabilities: vec![multi],
            parameters,
            accessible_topology: Some(zone),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.available_capacity, 0, "no disk several nodes attach");
}
