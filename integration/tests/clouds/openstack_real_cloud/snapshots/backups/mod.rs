//! Cinder backups (a snapshot class of cinder-csi-plugin's `type: backup`) through the
//! real `csi` binary's socket, on the real Cinder with its real backup service
//! (`integration/scripts/cinder-backup/up.sh`: cinder-backup's manager and POSIX driver,
//! the device attach played by a data file per volume): made as cinder-csi-plugin makes
//! them, restored with the data the volume held, deleted; one cinder-csi-plugin made (by
//! Cinder's API, as its CreateSnapshot calls it) restored and deleted after the switch; a
//! snapshot a crash left before its backup taken again. Without cinder-backup
//! (`OVERCAST_TEST_CINDER_BACKUP_DATA` unset) they say SKIPPED.

use std::path::PathBuf;

use overcast_cloud_openstack::client::Microversion;

use super::*;

/// cinder-backup slow and failing, and what a crash left.
mod failures;

/// A class as cinder-csi-plugin's README writes one for backups.
const BACKUP_CLASS: [(&str, &str); 1] = [("type", "backup")];
/// What csi-snapshotter's --extra-create-metadata sends.
const SNAPSHOTTER: [(&str, &str); 3] = [
    ("csi.storage.k8s.io/volumesnapshot/name", "nightly"),
    ("csi.storage.k8s.io/volumesnapshot/namespace", "prod"),
    (
        "csi.storage.k8s.io/volumesnapshotcontent/name",
        "snapcontent-backup",
    ),
];

/// The directory of the volumes' data files, or SKIPPED.
fn backup_data() -> Option<PathBuf> {
    match std::env::var_os("OVERCAST_TEST_CINDER_BACKUP_DATA") {
        Some(d) => Some(d.into()),
        None => {
            overcast_integration::say_skipped(
                "Cinder backups: no cinder-backup beside the OpenStack services (set \
                 OVERCAST_TEST_CINDER_BACKUP_DATA from integration/scripts/cinder-backup/up.sh, \
                 as .ci/run does)",
            );
            None
        }
    }
}

/// What a volume holds, as the backup service reads it: 1 MiB, not all one byte.
fn written(data: &std::path::Path, volume: &str, seed: u32) -> Vec<u8> {
    let bytes: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect();
    std::fs::create_dir_all(data).unwrap();
    std::fs::write(data.join(volume), &bytes).unwrap();
    bytes
}

/// What the backup service wrote into a restored volume (its first `len` bytes).
fn restored(data: &std::path::Path, volume: &str, len: usize) -> Vec<u8> {
    let mut bytes = std::fs::read(data.join(volume))
        .unwrap_or_else(|e| panic!("no data written into volume {volume}: {e}"));
    bytes.truncate(len);
    bytes
}

/// A backup as Cinder keeps it, metadata included (microversion 3.43 and later).
async fn backup(cloud: &Cloud, id: &str) -> (u16, Value) {
    let r = cloud
        .os
        .call(
            Service::BlockStorage,
            "backup_get",
            Method::GET,
            &format!("/backups/{id}"),
            None,
            Some(Microversion(3, 51)),
        )
        .await
        .unwrap();
    (
        r.status.as_u16(),
        serde_json::from_slice::<Value>(&r.body).unwrap_or(Value::Null),
    )
}

