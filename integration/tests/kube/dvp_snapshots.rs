//! Snapshots on DVP through the real `csi` binary's socket, on the simulated parent (the
//! kit's API server with deckhouse/virtualization's VirtualDiskSnapshot CRD, kept
//! verbatim in `sim/dvp/crds/`, and `dvp_sim` playing its `vdsnapshot` controller): a
//! volume written through a real ext4 mount is snapshotted (refused while its node has no
//! guest agent, unless the class says `requiredConsistency: "false"`), written again,
//! restored into a volume that holds the first data, cloned into one that holds the
//! second (through a temporary snapshot that goes); listed by id, by source and by
//! pages; the spec's refusals; a snapshot a restore is on its way from kept; a snapshot
//! held `InProgress` (ready=false, the controller killed mid-cut, one snapshot after the
//! retry) and one the parent fails (deleted, INTERNAL, a new one on the retry); a volume
//! waiting for its first consumer (its snapshot UNAVAILABLE; a clone into such a class
//! keeps its temporary snapshot until it is deleted).
//! Runs when `OVERCAST_TEST_KUBECONFIG` names a disposable cluster.

use std::path::Path;
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::Api;
use overcast_cloud_dvp::api;
use overcast_cloud_dvp::disks::{disk_name, CLONE_SOURCE_FOR_LABEL, SNAPSHOT_OF_LABEL};
use overcast_integration::dvp_sim::{self, DvpSim, PARENT};
use overcast_integration::{csi_v1 as csi, mount_cap, real, ControllerClient, Csi, NODE_ID};
use tonic::Code;

const MIB: i64 = 1 << 20;

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

fn restore_request(name: &str, snapshot: &str, bytes: i64) -> csi::CreateVolumeRequest {
    let mut r = overcast_integration::create_request(name, bytes);
    r.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: snapshot.into(),
            },
        )),
    });
    r
}

fn clone_request(name: &str, source: &str, bytes: i64) -> csi::CreateVolumeRequest {
    let mut r = overcast_integration::create_request(name, bytes);
    r.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Volume(
            csi::volume_content_source::VolumeSource {
                volume_id: source.into(),
            },
        )),
    });
    r
}

/// The namespace's VirtualDiskSnapshots, as the parent holds them.
async fn parent_snapshots(api: &Api<DynamicObject>) -> Vec<DynamicObject> {
    api.list(&ListParams::default()).await.unwrap().items
}

