//! cinder-backup slow and failing, and what a crash left: what the answers say and that
//! nothing is lost.

use super::*;

/// The controller died after it cut the snapshot to back up and before it asked for the
/// backup (the snapshot is all there is, under the content's name): the sidecar's retry
/// backs up that snapshot — no second one — and deletes it once the backup is made.
#[tokio::test]
async fn a_snapshot_a_crash_left_before_its_backup_is_backed_up_and_deleted() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    if backup_data().is_none() {
        return;
    }
    let pid = std::process::id();
    let work = tempfile::tempdir().unwrap();
    let driver = swept_driver(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    let volume = provisioned(
        &mut c,
        overcast_integration::create_request(&format!("overcast-it-bk-crash-{pid}"), GIB),
    )
    .await
    .volume_id;
    let name = format!("overcast-it-bk-crash-1-{pid}");
    // What the first attempt left: its snapshot, cut as ours cuts one.
    let left = cut(&mut c, snapshot_request(&name, &volume, &[])).await;
    let made = cut(&mut c, snapshot_request(&name, &volume, &class(&[]))).await;
    let (_, kept) = backup(&cloud, &made.snapshot_id).await;
    assert_eq!(
        kept["backup"]["snapshot_id"],
        left.snapshot_id.as_str(),
        "the backup is of the snapshot left: {kept}"
    );
    assert!(snapshot_gone(&cloud, &left.snapshot_id).await);
    assert!(named(&cloud, &name).await.is_empty(), "no second snapshot");
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: made.snapshot_id.clone(),
        ..Default::default()
    })
    .await
    .expect("delete the backup");
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: volume,
        ..Default::default()
    })
    .await
    .expect("delete volume");
}

/// cinder-backup slow, as its own service shows it paused (SIGSTOP): the backup stays
/// `creating` — CreateSnapshot answers it, not ready, within its 10 s, a restore from it
/// is UNAVAILABLE, its delete FAILED_PRECONDITION (Cinder takes no delete of a backup
/// being made) and nothing is lost; once it goes on, the sidecar's next CreateSnapshot
/// answers the same backup ready and the snapshot cut for it is gone.
#[tokio::test]
async fn a_slow_backup_is_answered_not_ready_and_loses_nothing() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    let Some(data) = backup_data() else {
        return;
    };
    let pid = std::process::id();
    let work = tempfile::tempdir().unwrap();
    let driver = swept_driver(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    let volume = provisioned(
        &mut c,
        overcast_integration::create_request(&format!("overcast-it-bk-slow-{pid}"), GIB),
    )
    .await
    .volume_id;
    let held = written(&data, &volume, pid + 3);
    let name = format!("overcast-it-bk-slow-1-{pid}");

    let paused = Paused::new(service_group(&cloud, "cinder-backup"));
    let started = std::time::Instant::now();
    let first = c
        .create_snapshot(snapshot_request(&name, &volume, &class(&[])))
        .await
        .expect("CreateSnapshot while cinder-backup copies")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(!first.ready_to_use, "still being made: {first:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "answered in time"
    );
    let (code, b) = backup(&cloud, &first.snapshot_id).await;
    assert_eq!(code, 200, "the answer's id is the backup's: {b}");
    assert_eq!(b["backup"]["status"], "creating", "{b}");
    still_being_made(
        &mut c,
        &first.snapshot_id,
        &format!("overcast-it-bk-early-{pid}"),
    )
    .await;
    assert_eq!(backup(&cloud, &first.snapshot_id).await.0, 200);
    let cut_from = b["backup"]["snapshot_id"].as_str().unwrap().to_owned();
    assert_eq!(
        cinder(&cloud, "snapshots", &cut_from).await.0,
        200,
        "the snapshot stays while it is backed up"
    );

    drop(paused);
    let ready = cut(&mut c, snapshot_request(&name, &volume, &class(&[]))).await;
    assert_eq!(ready.snapshot_id, first.snapshot_id, "one backup");
    assert!(snapshot_gone(&cloud, &cut_from).await);
    let r = provisioned(
        &mut c,
        restore_request(
            &format!("overcast-it-bk-late-{pid}"),
            GIB,
            0,
            from_snapshot(&ready.snapshot_id),
        ),
    )
    .await;
    assert_eq!(restored(&data, &r.volume_id, held.len()), held);
    deleted(&mut c, &[&r.volume_id, &volume]).await;
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: ready.snapshot_id.clone(),
        ..Default::default()
    })
    .await
    .expect("delete the backup");
    assert_eq!(backup(&cloud, &ready.snapshot_id).await.0, 404);
}

