//! CNS snapshots through the real `csi` binary's socket, on vcsim with the CNS snapshot
//! front: cut, named and described as vsphere-csi-driver names them; asked again by name
//! (the same snapshot); the spec's refusals; the per-volume limit of `[Snapshot]`; listed
//! by id, by source and in pages; restored (grown to the size asked); deleted, and a
//! delete of an id of another shape OK. A snapshot vsphere-csi-driver made (put in CNS by
//! the front, not through our code: its description `<name>-<volume>`) is listed, found
//! again by its CSI name, restored and deleted after the switch. A volume with snapshots
//! is neither deleted nor grown (FAILED_PRECONDITION, in vsphere-csi-driver's words) until
//! they are gone.

use overcast_integration::cns_snapshots::{CnsSnapshots, Snapshot as CnsSnapshot};
use overcast_integration::csi_v1 as csi;
use overcast_integration::vcsim_front::{Part, VcsimFront};
use tonic::Code;

use super::*;

const MIB: i64 = 1 << 20;

fn cut_request(name: &str, source: &str) -> csi::CreateSnapshotRequest {
    csi::CreateSnapshotRequest {
        name: name.into(),
        source_volume_id: source.into(),
        ..Default::default()
    }
}

/// A restore as external-provisioner asks it with `--extra-create-metadata` (the
/// overlay's): the PV's name among the parameters.
fn restore_request(name: &str, snapshot: &str, bytes: i64) -> csi::CreateVolumeRequest {
    let mut r = overcast_integration::create_request(name, bytes);
    r.parameters
        .insert("csi.storage.k8s.io/pv/name".into(), name.into());
    r.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: snapshot.into(),
            },
        )),
    });
    r
}

