//! Cinder snapshots through the real `csi` binary's socket on the real Cinder and Nova:
//! cut (of a detached and of an attached volume), named and tagged as cinder-csi-plugin
//! tags them, listed by id, by source and by pages, restored, cloned, refused where the
//! spec says, deleted; snapshots cinder-csi-plugin made (by Cinder's API, as its
//! CreateSnapshot calls it, not through our code) listed, restored and deleted after the
//! switch; a slow and a failing Cinder (cinder-volume paused, a snapshot in `error`);
//! csi-sanity's snapshot and clone specs.

use overcast_integration::{csi_v1 as csi, ControllerClient, Csi};
use tonic::Code;

use super::*;

/// Cinder backups (`type: backup`), made, restored and deleted.
mod backups;
/// Cinder slow, failing and refusing.
mod failures;
/// csi-sanity's snapshot and clone specs.
mod sanity;
/// Cut, listed, restored, cloned, refused and deleted through the socket.
mod socket;
/// cinder-csi-plugin's snapshots after the switch.
mod switched;

const GIB: i64 = 1 << 30;
/// What cinder-csi-plugin writes as each snapshot's description (kubernetes/
/// cloud-provider-openstack at c453fb7c, pkg/csi/cinder/openstack/openstack_snapshots.go,
/// `snapshotDescription`).
const CINDER_CSI_DESCRIPTION: &str = "Created by OpenStack Cinder CSI driver";

async fn driver(cloud: &Cloud, work: &std::path::Path, server: &str, name: &str) -> Csi {
    let by_id = work.join("by-id");
    std::fs::create_dir_all(&by_id).unwrap();
    let conf = cloud_conf_through_login_cache(&cloud.env, work);
    Csi::start(&[
        "--cloud=openstack",
        &format!("--driver-name={name}"),
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={server}"),
        "--zone=nova",
        "--cluster=overcast-it",
        &format!("--device-by-id-dir={}", by_id.display()),
    ])
    .await
}