/// Whether Cinder's snapshot `id` is gone within 30 s (its DELETE is answered before the
/// backend removes it).
async fn snapshot_gone(cloud: &Cloud, id: &str) -> bool {
    let started = std::time::Instant::now();
    loop {
        let (code, s) = cinder(cloud, "snapshots", id).await;
        if code == 404 {
            return true;
        }
        if started.elapsed() > Duration::from_secs(30) {
            eprintln!("snapshot {id} is still there: {s}");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn until_volume_status(cloud: &Cloud, id: &str, status: &str) {
    let started = std::time::Instant::now();
    loop {
        let (_, v) = cinder(cloud, "volumes", id).await;
        if v["volume"]["status"] == status {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{v}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Our `csi` under cinder-csi-plugin's name, its cloud swept first.
async fn swept_driver(cloud: &Cloud, work: &std::path::Path) -> Csi {
    cloud.sweep().await;
    driver(
        cloud,
        work,
        "00000000-0000-4000-8000-000000000000",
        "cinder.csi.openstack.org",
    )
    .await
}

/// DeleteVolume of each of `volumes`, each answered OK.
async fn deleted(c: &mut ControllerClient, volumes: &[&String]) {
    for v in volumes {
        c.delete_volume(csi::DeleteVolumeRequest {
            volume_id: v.to_string(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("delete volume {v}: {e:?}"));
    }
}

fn class(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    BACKUP_CLASS.iter().chain(extra).copied().collect()
}

#[tokio::test]
async fn cinder_backups_are_made_restored_and_deleted_as_cinder_csi_makes_them() {
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
    let volume = |name: &str| overcast_integration::create_request(name, GIB);
    let claimed = |mut req: csi::CreateVolumeRequest, claim: &str| {
        req.parameters
            .insert("csi.storage.k8s.io/pvc/name".into(), claim.into());
        req
    };
    let a = provisioned(
        &mut c,
        claimed(volume(&format!("overcast-it-bk-a-{pid}")), "source-claim"),
    )
    .await
    .volume_id;
    let b = provisioned(&mut c, volume(&format!("overcast-it-bk-b-{pid}")))
        .await
        .volume_id;
    let held = written(&data, &a, pid);

    // Made, asked again until ready as csi-snapshotter asks: one id throughout.
    let name = format!("overcast-it-bk-1-{pid}");
    let one = cut(&mut c, snapshot_request(&name, &a, &class(&SNAPSHOTTER))).await;
    assert_eq!(one.source_volume_id, a);
    assert_eq!(one.size_bytes, GIB, "the volume's size");
    assert!(one.creation_time.is_some_and(|t| t.seconds > 1_700_000_000));
    // As Cinder keeps it: a backup with cinder-csi-plugin's name, description and
    // metadata (the cluster, the snapshotter's keys, `type`), and the snapshot it was
    // made from gone.
    let (code, kept) = backup(&cloud, &one.snapshot_id).await;
    assert_eq!(code, 200, "the snapshot id is a backup's: {kept}");
    let kept = &kept["backup"];
    assert_eq!(kept["name"], name.as_str());
    assert_eq!(kept["volume_id"], a.as_str());
    assert_eq!(kept["status"], "available");
    assert_eq!(kept["description"], CINDER_CSI_DESCRIPTION);
    assert_eq!(
        kept["metadata"]["cinder.csi.openstack.org/cluster"],
        "overcast-it"
    );
    assert_eq!(kept["metadata"]["type"], "backup");
    for (k, v) in SNAPSHOTTER {
        assert_eq!(kept["metadata"][k], v, "{k}");
    }
    let cut_from = kept["snapshot_id"].as_str().expect("made from a snapshot");
    assert!(
        snapshot_gone(&cloud, cut_from).await,
        "the snapshot cut for the backup is deleted"
    );
    assert!(named(&cloud, &name).await.is_empty());

    // Asked again once ready: the same backup, no second one.
    let again = c
        .create_snapshot(snapshot_request(&name, &a, &class(&SNAPSHOTTER)))
        .await
        .expect("CreateSnapshot again")
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(again.snapshot_id, one.snapshot_id);
    assert!(again.ready_to_use);
    assert_eq!(
        c.create_snapshot(snapshot_request(&name, &b, &class(&[])))
            .await
            .expect_err("the same name of another volume")
            .code(),
        Code::AlreadyExists
    );
    assert_eq!(
        c.create_snapshot(snapshot_request(
            &format!("overcast-it-bk-bad-{pid}"),
            &a,
            &class(&[("backup-max-duration-seconds-per-gb", "twenty")])
        ))
        .await
        .expect_err("cinder-csi's limit is an integer")
        .code(),
        Code::InvalidArgument
    );
    let listed = list(
        &mut c,
        csi::ListSnapshotsRequest {
            snapshot_id: one.snapshot_id.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&listed), std::slice::from_ref(&one.snapshot_id));
    assert!(listed.entries[0].snapshot.as_ref().unwrap().ready_to_use);

    // The volume changes; a restore holds what it held when it was backed up.
    written(&data, &a, pid + 1);
    let restore = claimed(
        restore_request(
            &format!("overcast-it-pvc-bk-restored-{pid}"),
            GIB,
            0,
            from_snapshot(&one.snapshot_id),
        ),
        "restored-claim",
    );
    let r = provisioned(&mut c, restore.clone()).await;
    assert_eq!(r.capacity_bytes, GIB);
    assert_eq!(
        restored(&data, &r.volume_id, held.len()),
        held,
        "the restored volume holds the backed-up data"
    );
    let source = r.content_source.clone();
    assert_eq!(
        source.and_then(|s| s.r#type),
        Some(from_snapshot(&one.snapshot_id)),
        "its source is the backup"
    );
    // Cinder's record of the backup, and the restore's own claim (the backup service
    // restores the backed-up volume's metadata over the create's; ours goes back).
    let (_, v) = cinder(&cloud, "volumes", &r.volume_id).await;
    assert_eq!(
        v["volume"]["metadata"]["src_backup_id"],
        one.snapshot_id.as_str(),
        "{v}"
    );
    assert_eq!(
        v["volume"]["metadata"]["csi.storage.k8s.io/pvc/name"], "restored-claim",
        "{v}"
    );
    // The provisioner's repeat: the same volume.
    let repeated = provisioned(&mut c, restore).await;
    assert_eq!(repeated.volume_id, r.volume_id);
    assert_eq!(
        c.create_volume(restore_request(
            &format!("overcast-it-pvc-bk-small-{pid}"),
            GIB / 2,
            GIB / 2,
            from_snapshot(&one.snapshot_id),
        ))
        .await
        .expect_err("smaller than the backup")
        .code(),
        Code::OutOfRange
    );

    deleted(&mut c, &[&r.volume_id, &b]).await;
    // The backup outlives its volume.
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: a.clone(),
        ..Default::default()
    })
    .await
    .expect("delete the backed-up volume");
    assert_eq!(backup(&cloud, &one.snapshot_id).await.0, 200);
    for _ in 0..2 {
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: one.snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .expect("delete the backup, and again");
    }
    assert_eq!(backup(&cloud, &one.snapshot_id).await.0, 404);
    assert!(list(
        &mut c,
        csi::ListSnapshotsRequest {
            snapshot_id: one.snapshot_id.clone(),
            ..Default::default()
        },
    )
    .await
    .entries
    .is_empty());
}

/// A switched cluster's backup: cinder-csi-plugin's CreateSnapshot of a `type: backup`
/// class (c453fb7c, controllerserver.go `CreateSnapshot`/`createBackup`,
/// openstack_backups.go `CreateBackup`) is a snapshot (as for `type: snapshot`), then a
/// POST /backups at microversion 3.51 with the content's name, the snapshot's id, its
/// description and metadata (the cluster, the snapshotter's keys, `type`; `force` taken
/// out), then the snapshot's DELETE once the backup is `available`. Made so, by Cinder's
/// API, ours lists it by id, answers the sidecar's repeat with it, restores its data and
/// deletes it.
#[tokio::test]
async fn a_backup_cinder_csi_made_is_restored_and_deleted_after_the_switch() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    let Some(data) = backup_data() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let volume = made_once(
        &cloud,
        "volumes",
        &format!("overcast-it-pvc-cinder-bk-{pid}"),
        &json!({"volume": {
            "name": format!("overcast-it-pvc-cinder-bk-{pid}"), "size": 1,
            "availability_zone": "nova",
            "description": CINDER_CSI_DESCRIPTION,
            "metadata": {"cinder.csi.openstack.org/cluster": "overcast-it"},
        }}),
    )
    .await;
    until_volume_status(&cloud, &volume, "available").await;
    let held = written(&data, &volume, pid + 7);
    let content = format!("snapshot-3b0c6a3e-{pid:08x}-4d1e-9a57-0242ac12b0b0");
    let metadata = json!({
        "cinder.csi.openstack.org/cluster": "overcast-it",
        "csi.storage.k8s.io/volumesnapshot/name": "nightly",
        "csi.storage.k8s.io/volumesnapshot/namespace": "prod",
        "csi.storage.k8s.io/volumesnapshotcontent/name": "snapcontent-3b0c6a3e",
    });
    let snapshot = made_once(
        &cloud,
        "snapshots",
        &content,
        &json!({"snapshot": {
            "volume_id": volume, "name": content,
            "description": CINDER_CSI_DESCRIPTION, "metadata": metadata,
        }}),
    )
    .await;
    until_snapshot_status(&cloud, &snapshot, "available").await;
    let mut backup_metadata = metadata.clone();
    backup_metadata["type"] = json!("backup");
    let r = cloud
        .os
        .call(
            Service::BlockStorage,
            "backup_create",
            Method::POST,
            "/backups",
            Some(&json!({"backup": {
                "volume_id": volume, "snapshot_id": snapshot, "name": content,
                "description": CINDER_CSI_DESCRIPTION, "metadata": backup_metadata,
            }})),
            Some(Microversion(3, 51)),
        )
        .await
        .unwrap();
    assert_eq!(r.status.as_u16(), 202, "{r:?}");
    let made: Value = serde_json::from_slice(&r.body).unwrap();
    let id = made["backup"]["id"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    while backup(&cloud, &id).await.1["backup"]["status"] != "available" {
        assert!(started.elapsed() < Duration::from_secs(120));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let r = cloud
        .os
        .call(
            Service::BlockStorage,
            "snapshot_delete",
            Method::DELETE,
            &format!("/snapshots/{snapshot}"),
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.status.as_u16(), 202, "{r:?}");

    // The images switched: ours, under that driver's name.
    let work = tempfile::tempdir().unwrap();
    let driver = driver(
        &cloud,
        work.path(),
        "00000000-0000-4000-8000-000000000000",
        "cinder.csi.openstack.org",
    )
    .await;
    let mut c = driver.controller().await;
    let listed = list(
        &mut c,
        csi::ListSnapshotsRequest {
            snapshot_id: id.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&listed), std::slice::from_ref(&id));
    let s = listed.entries[0].snapshot.clone().unwrap();
    assert!(s.ready_to_use);
    assert_eq!(s.source_volume_id, volume);
    assert_eq!(s.size_bytes, GIB);
    // The sidecar's CreateSnapshot of that content, asked again after the switch: the same
    // backup, no second one.
    let again = c
        .create_snapshot(snapshot_request(&content, &volume, &class(&[])))
        .await
        .expect("CreateSnapshot of cinder-csi's content")
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(again.snapshot_id, id);
    assert!(again.ready_to_use);
    let r = provisioned(
        &mut c,
        restore_request(
            &format!("overcast-it-pvc-restored-bk-{pid}"),
            GIB,
            0,
            from_snapshot(&id),
        ),
    )
    .await;
    assert_eq!(restored(&data, &r.volume_id, held.len()), held);
    deleted(&mut c, &[&r.volume_id, &volume]).await;
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: id.clone(),
        ..Default::default()
    })
    .await
    .expect("delete cinder-csi's backup");
    assert_eq!(backup(&cloud, &id).await.0, 404);
}