#[tokio::test]
async fn cns_snapshots_are_cut_listed_restored_and_deleted_as_vsphere_csi_driver_s() {
    let Some(sim) = Vcsim::start("CNS snapshots through the socket", &[]) else {
        return;
    };
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let part = CnsSnapshots::new(Arc::clone(&admin));
    let front = VcsimFront::start(&sim, Arc::clone(&part) as Arc<dyn Part>).await;
    let dir = tempfile::tempdir().unwrap();
    // Two snapshots a volume, as the cloud-config says.
    let mut driver = super::csi::vsphere_driver(
        dir.path(),
        front.port,
        &sim.ca_file,
        "[Snapshot]\nglobal-max-snapshots-per-block-volume = 2\n",
        true,
    )
    .await;
    let mut c = driver.controller().await;
    let volume = |name: &'static str, bytes: i64| {
        let mut c = c.clone();
        async move {
            c.create_volume(overcast_integration::create_request(name, bytes))
                .await
                .expect("create")
                .into_inner()
                .volume
                .unwrap()
                .volume_id
        }
    };
    let a = volume("pvc-snap-a", 64 * MIB).await;
    let b = volume("pvc-snap-b", 64 * MIB).await;

    // Cut: the id is <volume>+<snapshot>, the description <name>-<volume>.
    let one = c
        .create_snapshot(cut_request("snapshot-1", &a))
        .await
        .expect("cut")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(one.ready_to_use);
    assert_eq!(one.source_volume_id, a);
    assert_eq!(one.size_bytes, 64 * MIB);
    let (vol, snap) = one
        .snapshot_id
        .split_once('+')
        .expect("<volume>+<snapshot>");
    assert_eq!(vol, a);
    let held = part.snapshots();
    let made = held.iter().find(|s| s.snapshot_id == snap).expect("in CNS");
    assert_eq!(made.description, format!("snapshot-1-{a}"));
    let again = c
        .create_snapshot(cut_request("snapshot-1", &a))
        .await
        .expect("again")
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(again.snapshot_id, one.snapshot_id);
    assert_eq!(again.creation_time, one.creation_time);
    assert_eq!(part.snapshots().len(), 1, "no second snapshot");
    for (req, code) in [
        (cut_request("snapshot-1", &b), Code::AlreadyExists),
        (
            cut_request("snapshot-x", "0c3c7e4b-5f2a-4c61-9a1e-2b5a3c4d5e6f"),
            Code::NotFound,
        ),
    ] {
        let e = c.create_snapshot(req.clone()).await.expect_err(&req.name);
        assert_eq!(
            e.code(),
            code,
            "{} of {}: {e:?}",
            req.name,
            req.source_volume_id
        );
    }
    let mut classed = cut_request("snapshot-x", &a);
    classed.parameters.insert("type".into(), "snapshot".into());
    let e = c.create_snapshot(classed).await.expect_err("a parameter");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // A snapshot vsphere-csi-driver made before the switch: in CNS under its
    // description, found again by its CSI name, listed, restored.
    let theirs = CnsSnapshot {
        volume_id: a.clone(),
        snapshot_id: "9b8a7c6d-1e2f-4a3b-8c7d-6e5f4a3b2c1d".into(),
        description: format!("snapshot-theirs-{a}"),
        create_time: "2026-11-30T10:00:00Z".into(),
    };
    part.add(theirs.clone());
    let their_id = format!("{a}+{}", theirs.snapshot_id);
    let found = c
        .create_snapshot(cut_request("snapshot-theirs", &a))
        .await
        .expect("their snapshot, asked for by its name")
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(found.snapshot_id, their_id);
    assert_eq!(found.creation_time.as_ref().unwrap().seconds, 1_796_032_800);
    // The limit (2 here): a third of a is refused, in vsphere-csi-driver's words.
    let e = c
        .create_snapshot(cut_request("snapshot-3", &a))
        .await
        .expect_err("past the limit");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("reaches the configured maximum (2)"),
        "{}",
        e.message()
    );

    // Listed: by id, by source, in pages of one, all.
    let list = |req: csi::ListSnapshotsRequest| {
        let mut c = c.clone();
        async move {
            c.list_snapshots(req)
                .await
                .expect("list")
                .into_inner()
                .entries
                .into_iter()
                .map(|e| e.snapshot.unwrap().snapshot_id)
                .collect::<Vec<_>>()
        }
    };
    let mut of_a = vec![one.snapshot_id.clone(), their_id.clone()];
    of_a.sort();
    assert_eq!(
        list(csi::ListSnapshotsRequest {
            source_volume_id: a.clone(),
            ..Default::default()
        })
        .await,
        of_a
    );
    assert_eq!(
        list(csi::ListSnapshotsRequest {
            snapshot_id: their_id.clone(),
            ..Default::default()
        })
        .await,
        std::slice::from_ref(&their_id)
    );
    assert!(list(csi::ListSnapshotsRequest {
        source_volume_id: b.clone(),
        ..Default::default()
    })
    .await
    .is_empty());
    assert!(list(csi::ListSnapshotsRequest {
        snapshot_id: "not-ours".into(),
        ..Default::default()
    })
    .await
    .is_empty());
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_snapshots(csi::ListSnapshotsRequest {
                max_entries: 1,
                starting_token: token.clone(),
                ..Default::default()
            })
            .await
            .expect("page")
            .into_inner();
        assert!(page.entries.len() <= 1);
        paged.extend(
            page.entries
                .into_iter()
                .map(|e| e.snapshot.unwrap().snapshot_id),
        );
        token = page.next_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(paged, of_a);

    // Restored, theirs too: made from the snapshot, grown to the size asked.
    let restored = c
        .create_volume(restore_request("pvc-restored", &their_id, 128 * MIB))
        .await
        .expect("restore their snapshot")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(restored.capacity_bytes, 128 * MIB);
    assert!(
        matches!(
            restored.content_source.as_ref().and_then(|s| s.r#type.as_ref()),
            Some(csi::volume_content_source::Type::Snapshot(s)) if s.snapshot_id == their_id
        ),
        "{restored:?}"
    );
    c.create_volume(restore_request("pvc-restored", &their_id, 128 * MIB))
        .await
        .expect("the same restore again");
    // Again after the controller restarted: the restore's source is kept with its state
    // (CNS does not say it back).
    driver.kill9();
    driver.resume().await;
    let mut c = driver.controller().await;
    c.create_volume(restore_request("pvc-restored", &their_id, 128 * MIB))
        .await
        .expect("the same restore after a restart");
    // And in a new pod, its state directory gone (an emptyDir): the source is read from
    // the volume's CNS metadata (the label on its PV's entity).
    driver.kill9();
    std::fs::remove_dir_all(dir.path().join("state/vsphere-restores")).expect("the records");
    driver.resume().await;
    let mut c = driver.controller().await;
    let again = c
        .create_volume(restore_request("pvc-restored", &their_id, 128 * MIB))
        .await
        .expect("the same restore in a new pod")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(again.volume_id, restored.volume_id);
    let other = c
        .create_volume(restore_request("pvc-restored", &one.snapshot_id, 128 * MIB))
        .await
        .expect_err("another source");
    assert_eq!(other.code(), Code::AlreadyExists, "{other:?}");
    let small = c
        .create_volume({
            let mut r = restore_request("pvc-restored-small", &one.snapshot_id, 32 * MIB);
            r.capacity_range.as_mut().unwrap().limit_bytes = 32 * MIB;
            r
        })
        .await
        .expect_err("smaller than its snapshot");
    assert_eq!(small.code(), Code::OutOfRange, "{small:?}");
    let missing = c
        .create_volume(restore_request(
            "pvc-restored-x",
            &format!("{a}+00000000-0000-4000-8000-000000000000"),
            64 * MIB,
        ))
        .await
        .expect_err("no such snapshot");
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");

    // A volume with snapshots (theirs among them) is neither deleted nor grown, as
    // vsphere-csi-driver refuses both; the snapshots and the volume stay. A volume
    // without any grows; a grow to the size a volume has is still answered.
    let e = c
        .delete_volume(overcast_integration::delete_request(&a))
        .await
        .expect_err("a volume with snapshots");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("cannot be deleted") && e.message().contains(&their_id),
        "{}",
        e.message()
    );
    let grow = |id: &str, bytes: i64| csi::ControllerExpandVolumeRequest {
        volume_id: id.to_owned(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        ..Default::default()
    };
    let e = c
        .controller_expand_volume(grow(&a, 96 * MIB))
        .await
        .expect_err("a grow under snapshots");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("cannot be expanded") && e.message().contains(&one.snapshot_id),
        "{}",
        e.message()
    );
    let same = c
        .controller_expand_volume(grow(&a, 64 * MIB))
        .await
        .expect("a grow to the size it has")
        .into_inner();
    assert_eq!(same.capacity_bytes, 64 * MIB);
    let grown = c
        .controller_expand_volume(grow(&b, 96 * MIB))
        .await
        .expect("a volume without snapshots grows")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 96 * MIB);
    assert_eq!(part.snapshots().len(), 2, "both snapshots kept");
    let kept = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .expect("list volumes")
        .into_inner()
        .entries
        .into_iter()
        .any(|e| {
            e.volume
                .is_some_and(|v| v.volume_id == a && v.capacity_bytes == 64 * MIB)
        });
    assert!(
        kept,
        "the refused volume is still there, its size unchanged"
    );

    // Deleted: twice, and an id of another shape.
    for id in [
        &one.snapshot_id,
        &one.snapshot_id,
        &their_id,
        &"not+ours".to_owned(),
    ] {
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("delete {id}: {e:?}"));
    }
    assert!(part.snapshots().is_empty());
    for v in [&a, &b, &restored.volume_id] {
        c.delete_volume(overcast_integration::delete_request(v))
            .await
            .expect("delete volume");
    }
}

