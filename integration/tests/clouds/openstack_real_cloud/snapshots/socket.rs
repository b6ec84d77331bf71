//! Cinder snapshots through the socket: cut (of a detached and an attached volume), named
//! and tagged as cinder-csi-plugin tags them, listed, restored, cloned, refused, deleted.

use super::*;

#[tokio::test]
async fn cinder_snapshots_are_cut_listed_restored_cloned_and_deleted_through_the_socket() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let server = cloud.boot(&format!("overcast-it-snap-{pid}")).await;
    let work = tempfile::tempdir().unwrap();
    let driver = driver(&cloud, work.path(), &server, "cinder.csi.openstack.org").await;
    let mut c = driver.controller().await;

    let caps = c
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let advertised: Vec<i32> = caps
        .capabilities
        .iter()
        .filter_map(|c| match c.r#type {
            Some(csi::controller_service_capability::Type::Rpc(ref r)) => Some(r.r#type),
            _ => None,
        })
        .collect();
    use csi::controller_service_capability::rpc::Type as Rpc;
    for want in [
        Rpc::CreateDeleteSnapshot,
        Rpc::ListSnapshots,
        Rpc::CloneVolume,
    ] {
        assert!(
            advertised.contains(&(want as i32)),
            "{want:?} in {advertised:?}"
        );
    }

    let volume = |name: &str, gib: i64| overcast_integration::create_request(name, gib * GIB);
    let a = provisioned(&mut c, volume(&format!("overcast-it-snap-a-{pid}"), 2))
        .await
        .volume_id;
    let b = provisioned(&mut c, volume(&format!("overcast-it-snap-b-{pid}"), 1))
        .await
        .volume_id;

    // Cut, with the names csi-snapshotter's --extra-create-metadata sends.
    let name = format!("overcast-it-snap-1-{pid}");
    let class = [
        (
            "csi.storage.k8s.io/volumesnapshot/name",
            "db-before-upgrade",
        ),
        ("csi.storage.k8s.io/volumesnapshot/namespace", "prod"),
        (
            "csi.storage.k8s.io/volumesnapshotcontent/name",
            "snapcontent-1",
        ),
    ];
    let before = std::time::SystemTime::now();
    let one = cut(&mut c, snapshot_request(&name, &a, &class)).await;
    assert_eq!(one.source_volume_id, a);
    assert_eq!(one.size_bytes, 2 * GIB, "the volume's size when it was cut");
    let created = one.creation_time.unwrap();
    let created =
        std::time::UNIX_EPOCH + Duration::new(created.seconds as u64, created.nanos as u32);
    let skew = Duration::from_secs(60);
    assert!(
        created + skew > before && created < std::time::SystemTime::now() + skew,
        "Cinder's created_at, read as UTC: {created:?} against {before:?}"
    );
    // As Cinder keeps it: cinder-csi-plugin's name, description and metadata.
    let (code, kept) = cinder(&cloud, "snapshots", &one.snapshot_id).await;
    assert_eq!(code, 200, "{kept}");
    let kept = &kept["snapshot"];
    assert_eq!(kept["name"], name.as_str());
    assert_eq!(kept["volume_id"], a.as_str());
    assert_eq!(kept["description"], CINDER_CSI_DESCRIPTION);
    assert_eq!(
        kept["metadata"]["cinder.csi.openstack.org/cluster"],
        "overcast-it"
    );
    for (k, v) in class {
        assert_eq!(kept["metadata"][k], v, "{k}");
    }

    // The spec's refusals.
    let refused = |r: Result<tonic::Response<csi::CreateSnapshotResponse>, tonic::Status>| {
        r.expect_err("refused").code()
    };
    assert_eq!(
        refused(c.create_snapshot(snapshot_request(&name, &b, &[])).await),
        Code::AlreadyExists,
        "the same name of another volume"
    );
    assert_eq!(
        refused(
            c.create_snapshot(snapshot_request(
                &format!("overcast-it-snap-none-{pid}"),
                "6b1b1f4e-0000-4000-8000-000000000000",
                &[]
            ))
            .await
        ),
        Code::NotFound,
        "a source volume that does not exist"
    );
    assert_eq!(
        refused(
            c.create_snapshot(snapshot_request(
                &format!("overcast-it-snap-clone-{pid}"),
                &a,
                &[("type", "clone")]
            ))
            .await
        ),
        Code::InvalidArgument,
        "a type cinder-csi-plugin does not take (backups: backups.rs)"
    );

    // Of an attached volume: cut (force), unless the class says force-create "false".
    c.controller_publish_volume(overcast_integration::attach_request(
        &a,
        &server,
        overcast_integration::mount_cap("ext4"),
    ))
    .await
    .expect("publish a");
    let in_use = cut(
        &mut c,
        snapshot_request(&format!("overcast-it-snap-2-{pid}"), &a, &[]),
    )
    .await;
    assert_eq!(in_use.source_volume_id, a);
    let no_force = c
        .create_snapshot(snapshot_request(
            &format!("overcast-it-snap-nf-{pid}"),
            &a,
            &[("force-create", "false")],
        ))
        .await
        .expect_err("Cinder refuses an attached volume without force");
    assert_eq!(no_force.code(), Code::FailedPrecondition, "{no_force:?}");
    assert!(no_force.message().contains("force-create"), "{no_force:?}");
    c.controller_unpublish_volume(overcast_integration::detach_request(&a, &server))
        .await
        .expect("unpublish a");

    // Listed: by id, by source, by pages of one.
    let by_id = list(
        &mut c,
        csi::ListSnapshotsRequest {
            snapshot_id: one.snapshot_id.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&by_id), std::slice::from_ref(&one.snapshot_id));
    let listed = by_id.entries[0].snapshot.clone().unwrap();
    assert!(listed.ready_to_use);
    assert_eq!(listed.size_bytes, 2 * GIB);
    assert_eq!(listed.creation_time, one.creation_time);
    for (id, source) in [
        ("6b1b1f4e-0000-4000-8000-000000000000", ""),
        ("not-a-uuid", ""),
        (one.snapshot_id.as_str(), b.as_str()),
    ] {
        let none = list(
            &mut c,
            csi::ListSnapshotsRequest {
                snapshot_id: id.into(),
                source_volume_id: source.into(),
                ..Default::default()
            },
        )
        .await;
        assert!(none.entries.is_empty(), "{id} of {source:?}: {none:?}");
    }
    let mut of_a = vec![one.snapshot_id.clone(), in_use.snapshot_id.clone()];
    of_a.sort();
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let page = list(
            &mut c,
            csi::ListSnapshotsRequest {
                source_volume_id: a.clone(),
                max_entries: 1,
                starting_token: token.clone(),
                ..Default::default()
            },
        )
        .await;
        assert!(page.entries.len() <= 1, "{page:?}");
        paged.extend(ids(&page));
        token = page.next_token;
        if token.is_empty() {
            break;
        }
        assert!(paged.len() < 10, "{paged:?}");
    }
    assert_eq!(paged, of_a, "of volume a, in id order, one a page");
    let every = ids(&list(&mut c, csi::ListSnapshotsRequest::default()).await);
    assert!(of_a.iter().all(|id| every.contains(id)), "{every:?}");
    // A page token whose snapshot is gone since (Cinder refuses the marker): the next page
    // is the rest after it, read from the whole listing. An extra snapshot is cut until
    // one is not the last in id order (ids are Cinder's random UUIDs).
    let by_a = |max_entries: i32, starting_token: String| csi::ListSnapshotsRequest {
        source_volume_id: a.clone(),
        max_entries,
        starting_token,
        ..Default::default()
    };
    let mut extras = Vec::new();
    let (gone, after_gone) = loop {
        let extra = cut(
            &mut c,
            snapshot_request(
                &format!("overcast-it-snap-x{}-{pid}", extras.len()),
                &a,
                &[],
            ),
        )
        .await
        .snapshot_id;
        extras.push(extra.clone());
        let all = ids(&list(&mut c, by_a(0, String::new())).await);
        let at = all.iter().position(|i| *i == extra).expect("listed");
        if at + 1 < all.len() {
            break (extra, all[at + 1].clone());
        }
        assert!(extras.len() < 6, "{all:?}");
    };
    let mut token = String::new();
    loop {
        let page = list(&mut c, by_a(1, token)).await;
        token = page.next_token.clone();
        assert!(!token.is_empty(), "paged past {gone} without it");
        if ids(&page) == [gone.clone()] {
            break;
        }
    }
    let deleting = c.clone();
    let delete = |id: String| {
        let mut c = deleting.clone();
        async move {
            c.delete_snapshot(csi::DeleteSnapshotRequest {
                snapshot_id: id,
                ..Default::default()
            })
            .await
            .expect("delete an extra snapshot");
        }
    };
    delete(gone.clone()).await;
    let next = list(&mut c, by_a(1, token)).await;
    assert_eq!(
        ids(&next),
        [after_gone],
        "the page after a token whose snapshot is gone"
    );
    for id in extras.into_iter().filter(|id| *id != gone) {
        delete(id).await;
    }

    // Restored: not smaller than the snapshot; the new volume is Cinder's from it.
    let small = c
        .create_volume(restore_request(
            &format!("overcast-it-snap-small-{pid}"),
            GIB,
            GIB,
            from_snapshot(&one.snapshot_id),
        ))
        .await
        .expect_err("a restore into a smaller volume");
    assert_eq!(small.code(), Code::OutOfRange, "{small:?}");
    let restored = provisioned(
        &mut c,
        restore_request(
            &format!("overcast-it-snap-restored-{pid}"),
            GIB,
            0,
            from_snapshot(&one.snapshot_id),
        ),
    )
    .await;
    assert_eq!(restored.capacity_bytes, 2 * GIB);
    assert_eq!(
        restored.content_source,
        Some(csi::VolumeContentSource {
            r#type: Some(from_snapshot(&one.snapshot_id))
        })
    );
    let (_, v) = cinder(&cloud, "volumes", &restored.volume_id).await;
    assert_eq!(v["volume"]["snapshot_id"], one.snapshot_id.as_str(), "{v}");
    let missing = c
        .create_volume(restore_request(
            &format!("overcast-it-snap-missing-{pid}"),
            GIB,
            0,
            from_snapshot("6b1b1f4e-0000-4000-8000-000000000000"),
        ))
        .await
        .expect_err("a snapshot that does not exist");
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    // Cloned.
    let clone = provisioned(
        &mut c,
        restore_request(
            &format!("overcast-it-snap-clone-{pid}"),
            2 * GIB,
            0,
            from_volume(&a),
        ),
    )
    .await;
    let (_, v) = cinder(&cloud, "volumes", &clone.volume_id).await;
    assert_eq!(v["volume"]["source_volid"], a.as_str(), "{v}");

    // A volume with snapshots stays until they are gone.
    let kept_volume = c
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: a.clone(),
            ..Default::default()
        })
        .await
        .expect_err("Cinder keeps a volume with snapshots");
    assert_eq!(
        kept_volume.code(),
        Code::FailedPrecondition,
        "{kept_volume:?}"
    );
    assert_eq!(cinder(&cloud, "volumes", &a).await.0, 200);

    // Deleted: gone from Cinder when the call answers; again is OK.
    for id in [&one.snapshot_id, &in_use.snapshot_id] {
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: id.clone(),
            ..Default::default()
        })
        .await
        .expect("DeleteSnapshot");
        assert_eq!(cinder(&cloud, "snapshots", id).await.0, 404, "{id}");
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: id.clone(),
            ..Default::default()
        })
        .await
        .expect("DeleteSnapshot of what is gone");
    }
    let restored_volume = cinder(&cloud, "volumes", &restored.volume_id).await;
    assert_eq!(restored_volume.0, 200, "the restore outlives its snapshot");
    for id in [&restored.volume_id, &clone.volume_id, &a, &b] {
        c.delete_volume(csi::DeleteVolumeRequest {
            volume_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("delete {id}: {e:?}"));
    }
    drop(driver);
    cloud.delete_server(&server).await;
}
