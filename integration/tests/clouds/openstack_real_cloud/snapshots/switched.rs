//! Snapshots cinder-csi-plugin made, by Cinder's API: listed, restored and deleted after
//! the switch.

use super::*;

/// A switched cluster's snapshots: cinder-csi-plugin's CreateSnapshot (c453fb7c,
/// controllerserver.go and openstack_snapshots.go) is a POST /snapshots with its name
/// (the VolumeSnapshotContent's `snapshot-<uid>`), its description, its cluster key and the
/// snapshotter's names as metadata, and no `force` (gophercloud leaves `false` out). Made
/// so, by Cinder's API and not through our code, ours lists them, answers a repeated
/// CreateSnapshot of the content with the same snapshot, restores and deletes them.
#[tokio::test]
async fn snapshots_cinder_csi_made_are_listed_restored_and_deleted_after_the_switch() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    // Its volume, as its CreateVolume makes one (upstream.rs).
    let volume = made_once(
        &cloud,
        "volumes",
        &format!("overcast-it-pvc-cinder-snap-{pid}"),
        &json!({"volume": {
            "name": format!("overcast-it-pvc-cinder-snap-{pid}"), "size": 1,
            "availability_zone": "nova",
            "description": CINDER_CSI_DESCRIPTION,
            "metadata": {"cinder.csi.openstack.org/cluster": "overcast-it"},
        }}),
    )
    .await;
    let started = std::time::Instant::now();
    while cinder(&cloud, "volumes", &volume).await.1["volume"]["status"] != "available" {
        assert!(started.elapsed() < Duration::from_secs(120));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let content = format!("snapshot-3b0c6a3e-{pid:08x}-4d1e-9a57-0242ac120002");
    let snapshot = made_once(
        &cloud,
        "snapshots",
        &content,
        &json!({"snapshot": {
            "volume_id": volume,
            "name": content,
            "description": CINDER_CSI_DESCRIPTION,
            "metadata": {
                "cinder.csi.openstack.org/cluster": "overcast-it",
                "csi.storage.k8s.io/volumesnapshot/name": "nightly",
                "csi.storage.k8s.io/volumesnapshot/namespace": "prod",
                "csi.storage.k8s.io/volumesnapshotcontent/name": "snapcontent-3b0c6a3e",
            },
        }}),
    )
    .await;
    until_snapshot_status(&cloud, &snapshot, "available").await;

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
            snapshot_id: snapshot.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&listed), std::slice::from_ref(&snapshot));
    let s = listed.entries[0].snapshot.clone().unwrap();
    assert!(s.ready_to_use);
    assert_eq!(s.source_volume_id, volume);
    assert_eq!(s.size_bytes, GIB);
    assert!(s.creation_time.is_some_and(|t| t.seconds > 1_700_000_000));
    let of_volume = list(
        &mut c,
        csi::ListSnapshotsRequest {
            source_volume_id: volume.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&of_volume), std::slice::from_ref(&snapshot));
    // The sidecar's CreateSnapshot of that content, asked again after the switch: the
    // same snapshot, no second one.
    let again = c
        .create_snapshot(snapshot_request(&content, &volume, &[]))
        .await
        .expect("CreateSnapshot of cinder-csi's content")
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(again.snapshot_id, snapshot);
    assert!(again.ready_to_use);
    let restored = provisioned(
        &mut c,
        restore_request(
            &format!("overcast-it-pvc-restored-{pid}"),
            GIB,
            0,
            from_snapshot(&snapshot),
        ),
    )
    .await;
    let (_, v) = cinder(&cloud, "volumes", &restored.volume_id).await;
    assert_eq!(v["volume"]["snapshot_id"], snapshot.as_str(), "{v}");
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: restored.volume_id.clone(),
        ..Default::default()
    })
    .await
    .expect("delete the restore");
    c.delete_snapshot(csi::DeleteSnapshotRequest {
        snapshot_id: snapshot.clone(),
        ..Default::default()
    })
    .await
    .expect("delete cinder-csi's snapshot");
    assert_eq!(cinder(&cloud, "snapshots", &snapshot).await.0, 404);
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: volume.clone(),
        ..Default::default()
    })
    .await
    .expect("delete cinder-csi's volume");
}
