//! Cinder slow, failing and refusing: what the answers say and that nothing is lost.

use super::*;

/// Cinder slow and failing, as its own services show it: with the cinder-volume service
/// paused (SIGSTOP) a snapshot stays `creating` — CreateSnapshot answers it not ready
/// after its 10 s, a restore from it is UNAVAILABLE, its delete FAILED_PRECONDITION (Cinder
/// refuses one being cut) and nothing is lost; the controller killed (-9) while Cinder cuts
/// what it asked for; once the service goes on, the sidecar's next CreateSnapshot answers
/// the same snapshot ready, the killed call's too, and no second one is cut. A snapshot Cinder put in `error` (its
/// admin `os-reset_status`, what `cinder snapshot-reset-state` sends) is deleted by the
/// next CreateSnapshot of its name, which fails; the retry cuts a new one. One left
/// `error_deleting` is not deleted until an operator resets it, and the answer says so.
#[tokio::test]
async fn a_slow_or_failed_cinder_snapshot_is_said_so_and_leaves_no_orphan() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let work = tempfile::tempdir().unwrap();
    let mut driver = driver(
        &cloud,
        work.path(),
        "00000000-0000-4000-8000-000000000000",
        "cinder.csi.openstack.org",
    )
    .await;
    let mut c = driver.controller().await;
    let volume = provisioned(
        &mut c,
        overcast_integration::create_request(&format!("overcast-it-snap-slow-{pid}"), GIB),
    )
    .await
    .volume_id;

    let name = format!("overcast-it-snap-slow-1-{pid}");
    let paused = Paused::new(service_group(&cloud, "cinder-volume"));
    let started = std::time::Instant::now();
    let first = c
        .create_snapshot(snapshot_request(&name, &volume, &[]))
        .await
        .expect("CreateSnapshot while Cinder cuts")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(!first.ready_to_use, "Cinder is still cutting: {first:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "answered in time"
    );
    let (_, s) = cinder(&cloud, "snapshots", &first.snapshot_id).await;
    assert_eq!(s["snapshot"]["status"], "creating", "{s}");
    still_being_made(
        &mut c,
        &first.snapshot_id,
        &format!("overcast-it-snap-early-{pid}"),
    )
    .await;
    assert_eq!(cinder(&cloud, "snapshots", &first.snapshot_id).await.0, 200);

    // The controller killed (-9) while Cinder cuts what it asked for: the sidecar's retry,
    // to the restarted controller, answers that snapshot.
    let killed = format!("overcast-it-snap-killed-{pid}");
    let asked = {
        let mut c = driver.controller().await;
        let req = snapshot_request(&killed, &volume, &[]);
        tokio::spawn(async move { c.create_snapshot(req).await })
    };
    let started = std::time::Instant::now();
    let in_cinder = loop {
        if let Some(id) = named(&cloud, &killed).await.first() {
            break id.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "never asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    driver.kill9();
    assert!(
        asked.await.unwrap().is_err(),
        "the call died with the controller"
    );
    driver.resume().await;
    let mut c = driver.controller().await;
    drop(paused);
    let ready = cut(&mut c, snapshot_request(&name, &volume, &[])).await;
    assert_eq!(
        ready.snapshot_id, first.snapshot_id,
        "one snapshot, no second"
    );
    let retried = cut(&mut c, snapshot_request(&killed, &volume, &[])).await;
    assert_eq!(
        retried.snapshot_id, in_cinder,
        "the retry answers the killed call's snapshot"
    );
    assert_eq!(
        named(&cloud, &killed).await,
        std::slice::from_ref(&in_cinder),
        "no orphan"
    );
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: in_cinder.clone(),
        ..Default::default()
    })
    .await
    .expect("DeleteSnapshot");

    // Put in `error` by Cinder's admin API: the next CreateSnapshot of its name deletes it
    // and fails; the retry cuts a new one.
    let states = CinderStates::new(Arc::clone(&cloud.os), &cloud.env);
    let (code, text) = states
        .action(
            Method::POST,
            &format!("/snapshots/{}/action", ready.snapshot_id),
            Some(&json!({"os-reset_status": {"status": "error"}})),
        )
        .await;
    assert_eq!(code, 202, "{text}");
    let failed = c
        .create_snapshot(snapshot_request(&name, &volume, &[]))
        .await
        .expect_err("a snapshot Cinder could not cut");
    assert_eq!(failed.code(), Code::Internal, "{failed:?}");
    assert!(failed.message().contains("deleted"), "{failed:?}");
    assert_eq!(
        cinder(&cloud, "snapshots", &ready.snapshot_id).await.0,
        404,
        "the failed snapshot is gone"
    );
    let again = cut(&mut c, snapshot_request(&name, &volume, &[])).await;
    assert_ne!(again.snapshot_id, ready.snapshot_id);
    assert_eq!(
        named(&cloud, &name).await,
        std::slice::from_ref(&again.snapshot_id),
        "one snapshot carries the name"
    );
    // One whose delete Cinder's backend failed (`error_deleting`): Cinder takes no DELETE
    // of it; the answer says so and what frees it, and nothing is asked of Cinder.
    let reset = |status: &'static str| {
        let states = &states;
        let path = format!("/snapshots/{}/action", again.snapshot_id);
        async move {
            let (code, text) = states
                .action(
                    Method::POST,
                    &path,
                    Some(&json!({"os-reset_status": {"status": status}})),
                )
                .await;
            assert_eq!(code, 202, "reset to {status}: {text}");
        }
    };
    reset("error_deleting").await;
    let stuck = c
        .delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: again.snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("a snapshot Cinder failed to delete");
    assert_eq!(stuck.code(), Code::Internal, "{stuck:?}");
    assert!(stuck.message().contains("reset"), "{stuck:?}");
    assert_eq!(cinder(&cloud, "snapshots", &again.snapshot_id).await.0, 200);
    reset("available").await;
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: again.snapshot_id.clone(),
        ..Default::default()
    })
    .await
    .expect("DeleteSnapshot");
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: volume.clone(),
        ..Default::default()
    })
    .await
    .expect("DeleteVolume");
}