/// A vCenter older than 7.0 Update 3 (vcsim says 6.5.0 without the front) has no CNS
/// snapshots: a cut is FAILED_PRECONDITION naming its release, a listing is empty, a
/// delete of a snapshot id OK, and no snapshot method is asked of its CNS — so a volume's
/// delete and grow go through without the snapshot check it would not answer.
#[tokio::test]
async fn a_vcenter_without_cns_snapshots_is_told_apart_by_its_release() {
    let Some(sim) = Vcsim::start("a vCenter without CNS snapshots", &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let driver = super::csi::vsphere_driver(dir.path(), sim.port, &sim.ca_file, "", false).await;
    let mut c = driver.controller().await;
    let volume = c
        .create_volume(overcast_integration::create_request("pvc-old-vc", 64 * MIB))
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let e = c
        .create_snapshot(cut_request("snapshot-old-vc", &volume))
        .await
        .expect_err("no CNS snapshots on 6.5.0");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("6.5.0") && e.message().contains("7.0 Update 3"),
        "{}",
        e.message()
    );
    let listed = c
        .list_snapshots(csi::ListSnapshotsRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert!(listed.entries.is_empty(), "{listed:?}");
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: format!("{volume}+9b8a7c6d-1e2f-4a3b-8c7d-6e5f4a3b2c1d"),
        ..Default::default()
    })
    .await
    .expect("a snapshot an old vCenter cannot have is gone");
    let grown = c
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: volume.clone(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 96 * MIB,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await
        .expect("grow")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 96 * MIB);
    c.delete_volume(overcast_integration::delete_request(&volume))
        .await
        .expect("delete");
}