/// cinder-backup fails to read the volume (its device played as a directory: the attach
/// fails, as a backend's would): Cinder puts the backup in `error` and the snapshot back
/// to `available`. The CreateSnapshot that sees it deletes both and fails with Cinder's
/// reason (INTERNAL); once the volume reads again, the retry makes a new backup.
#[tokio::test]
async fn a_backup_cinder_fails_is_deleted_with_its_snapshot_and_made_anew() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    let Some(data) = backup_data() else {
        return;
    };
    let pid = std::process::id();
    let work = tempfile::tempdir().unwrap();
    let driver = swept_driver(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    let volume = provisioned(
        &mut c,
        overcast_integration::create_request(&format!("overcast-it-bk-fails-{pid}"), GIB),
    )
    .await
    .volume_id;
    let unreadable = data.join(&volume);
    std::fs::create_dir_all(&unreadable).unwrap();
    let name = format!("overcast-it-bk-fails-1-{pid}");
    let req = snapshot_request(&name, &volume, &class(&[]));
    let started = std::time::Instant::now();
    let failed = loop {
        match c.create_snapshot(req.clone()).await {
            Ok(r) => {
                let s = r.into_inner().snapshot.unwrap();
                assert!(!s.ready_to_use, "a backup of an unreadable volume: {s:?}");
            }
            Err(e) if e.code() == Code::Unavailable => {}
            Err(e) => break e,
        }
        assert!(started.elapsed() < Duration::from_secs(60), "never failed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(failed.code(), Code::Internal, "{failed:?}");
    assert!(
        failed.message().contains("Is a directory"),
        "Cinder's reason: {failed:?}"
    );
    let r = cloud
        .os
        .call(
            Service::BlockStorage,
            "backup_list",
            Method::GET,
            &format!("/backups/detail?name={name}"),
            None,
            None,
        )
        .await
        .unwrap();
    let left: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(left["backups"], json!([]), "the failed backup is deleted");
    let started = std::time::Instant::now();
    while !named(&cloud, &name).await.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the snapshot cut for it is deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    std::fs::remove_dir(&unreadable).unwrap();
    let held = written(&data, &volume, pid + 5);
    let made = cut(&mut c, req).await;
    let r = provisioned(
        &mut c,
        restore_request(
            &format!("overcast-it-bk-fails-restored-{pid}"),
            GIB,
            0,
            from_snapshot(&made.snapshot_id),
        ),
    )
    .await;
    assert_eq!(restored(&data, &r.volume_id, held.len()), held);
    deleted(&mut c, &[&r.volume_id, &volume]).await;
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: made.snapshot_id,
        ..Default::default()
    })
    .await
    .expect("delete the backup");
}

/// cinder-backup down (paused until Cinder says so, `service_down_time`: about a minute):
/// Cinder answers the backup's DELETE 404 "Service cinder-backup could not be found."
/// while the backup is still there. The DeleteSnapshot is UNAVAILABLE and the backup kept
/// (a 404 read as "already gone" answered OK and left it in Cinder for good); once the
/// service is up again the retry deletes it.
#[tokio::test]
async fn a_backup_whose_service_is_down_is_not_said_deleted() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    if backup_data().is_none() {
        return;
    }
    let pid = std::process::id();
    let work = tempfile::tempdir().unwrap();
    let driver = swept_driver(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    let volume = provisioned(
        &mut c,
        overcast_integration::create_request(&format!("overcast-it-bk-down-{pid}"), GIB),
    )
    .await
    .volume_id;
    let made = cut(
        &mut c,
        snapshot_request(
            &format!("overcast-it-bk-down-1-{pid}"),
            &volume,
            &class(&[]),
        ),
    )
    .await;
    let service_state = || async {
        let r = cloud
            .os
            .call(
                Service::BlockStorage,
                "service_list",
                Method::GET,
                "/os-services?binary=cinder-backup",
                None,
                None,
            )
            .await
            .unwrap();
        let doc: Value = serde_json::from_slice(&r.body).unwrap();
        doc["services"][0]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let paused = Paused::new(service_group(&cloud, "cinder-backup"));
    let started = std::time::Instant::now();
    while service_state().await != "down" {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "Cinder never said cinder-backup was down"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let refused = c
        .delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: made.snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("not deleted while no backup service is up");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("cinder-backup"), "{refused:?}");
    assert_eq!(backup(&cloud, &made.snapshot_id).await.0, 200, "kept");

    drop(paused);
    let started = std::time::Instant::now();
    while service_state().await != "up" {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never up again"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: made.snapshot_id.clone(),
        ..Default::default()
    })
    .await
    .expect("deleted once the service is up");
    assert_eq!(backup(&cloud, &made.snapshot_id).await.0, 404);
    deleted(&mut c, &[&volume]).await;
}