fn snapshot_request(
    name: &str,
    source: &str,
    class: &[(&str, &str)],
) -> csi::CreateSnapshotRequest {
    csi::CreateSnapshotRequest {
        name: name.into(),
        source_volume_id: source.into(),
        parameters: class
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// How long a test asks again after a retryable answer, as the sidecars do.
const RETRIES: Duration = Duration::from_secs(60);

/// CreateVolume as external-provisioner asks it: an UNAVAILABLE answer (the simulator's
/// Cinder answers 500 when its SQLite database is locked under CI's load) is asked again.
async fn provisioned(c: &mut ControllerClient, req: csi::CreateVolumeRequest) -> csi::Volume {
    let started = std::time::Instant::now();
    loop {
        match c.create_volume(req.clone()).await {
            Ok(r) => return r.into_inner().volume.unwrap(),
            Err(e) if e.code() == Code::Unavailable && started.elapsed() < RETRIES => {
                eprintln!("CreateVolume {}: {e:?} (asked again)", req.name);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => panic!("CreateVolume {}: {e:?}", req.name),
        }
    }
}

/// CreateSnapshot asked again until the snapshot is ready, as csi-snapshotter asks: every
/// answer is the same snapshot.
async fn cut(c: &mut ControllerClient, req: csi::CreateSnapshotRequest) -> csi::Snapshot {
    let started = std::time::Instant::now();
    let mut first: Option<String> = None;
    loop {
        let s = match c.create_snapshot(req.clone()).await {
            Ok(r) => r.into_inner().snapshot.unwrap(),
            // The simulator's SQLite-locked 500s are UNAVAILABLE: asked again, as the
            // sidecar does.
            Err(e) if e.code() == Code::Unavailable && started.elapsed() < RETRIES => {
                eprintln!("CreateSnapshot {}: {e:?} (asked again)", req.name);
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            Err(e) => panic!("CreateSnapshot {}: {e:?}", req.name),
        };
        assert_eq!(
            first.get_or_insert_with(|| s.snapshot_id.clone()),
            &s.snapshot_id,
            "a repeated CreateSnapshot answers the one snapshot"
        );
        if s.ready_to_use {
            return s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "snapshot {} not ready in 120 s",
            s.snapshot_id
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What the CSI calls say of a snapshot (or backup) Cinder is still making: listed by id
/// not ready, a restore from it (named `restore`) UNAVAILABLE, its delete
/// FAILED_PRECONDITION (Cinder takes no delete of one being made).
async fn still_being_made(c: &mut ControllerClient, id: &str, restore: &str) {
    let listed = list(
        c,
        csi::ListSnapshotsRequest {
            snapshot_id: id.to_owned(),
            ..Default::default()
        },
    )
    .await;
    assert!(!listed.entries[0].snapshot.as_ref().unwrap().ready_to_use);
    let early = c
        .create_volume(restore_request(restore, GIB, 0, from_snapshot(id)))
        .await
        .expect_err("a restore from what is still being made");
    assert_eq!(early.code(), Code::Unavailable, "{early:?}");
    let refused = c
        .delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: id.to_owned(),
            ..Default::default()
        })
        .await
        .expect_err("Cinder refuses to delete what is still being made");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
}

async fn cinder(cloud: &Cloud, what: &str, id: &str) -> (u16, Value) {
    let r = cloud
        .os
        .call(
            Service::BlockStorage,
            "get",
            Method::GET,
            &format!("/{what}/{id}"),
            None,
            None,
        )
        .await
        .unwrap();
    (
        r.status.as_u16(),
        serde_json::from_slice::<Value>(&r.body).unwrap_or(Value::Null),
    )
}

/// A POST of the test's own to Cinder, as cinder-csi-plugin's calls make a volume or a
/// snapshot (`kind`: `volumes`, `snapshots`), answered with the new object's id. The
/// simulator's Cinder keeps its database in SQLite and can answer 500 under CI's load
/// ("The server has either erred", CI20): then, as that driver's next CreateVolume or
/// CreateSnapshot would, it looks for the name first and asks again only when nothing
/// carries it, at most five times.
async fn made_once(cloud: &Cloud, kind: &str, name: &str, body: &Value) -> String {
    let one = kind.trim_end_matches('s');
    for attempt in 1..=5 {
        let r = cloud
            .os
            .call(
                Service::BlockStorage,
                "create",
                Method::POST,
                &format!("/{kind}"),
                Some(body),
                None,
            )
            .await
            .unwrap();
        if r.status.as_u16() == 202 {
            let doc: Value = serde_json::from_slice(&r.body).unwrap();
            return doc[one]["id"].as_str().unwrap().to_owned();
        }
        assert!(
            r.status.as_u16() == 500 && attempt < 5,
            "POST /{kind} {name}: {r:?}"
        );
        eprintln!("POST /{kind} {name}: Cinder answered 500 (attempt {attempt}): {r:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let list = cloud
            .os
            .call(
                Service::BlockStorage,
                "list",
                Method::GET,
                &format!("/{kind}/detail?name={name}"),
                None,
                None,
            )
            .await
            .unwrap();
        let doc: Value = serde_json::from_slice(&list.body).unwrap_or(Value::Null);
        if let Some(id) = doc[kind]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["name"] == name)
            .and_then(|o| o["id"].as_str())
        {
            return id.to_owned();
        }
    }
    unreachable!()
}

/// The ids of Cinder's snapshots named `name`.
async fn named(cloud: &Cloud, name: &str) -> Vec<String> {
    let r = cloud
        .os
        .call(
            Service::BlockStorage,
            "snapshot_list",
            Method::GET,
            &format!("/snapshots/detail?name={name}"),
            None,
            None,
        )
        .await
        .unwrap();
    let doc: Value = serde_json::from_slice(&r.body).unwrap();
    doc["snapshots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["name"] == name)
        .filter_map(|s| s["id"].as_str().map(str::to_owned))
        .collect()
}

async fn until_snapshot_status(cloud: &Cloud, id: &str, status: &str) {
    let started = std::time::Instant::now();
    loop {
        let (_, s) = cinder(cloud, "snapshots", id).await;
        if s["snapshot"]["status"] == status {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{s}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn restore_request(
    name: &str,
    bytes: i64,
    limit: i64,
    source: csi::volume_content_source::Type,
) -> csi::CreateVolumeRequest {
    let mut req = overcast_integration::create_request(name, bytes);
    req.capacity_range.as_mut().unwrap().limit_bytes = limit;
    req.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(source),
    });
    req
}

fn from_snapshot(id: &str) -> csi::volume_content_source::Type {
    csi::volume_content_source::Type::Snapshot(csi::volume_content_source::SnapshotSource {
        snapshot_id: id.into(),
    })
}

fn from_volume(id: &str) -> csi::volume_content_source::Type {
    csi::volume_content_source::Type::Volume(csi::volume_content_source::VolumeSource {
        volume_id: id.into(),
    })
}

async fn list(
    c: &mut ControllerClient,
    req: csi::ListSnapshotsRequest,
) -> csi::ListSnapshotsResponse {
    c.list_snapshots(req)
        .await
        .expect("ListSnapshots")
        .into_inner()
}

fn ids(r: &csi::ListSnapshotsResponse) -> Vec<String> {
    r.entries
        .iter()
        .map(|e| e.snapshot.as_ref().unwrap().snapshot_id.clone())
        .collect()
}