/// The controller killed while CNS cuts a snapshot (its task running, the snapshot not
/// listed until it ends, as a CNS may record it): the retry after the restart waits for
/// that task — recorded in the state directory before it was awaited — and answers its
/// snapshot; no second one is cut.
#[tokio::test]
async fn a_cut_the_controller_was_killed_during_is_answered_once_after_the_restart() {
    let Some(sim) = Vcsim::start("a snapshot cut across a restart", &[]) else {
        return;
    };
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let part = CnsSnapshots::new(Arc::clone(&admin));
    let front = VcsimFront::start(&sim, Arc::clone(&part) as Arc<dyn Part>).await;
    let dir = tempfile::tempdir().unwrap();
    let mut driver =
        super::csi::vsphere_driver(dir.path(), front.port, &sim.ca_file, "", true).await;
    let mut c = driver.controller().await;
    let volume = c
        .create_volume(overcast_integration::create_request(
            "pvc-cut-crash",
            64 * MIB,
        ))
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;

    part.hold_unlisted(&volume);
    let mut first = driver.controller().await;
    let cut = tokio::spawn({
        let volume = volume.clone();
        async move {
            first
                .create_snapshot(cut_request("snapshot-crash", &volume))
                .await
        }
    });
    wait("the cut's task to start", 30, async || {
        (part.snapshots().len() == 1).then_some(())
    })
    .await;
    driver.kill9();
    let _ = cut.await;
    driver.resume().await;
    let mut c = driver.controller().await;
    let retry = tokio::spawn({
        let mut c = c.clone();
        let volume = volume.clone();
        async move {
            c.create_snapshot(cut_request("snapshot-crash", &volume))
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        part.snapshots().len(),
        1,
        "the retry cut a second snapshot while the first cut's task ran"
    );
    assert!(!retry.is_finished(), "the retry waits for the task");
    part.release();
    let answered = retry
        .await
        .unwrap()
        .expect("the retry answers the cut")
        .into_inner()
        .snapshot
        .unwrap();
    let held = part.snapshots();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(
        answered.snapshot_id,
        format!("{volume}+{}", held[0].snapshot_id)
    );
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: answered.snapshot_id,
        ..Default::default()
    })
    .await
    .expect("delete snapshot");
    c.delete_volume(overcast_integration::delete_request(&volume))
        .await
        .expect("delete volume");
}