/// cinder-backup's store fails under a backup (its files unreadable: each one turned into
/// a directory). A restore from it ends `error_restoring`: that volume is deleted and the
/// create is INTERNAL, no volume left under the name. Its delete fails in the driver
/// (Cinder puts the backup back to `error`, with the reason): INTERNAL with the reason,
/// the backup kept. Once the store reads again, the delete goes through.
#[tokio::test]
async fn a_backup_its_store_fails_under_is_neither_restored_nor_said_deleted() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    let Some(data) = backup_data() else {
        return;
    };
    let pid = std::process::id();
    let work = tempfile::tempdir().unwrap();
    let driver = swept_driver(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    let volume = provisioned(
        &mut c,
        overcast_integration::create_request(&format!("overcast-it-bk-store-{pid}"), GIB),
    )
    .await
    .volume_id;
    written(&data, &volume, pid + 11);
    let made = cut(
        &mut c,
        snapshot_request(
            &format!("overcast-it-bk-store-1-{pid}"),
            &volume,
            &class(&[]),
        ),
    )
    .await;
    let (_, b) = backup(&cloud, &made.snapshot_id).await;
    let store = std::path::Path::new(&cloud.env["OSSIM_STATE"])
        .join("cinder/backups")
        .join(b["backup"]["container"].as_str().expect("a container"));
    let files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&store)
        .unwrap_or_else(|e| panic!("{}: {e}", store.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    assert!(
        !files.is_empty(),
        "the backup's files in {}",
        store.display()
    );
    for (p, _) in &files {
        std::fs::remove_file(p).unwrap();
        std::fs::create_dir(p).unwrap();
    }

    let name = format!("overcast-it-pvc-bk-store-{pid}");
    let failed = c
        .create_volume(restore_request(
            &name,
            GIB,
            0,
            from_snapshot(&made.snapshot_id),
        ))
        .await
        .expect_err("a restore the store cannot read");
    assert_eq!(failed.code(), Code::Internal, "{failed:?}");
    assert!(failed.message().contains("error_restoring"), "{failed:?}");
    let started = std::time::Instant::now();
    loop {
        let r = cloud
            .os
            .call(
                Service::BlockStorage,
                "volume_list",
                Method::GET,
                &format!("/volumes/detail?name={name}"),
                None,
                None,
            )
            .await
            .unwrap();
        let doc: Value = serde_json::from_slice(&r.body).unwrap();
        if doc["volumes"].as_array().is_some_and(|v| v.is_empty()) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the failed restore's volume is left: {doc}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let refused = c
        .delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: made.snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("a delete the store fails");
    assert_eq!(refused.code(), Code::Internal, "{refused:?}");
    assert!(refused.message().contains("Is a directory"), "{refused:?}");
    assert_eq!(backup(&cloud, &made.snapshot_id).await.0, 200, "kept");

    for (p, bytes) in &files {
        std::fs::remove_dir(p).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: made.snapshot_id.clone(),
        ..Default::default()
    })
    .await
    .expect("deleted once the store reads");
    assert_eq!(backup(&cloud, &made.snapshot_id).await.0, 404);
    deleted(&mut c, &[&volume]).await;
}