/// Cinder's backend refusing to delete a snapshot volumes still depend on
/// (`SnapshotIsBusy`, as RBD and NFS backends raise it): Cinder's volume manager puts the
/// snapshot back to `available`. The simulator's backend refuses nothing, so the refusal
/// is played with cinder-volume paused (the delete is not carried out) and Cinder's admin
/// `os-reset_status` to that same status. DeleteSnapshot is FAILED_PRECONDITION saying
/// why, the snapshot is still in Cinder (cinder-csi answers OK and loses track of it), and
/// a later DeleteSnapshot is answered once it is gone.
#[tokio::test]
async fn a_snapshot_cinder_keeps_after_a_delete_is_failed_precondition_not_gone() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let work = tempfile::tempdir().unwrap();
    let driver = driver(
        &cloud,
        work.path(),
        "00000000-0000-4000-8000-000000000000",
        "cinder.csi.openstack.org",
    )
    .await;
    let mut c = driver.controller().await;
    let volume = provisioned(
        &mut c,
        overcast_integration::create_request(&format!("overcast-it-snap-busy-{pid}"), GIB),
    )
    .await
    .volume_id;
    let snapshot = cut(
        &mut c,
        snapshot_request(&format!("overcast-it-snap-busy-1-{pid}"), &volume, &[]),
    )
    .await
    .snapshot_id;
    // The volume that depends on it.
    let restored = provisioned(
        &mut c,
        restore_request(
            &format!("overcast-it-snap-busy-r-{pid}"),
            GIB,
            0,
            from_snapshot(&snapshot),
        ),
    )
    .await
    .volume_id;

    let paused = Paused::new(service_group(&cloud, "cinder-volume"));
    let asked = {
        let mut c = driver.controller().await;
        let id = snapshot.clone();
        tokio::spawn(async move {
            c.delete_snapshot(csi::DeleteSnapshotRequest {
                snapshot_id: id,
                ..Default::default()
            })
            .await
        })
    };
    until_snapshot_status(&cloud, &snapshot, "deleting").await;
    let states = CinderStates::new(Arc::clone(&cloud.os), &cloud.env);
    let (code, text) = states
        .action(
            Method::POST,
            &format!("/snapshots/{snapshot}/action"),
            Some(&json!({"os-reset_status": {"status": "available"}})),
        )
        .await;
    assert_eq!(code, 202, "{text}");
    let refused = asked.await.unwrap().expect_err("a snapshot Cinder kept");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("depend"), "{refused:?}");
    let (status, s) = cinder(&cloud, "snapshots", &snapshot).await;
    assert_eq!(status, 200, "still in Cinder: {s}");
    assert_eq!(s["snapshot"]["status"], "available", "{s}");

    // The backend lets go (here: cinder-volume goes on and carries out the delete it was
    // sent): the sidecar's next DeleteSnapshot is answered.
    drop(paused);
    let started = std::time::Instant::now();
    loop {
        match c
            .delete_snapshot(csi::DeleteSnapshotRequest {
                snapshot_id: snapshot.clone(),
                ..Default::default()
            })
            .await
        {
            Ok(_) => break,
            Err(e) if e.code() == Code::FailedPrecondition => {
                assert!(started.elapsed() < Duration::from_secs(60), "{e:?}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("DeleteSnapshot: {e:?}"),
        }
    }
    assert_eq!(cinder(&cloud, "snapshots", &snapshot).await.0, 404);
    for v in [restored, volume] {
        c.delete_volume(csi::DeleteVolumeRequest {
            volume_id: v,
            ..Default::default()
        })
        .await
        .expect("DeleteVolume");
    }
}