/// Waits until the parent no longer holds snapshot `name`: its deletion is its
/// controller's (a finalizer), not at once.
async fn gone(api: &Api<DynamicObject>, name: &str, what: &str) {
    real::wait_for::<()>(what, Duration::from_secs(10), async || {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A volume attached to the node, staged and published with ext4: its mount.
async fn mounted(
    c: &mut ControllerClient,
    n: &mut overcast_integration::NodeClient,
    id: &str,
    work: &Path,
) -> std::path::PathBuf {
    let ctx = c
        .controller_publish_volume(overcast_integration::publish_request(id, false))
        .await
        .expect("attach")
        .into_inner()
        .publish_context;
    let staging = work.join(format!("{id}-staging"));
    let target = work.join(format!("{id}-target"));
    std::fs::create_dir_all(&staging).unwrap();
    n.node_stage_volume(overcast_integration::stage_request(
        id,
        &ctx,
        &staging,
        mount_cap("ext4"),
    ))
    .await
    .expect("stage");
    n.node_publish_volume(overcast_integration::node_publish_request(
        id,
        &ctx,
        &staging,
        &target,
        mount_cap("ext4"),
    ))
    .await
    .expect("publish");
    target
}

async fn unmounted(
    c: &mut ControllerClient,
    n: &mut overcast_integration::NodeClient,
    id: &str,
    work: &Path,
) {
    let staging = work.join(format!("{id}-staging"));
    let target = work.join(format!("{id}-target"));
    n.node_unpublish_volume(overcast_integration::node_unpublish_request(id, &target))
        .await
        .expect("unpublish");
    n.node_unstage_volume(overcast_integration::unstage_request(id, &staging))
        .await
        .expect("unstage");
    c.controller_unpublish_volume(overcast_integration::detach_request(id, NODE_ID))
        .await
        .expect("detach");
}

/// Writes `text` as the file the test reads, and syncs it to the disk.
fn write(target: &Path, text: &str) {
    let path = target.join("file");
    std::fs::write(&path, text).unwrap();
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    nix::unistd::sync();
}

struct Unmount(std::path::PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        overcast_integration::unmount_under(&self.0);
    }
}

#[tokio::test]
async fn a_volume_is_snapshotted_restored_and_its_snapshot_kept_for_a_restore_on_dvp() {
    let _turn = PARENT.lock().await;
    let Some(path) = real::kubeconfig("DVP snapshots") else {
        return;
    };
    let client = real::client(&path).await;
    dvp_sim::install_crds(&client).await;
    dvp_sim::sweep(&client, "overcast-it-dvp-snap-").await;
    let ns = format!("overcast-it-dvp-snap-{}", std::process::id());
    let sim = DvpSim::start(client.clone(), &ns, Duration::from_millis(100)).await;
    sim.add_vm("vm-test-node", NODE_ID, "10.66.0.21", "parent-a")
        .await;
    let vds: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &api::virtual_disk_snapshot());
    let work = tempfile::tempdir().unwrap();
    let _unmount = Unmount(work.path().to_path_buf());
    let kubeconfig = std::fs::read_to_string(std::env::var(real::ENV).unwrap()).unwrap();
    let indented: String = kubeconfig.lines().map(|l| format!("  {l}\n")).collect();
    let config = work.path().join("cloud-config");
    std::fs::write(
        &config,
        format!("namespace: {ns}\nkubeconfig: |\n{indented}"),
    )
    .unwrap();
    let args = [
        "--cloud=dvp".to_owned(),
        format!("--cloud-config={}", config.display()),
        format!("--device-by-id-dir={}", sim.by_id.display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut driver = Csi::start(&args).await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);

    // The source, written through a real mount on the node.
    c.create_volume(overcast_integration::create_request(
        "pvc-snap-src",
        32 * MIB,
    ))
    .await
    .expect("create");
    c.create_volume(overcast_integration::create_request(
        "pvc-snap-other",
        32 * MIB,
    ))
    .await
    .expect("create");
    let target = mounted(&mut c, &mut n, "pvc-snap-src", work.path()).await;
    write(&target, "first");

    // Attached to a running VM without a guest agent: the parent's requiredConsistency
    // (its default) refuses, and the failed snapshot does not stay.
    let refused = c
        .create_snapshot(snapshot_request("snapshot-1", "pvc-snap-src", &[]))
        .await
        .expect_err("no agent to freeze the node");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("PotentiallyInconsistent")
            && refused.message().contains("requiredConsistency"),
        "says why and what to change: {}",
        refused.message()
    );
    gone(&vds, "snapshot-1", "the failed one deleted").await;

    // With the agent, frozen and consistent.
    sim.faults
        .agent_vms
        .lock()
        .unwrap()
        .insert("vm-test-node".into());
    let snap = c
        .create_snapshot(snapshot_request("snapshot-1", "pvc-snap-src", &[]))
        .await
        .expect("cut")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(snap.ready_to_use, "{snap:?}");
    assert_eq!(snap.snapshot_id, "snapshot-1");
    assert_eq!(snap.source_volume_id, "pvc-snap-src");
    assert_eq!(snap.size_bytes, 32 * MIB);
    assert!(snap.creation_time.is_some());
    let made = vds.get("snapshot-1").await.unwrap();
    assert_eq!(made.data["spec"]["virtualDiskName"], "pvc-snap-src");
    assert_eq!(made.data["spec"]["requiredConsistency"], true);
    assert_eq!(made.data["status"]["consistent"], true);
    assert_eq!(
        made.metadata.labels.as_ref().unwrap()[SNAPSHOT_OF_LABEL],
        "pvc-snap-src"
    );
    // Asked again: the same snapshot. The name on another volume, a missing volume, a
    // class parameter the parent has no field for: the spec's codes.
    let again = c
        .create_snapshot(snapshot_request("snapshot-1", "pvc-snap-src", &[]))
        .await
        .expect("again")
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(again.snapshot_id, snap.snapshot_id);
    assert_eq!(again.creation_time, snap.creation_time);
    for (req, code) in [
        (
            snapshot_request("snapshot-1", "pvc-snap-other", &[]),
            Code::AlreadyExists,
        ),
        (
            snapshot_request("snapshot-x", "pvc-missing", &[]),
            Code::NotFound,
        ),
        (
            snapshot_request(
                "snapshot-x",
                "pvc-snap-src",
                &[("requiredConsistency", "yes")],
            ),
            Code::InvalidArgument,
        ),
        (
            snapshot_request("snapshot-x", "pvc-snap-src", &[("type", "snapshot")]),
            Code::InvalidArgument,
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

    // Without the agent and with requiredConsistency "false": cut unfrozen, and the
    // parent says nothing of its consistency.
    sim.faults.agent_vms.lock().unwrap().clear();
    let unfrozen = c
        .create_snapshot(snapshot_request(
            "snapshot-unfrozen",
            "pvc-snap-src",
            &[("requiredConsistency", "false")],
        ))
        .await
        .expect("cut unfrozen")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(unfrozen.ready_to_use);
    let made = vds.get("snapshot-unfrozen").await.unwrap();
    assert_eq!(made.data["spec"]["requiredConsistency"], false);
    assert!(
        made.data["status"].get("consistent").is_none(),
        "{:?}",
        made.data["status"]
    );

    // Written again; the restore holds the first data.
    write(&target, "second");
    let smaller = c
        .create_volume({
            let mut r = restore_request("pvc-restored-small", "snapshot-1", 16 * MIB);
            r.capacity_range.as_mut().unwrap().limit_bytes = 16 * MIB;
            r
        })
        .await
        .expect_err("smaller than the snapshot");
    assert_eq!(smaller.code(), Code::OutOfRange, "{smaller:?}");
    let restored = c
        .create_volume(restore_request("pvc-restored", "snapshot-1", 32 * MIB))
        .await
        .expect("restore")
        .into_inner()
        .volume
        .unwrap();
    assert!(
        matches!(
            restored.content_source.as_ref().and_then(|s| s.r#type.as_ref()),
            Some(csi::volume_content_source::Type::Snapshot(s)) if s.snapshot_id == "snapshot-1"
        ),
        "{restored:?}"
    );
    let vd = sim_disk(&client, &ns, "pvc-restored").await;
    assert_eq!(
        vd.spec.data_source.as_ref().unwrap(),
        &serde_json::json!({"type": "ObjectRef", "objectRef": {"kind": "VirtualDiskSnapshot", "name": "snapshot-1"}})
    );
    // Asked again with the same source: the same volume; with another: ALREADY_EXISTS.
    c.create_volume(restore_request("pvc-restored", "snapshot-1", 32 * MIB))
        .await
        .expect("the same restore again");
    let other = c
        .create_volume(restore_request(
            "pvc-restored",
            "snapshot-unfrozen",
            32 * MIB,
        ))
        .await
        .expect_err("another source");
    assert_eq!(other.code(), Code::AlreadyExists, "{other:?}");
    let missing = c
        .create_volume(restore_request(
            "pvc-restored-x",
            "snapshot-missing",
            32 * MIB,
        ))
        .await
        .expect_err("no such snapshot");
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    unmounted(&mut c, &mut n, "pvc-snap-src", work.path()).await;
    let read = mounted(&mut c, &mut n, "pvc-restored", work.path()).await;
    assert_eq!(std::fs::read_to_string(read.join("file")).unwrap(), "first");
    unmounted(&mut c, &mut n, "pvc-restored", work.path()).await;

    // A clone holds the source's data now, made through a temporary snapshot of it
    // (none listed, and gone once the clone is Ready).
    let clone = c
        .create_volume(clone_request("pvc-clone", "pvc-snap-src", 32 * MIB))
        .await
        .expect("clone")
        .into_inner()
        .volume
        .unwrap();
    assert!(
        matches!(
            clone.content_source.as_ref().and_then(|s| s.r#type.as_ref()),
            Some(csi::volume_content_source::Type::Volume(v)) if v.volume_id == "pvc-snap-src"
        ),
        "{clone:?}"
    );
    real::wait_for::<()>(
        "the clone's temporary snapshot gone",
        Duration::from_secs(10),
        async || {
            let left = parent_snapshots(&vds).await;
            (!left.iter().any(|s| {
                s.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(CLONE_SOURCE_FOR_LABEL))
            }))
            .then_some(())
        },
    )
    .await;
    c.create_volume(clone_request("pvc-clone", "pvc-snap-src", 32 * MIB))
        .await
        .expect("the same clone again");
    let other = c
        .create_volume(clone_request("pvc-clone", "pvc-snap-other", 32 * MIB))
        .await
        .expect_err("another source");
    assert_eq!(other.code(), Code::AlreadyExists, "{other:?}");
    let missing = c
        .create_volume(clone_request("pvc-clone-x", "pvc-missing", 32 * MIB))
        .await
        .expect_err("no such volume");
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    let read = mounted(&mut c, &mut n, "pvc-clone", work.path()).await;
    assert_eq!(
        std::fs::read_to_string(read.join("file")).unwrap(),
        "second"
    );
    unmounted(&mut c, &mut n, "pvc-clone", work.path()).await;

    // Listed by id, by source, in pages of one.
    let list = |req: csi::ListSnapshotsRequest| {
        let mut c = c.clone();
        async move { c.list_snapshots(req).await.expect("list").into_inner() }
    };
    let by_id = list(csi::ListSnapshotsRequest {
        snapshot_id: "snapshot-1".into(),
        ..Default::default()
    })
    .await;
    assert_eq!(by_id.entries.len(), 1);
    let by_source = list(csi::ListSnapshotsRequest {
        source_volume_id: "pvc-snap-src".into(),
        ..Default::default()
    })
    .await;
    let ids: Vec<String> = by_source
        .entries
        .iter()
        .map(|e| e.snapshot.as_ref().unwrap().snapshot_id.clone())
        .collect();
    assert_eq!(ids, ["snapshot-1", "snapshot-unfrozen"]);
    assert!(list(csi::ListSnapshotsRequest {
        source_volume_id: "pvc-snap-other".into(),
        ..Default::default()
    })
    .await
    .entries
    .is_empty());
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let page = list(csi::ListSnapshotsRequest {
            max_entries: 1,
            starting_token: token.clone(),
            ..Default::default()
        })
        .await;
        assert!(page.entries.len() <= 1);
        paged.extend(
            page.entries
                .iter()
                .map(|e| e.snapshot.as_ref().unwrap().snapshot_id.clone()),
        );
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    assert_eq!(paged, ["snapshot-1", "snapshot-unfrozen"]);

    // A restore on its way: the snapshot is kept (the parent would not keep it).
    sim.faults
        .held_provisioning
        .lock()
        .unwrap()
        .insert("pvc-restored-2".into());
    let restoring = {
        let mut c = c.clone();
        tokio::spawn(async move {
            c.create_volume(restore_request("pvc-restored-2", "snapshot-1", 32 * MIB))
                .await
        })
    };
    real::wait_for::<()>(
        "the restore's disk on its way",
        Duration::from_secs(30),
        async || {
            let d: Api<api::VirtualDisk> =
                Api::namespaced_with(client.clone(), &ns, &api::virtual_disk());
            let vd = d.get_opt("pvc-restored-2").await.ok()??;
            (vd.status?.phase.as_deref() == Some("Provisioning")).then_some(())
        },
    )
    .await;
    let kept = c
        .delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: "snapshot-1".into(),
            ..Default::default()
        })
        .await
        .expect_err("a restore is on its way");
    assert_eq!(kept.code(), Code::FailedPrecondition, "{kept:?}");
    assert!(
        kept.message().contains("pvc-restored-2"),
        "{}",
        kept.message()
    );
    sim.faults.held_provisioning.lock().unwrap().clear();
    restoring
        .await
        .unwrap()
        .expect("the restore finishes with its snapshot there");
    for id in ["snapshot-1", "snapshot-1", "snapshot-unfrozen"] {
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: id.into(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("delete {id} (a second time is OK too): {e:?}"));
    }
    assert!(parent_snapshots(&vds).await.is_empty());

    // A parent StorageClass binding on first consumer: a volume there waits unprovisioned
    // (WaitForFirstConsumer). Its snapshot the parent fails at once
    // (WaitingForTheVirtualDisk): UNAVAILABLE, and the failed one does not stay. A clone
    // into it keeps its temporary snapshot (read at the first attachment) until the clone
    // is deleted.
    let wffc = format!("{ns}-wffc");
    let classes: Api<k8s_openapi::api::storage::v1::StorageClass> = Api::all(client.clone());
    classes
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": wffc}, "provisioner": "local.sim",
                "volumeBindingMode": "WaitForFirstConsumer",
            }))
            .unwrap(),
        )
        .await
        .expect("StorageClass");
    let mut waiting = overcast_integration::create_request("pvc-snap-wffc", 32 * MIB);
    waiting
        .parameters
        .insert("dvpStorageClass".into(), wffc.clone());
    c.create_volume(waiting)
        .await
        .expect("a volume waiting for its consumer");
    let not_ready = c
        .create_snapshot(snapshot_request("snapshot-wffc", "pvc-snap-wffc", &[]))
        .await
        .expect_err("not provisioned yet");
    assert_eq!(not_ready.code(), Code::Unavailable, "{not_ready:?}");
    assert!(
        not_ready.message().contains("WaitingForTheVirtualDisk"),
        "{}",
        not_ready.message()
    );
    gone(&vds, &disk_name("snapshot-wffc"), "the failed one deleted").await;
    let mut clone = clone_request("pvc-clone-wffc", "pvc-snap-other", 32 * MIB);
    clone
        .parameters
        .insert("dvpStorageClass".into(), wffc.clone());
    c.create_volume(clone)
        .await
        .expect("a clone waiting for its consumer");
    let temporary = |left: Vec<DynamicObject>| {
        left.into_iter()
            .filter(|s| {
                s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(CLONE_SOURCE_FOR_LABEL))
                    == Some(&"pvc-clone-wffc".to_owned())
            })
            .count()
    };
    assert_eq!(
        temporary(parent_snapshots(&vds).await),
        1,
        "kept for the first attachment"
    );
    c.delete_volume(overcast_integration::delete_request("pvc-clone-wffc"))
        .await
        .expect("delete the clone");
    real::wait_for::<()>(
        "the clone's temporary snapshot gone with it",
        Duration::from_secs(10),
        async || (temporary(parent_snapshots(&vds).await) == 0).then_some(()),
    )
    .await;
    c.delete_volume(overcast_integration::delete_request("pvc-snap-wffc"))
        .await
        .expect("delete");
    let _ = classes.delete(&wffc, &DeleteParams::default()).await;

    // Held InProgress: not ready yet after the wait, the controller killed mid-cut, and
    // the retry answers the one snapshot.
    let held = disk_name("snapshot-held");
    sim.faults
        .held_snapshots
        .lock()
        .unwrap()
        .insert(held.clone());
    let waiting = c
        .create_snapshot(snapshot_request("snapshot-held", "pvc-snap-other", &[]))
        .await
        .expect("cutting")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(!waiting.ready_to_use, "{waiting:?}");
    let cutting = {
        let mut c = c.clone();
        tokio::spawn(async move {
            c.create_snapshot(snapshot_request("snapshot-held", "pvc-snap-other", &[]))
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    driver.kill9();
    let _ = cutting.await;
    driver.resume().await;
    let mut c = driver.controller().await;
    sim.faults.held_snapshots.lock().unwrap().clear();
    let done = c
        .create_snapshot(snapshot_request("snapshot-held", "pvc-snap-other", &[]))
        .await
        .expect("the retry")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(done.ready_to_use);
    assert_eq!(done.snapshot_id, waiting.snapshot_id);
    assert_eq!(parent_snapshots(&vds).await.len(), 1, "no second snapshot");

    // Failed by the parent: deleted, INTERNAL; the retry cuts a new one.
    let failing = disk_name("snapshot-failing");
    sim.faults
        .failing_snapshots
        .lock()
        .unwrap()
        .insert(failing.clone());
    let e = c
        .create_snapshot(snapshot_request("snapshot-failing", "pvc-snap-other", &[]))
        .await
        .expect_err("the parent fails it");
    assert_eq!(e.code(), Code::Internal, "{e:?}");
    assert!(
        e.message().contains("VirtualDiskSnapshotFailed"),
        "{}",
        e.message()
    );
    gone(&vds, &failing, "the failed one deleted").await;
    sim.faults.failing_snapshots.lock().unwrap().clear();
    let s = c
        .create_snapshot(snapshot_request("snapshot-failing", "pvc-snap-other", &[]))
        .await
        .expect("the retry")
        .into_inner()
        .snapshot
        .unwrap();
    assert!(s.ready_to_use);

    for id in ["snapshot-held", "snapshot-failing"] {
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: id.into(),
            ..Default::default()
        })
        .await
        .expect("delete");
    }
    for id in [
        "pvc-snap-src",
        "pvc-snap-other",
        "pvc-restored",
        "pvc-restored-2",
        "pvc-clone",
    ] {
        c.delete_volume(overcast_integration::delete_request(id))
            .await
            .unwrap_or_else(|e| panic!("delete {id}: {e:?}"));
    }
    drop(driver);
    let _ = vds
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    finish(sim, &client).await;
}

async fn sim_disk(client: &kube::Client, ns: &str, name: &str) -> api::VirtualDisk {
    Api::<api::VirtualDisk>::namespaced_with(client.clone(), ns, &api::virtual_disk())
        .get(name)
        .await
        .unwrap()
}

/// Stops the simulator once what it holds finalizers on is gone, then its namespace.
async fn finish(sim: DvpSim, client: &kube::Client) {
    let ns = sim.namespace.clone();
    let disks: Api<api::VirtualDisk> =
        Api::namespaced_with(client.clone(), &ns, &api::virtual_disk());
    let vds: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &api::virtual_disk_snapshot());
    let _ = disks
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = real::wait_for::<()>(
        "the simulator's clean-up",
        Duration::from_secs(30),
        async || {
            let left = disks.list(&ListParams::default()).await.ok()?.items.len()
                + vds.list(&ListParams::default()).await.ok()?.items.len();
            (left == 0).then_some(())
        },
    )
    .await;
    sim.remove_nodes().await;
    drop(sim);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}
