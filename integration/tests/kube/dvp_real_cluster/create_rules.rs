//! What a create answers for the states the real virtualization controller writes
//! (quota, a missing StorageClass, Provisioning past a deadline, Terminating), and the
//! names and attachments the real webhooks and other tools make.

use super::*;

/// A StorageClass the parent does not have: the real controller leaves the disk Pending
/// with Ready=False `StorageClassIsNotReady` (StorageClassReady=False); the create
/// answers INVALID_ARGUMENT's error at once and removes the disk.
#[tokio::test]
async fn a_missing_parent_storage_class_is_invalid_at_once_and_leaves_nothing() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP missing-StorageClass test", "nosc").await else {
        return;
    };
    let disks = world.disks(Duration::from_secs(30));
    let mut s = spec("pvc-nosc");
    s.parameters
        .insert("dvpStorageClass".into(), "no-such-class".into());
    let started = std::time::Instant::now();
    match disks.create_disk(s.clone()).await {
        Err(e @ CloudError::InvalidArgument(_)) => {
            assert!(e.to_string().contains("no-such-class"), "{e}");
        }
        other => panic!("a disk of a missing StorageClass: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    real::wait_for(
        "the refused VirtualDisk deleted",
        Duration::from_secs(10),
        async || {
            world
                .parent
                .disks()
                .get_opt("pvc-nosc")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    world.finish().await;
}

/// A repeated create (external-provisioner's, after its own timeout) answers OK only
/// for a usable disk: not while it is Provisioning, not while it is Terminating.
#[tokio::test]
async fn a_repeated_create_answers_only_a_usable_disk() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP repeated-create test", "again").await else {
        return;
    };
    let disks = Arc::new(world.disks(Duration::from_secs(30)));
    world
        .sim
        .faults
        .held_provisioning
        .lock()
        .unwrap()
        .insert("pvc-slow".into());
    for attempt in ["first", "repeat"] {
        match tokio::time::timeout(Duration::from_secs(2), disks.create_disk(spec("pvc-slow")))
            .await
        {
            Err(_) => {}
            Ok(Err(e)) if e.is_retryable() => {}
            other => panic!("{attempt} create of a disk still Provisioning: {other:?}"),
        }
    }
    let vd = world
        .parent
        .disks()
        .get("pvc-slow")
        .await
        .expect("the disk exists");
    assert_eq!(
        vd.status.and_then(|s| s.phase).as_deref(),
        Some("Provisioning")
    );
    world.sim.faults.held_provisioning.lock().unwrap().clear();
    let made = disks
        .create_disk(spec("pvc-slow"))
        .await
        .expect("once Ready");
    assert_eq!(made.id, "pvc-slow");
    // Being deleted (a finalizer holds it): a repeat waits for it to go, then makes it anew.
    world
        .sim
        .faults
        .held_deletions
        .lock()
        .unwrap()
        .insert("pvc-slow".into());
    let old_uid = world
        .parent
        .disks()
        .get("pvc-slow")
        .await
        .unwrap()
        .metadata
        .uid;
    world
        .parent
        .disks()
        .delete("pvc-slow", &DeleteParams::default())
        .await
        .unwrap();
    real::wait_for("Terminating", Duration::from_secs(10), async || {
        let vd = world.parent.disks().get("pvc-slow").await.ok()?;
        (vd.status?.phase.as_deref() == Some("Terminating")).then_some(())
    })
    .await;
    match tokio::time::timeout(Duration::from_secs(2), disks.create_disk(spec("pvc-slow"))).await {
        Err(_) => {}
        Ok(Err(e)) if e.is_retryable() => {}
        other => panic!("a create of a disk being deleted: {other:?}"),
    }
    world.sim.faults.held_deletions.lock().unwrap().clear();
    let again = disks
        .create_disk(spec("pvc-slow"))
        .await
        .expect("made anew");
    let new_uid = world
        .parent
        .disks()
        .get(&again.id)
        .await
        .unwrap()
        .metadata
        .uid;
    assert_ne!(new_uid, old_uid, "a new VirtualDisk, not the deleted one");
    disks.delete_disk("pvc-slow").await.expect("delete");
    world.finish().await;
}

/// An attachment someone else made (no labels of ours) is seen: the volume is published
/// there, and DeleteVolume refuses to remove the disk under it.
#[tokio::test]
async fn an_attachment_made_by_others_is_seen() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP foreign-attachment test", "foreign").await else {
        return;
    };
    let disks = world.disks(Duration::from_secs(30));
    disks
        .create_disk(spec("pvc-foreign"))
        .await
        .expect("create");
    let v: Vmbda = serde_json::from_value(serde_json::json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2",
        "kind": "VirtualMachineBlockDeviceAttachment",
        "metadata": {"name": "by-hand"},
        "spec": {"virtualMachineName": "vm-worker-1",
                 "blockDeviceRef": {"kind": "VirtualDisk", "name": "pvc-foreign"}},
    }))
    .unwrap();
    world
        .vmbdas()
        .create(&PostParams::default(), &v)
        .await
        .expect("VMBDA");
    let disk = disks.disk("pvc-foreign").await.expect("get");
    assert_eq!(disk.attachments.len(), 1, "{disk:?}");
    assert_eq!(disk.attachments[0].node, "vm-worker-1");
    match disks.delete_disk("pvc-foreign").await {
        Err(CloudError::FailedPrecondition(m)) => assert!(m.contains("by-hand"), "{m}"),
        other => panic!("delete of a disk attached by someone else: {other:?}"),
    }
    assert!(world
        .parent
        .disks()
        .get_opt("pvc-foreign")
        .await
        .unwrap()
        .is_some());
    world
        .vmbdas()
        .delete("by-hand", &DeleteParams::default())
        .await
        .unwrap();
    real::wait_for("the VMBDA gone", Duration::from_secs(20), async || {
        world
            .vmbdas()
            .get_opt("by-hand")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    disks
        .delete_disk("pvc-foreign")
        .await
        .expect("delete once detached");
    world.finish().await;
}

/// A disk's attachments are read by upstream's `virtualMachineDiskName` label (with the
/// label empty, and without it: made by hand, as the test above does) — never the
/// namespace's every attachment: 30 of other disks stand beside it, each labelled as
/// upstream labels them, and no read of the attachments goes without a selector (of labels,
/// or of the one attachment a wait follows), whether
/// the provider asks about the disk, publishes it, lists the volumes or deletes it; and a
/// ListVolumes page reads its own disks through the parent's paging.
#[tokio::test]
async fn a_disk_s_attachments_are_read_without_the_namespace_s_others() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP attachments-by-label test", "bylabel").await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (parent, _) = world.proxied(work.path()).await;
    let disks = DvpDisks::new(parent, 64, waits(Duration::from_secs(30)));
    disks.create_disk(spec("pvc-mine")).await.expect("create");
    let vmbda = |name: &str, labels: serde_json::Value, vm: &str, disk: &str| -> Vmbda {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2",
            "kind": "VirtualMachineBlockDeviceAttachment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"virtualMachineName": vm,
                     "blockDeviceRef": {"kind": "VirtualDisk", "name": disk}},
        }))
        .unwrap()
    };
    let mut made = vec![
        vmbda(
            "empty-label",
            serde_json::json!({"virtualMachineDiskName": ""}),
            "vm-gone-a",
            "pvc-mine",
        ),
        vmbda("by-hand", serde_json::json!({}), "vm-gone-b", "pvc-mine"),
    ];
    for i in 0..30 {
        let disk = format!("pvc-other-{i}");
        made.push(vmbda(
            &format!("vmbda-{disk}-elsewhere"),
            serde_json::json!({"virtualMachineDiskName": disk, "virtualMachineName": "elsewhere"}),
            "vm-elsewhere",
            &disk,
        ));
    }
    for v in &made {
        world
            .vmbdas()
            .create(&PostParams::default(), v)
            .await
            .expect("VMBDA");
    }
    let reads_of_attachments = || -> Vec<String> {
        std::mem::take(&mut *world.sim.faults.reads.lock().unwrap())
            .into_iter()
            .filter(|r| r.contains("/virtualmachineblockdeviceattachments"))
            .collect()
    };
    let nodes = |d: &overcast_cloud::Disk| -> Vec<String> {
        let mut n: Vec<String> = d.attachments.iter().map(|a| a.node.clone()).collect();
        n.sort();
        n
    };
    reads_of_attachments();

    // Asked about the disk: its own three (upstream-labelled after the publish below).
    let disk = disks.disk("pvc-mine").await.expect("get");
    assert_eq!(nodes(&disk), ["vm-gone-a", "vm-gone-b"], "{disk:?}");
    disks
        .attach_disk("pvc-mine", "worker-1", false)
        .await
        .expect("publish");
    let listed = disks.list_disks().await.expect("list");
    let mine: Vec<_> = listed.iter().filter(|d| d.id == "pvc-mine").collect();
    assert_eq!(mine.len(), 1, "{listed:?}");
    assert_eq!(
        nodes(mine[0]),
        ["vm-gone-a", "vm-gone-b", "worker-1"],
        "{:?}",
        mine[0]
    );
    match disks.delete_disk("pvc-mine").await {
        Err(CloudError::FailedPrecondition(m)) => assert!(m.contains("by-hand"), "{m}"),
        other => panic!("delete of an attached disk: {other:?}"),
    }
    let reads = reads_of_attachments();
    assert!(reads.len() >= 4, "{reads:?}");
    let unselected: Vec<&String> = reads
        .iter()
        // A selector by label, or a wait on one object by name.
        .filter(|r| !r.contains("labelSelector=") && !r.contains("fieldSelector=metadata.name"))
        .collect();
    assert!(
        unselected.is_empty(),
        "the namespace's every attachment was read: {unselected:?}"
    );

    // ListVolumes pages through the parent's own paging: a first page of one reads two
    // disks (`limit=2`), the pages after go on from the last id, and together they give
    // every volume once.
    let paged = ["pvc-page-a", "pvc-page-b", "pvc-page-c"];
    for d in paged {
        disks.create_disk(spec(d)).await.expect("create");
    }
    world.sim.faults.reads.lock().unwrap().clear();
    let ids = |page: &[overcast_cloud::Disk]| -> Vec<String> {
        page.iter().map(|d| d.id.clone()).collect()
    };
    let (first, more) = disks.list_disks_page(None, 1).await.expect("page 1");
    assert_eq!((ids(&first), more), (vec!["pvc-mine".to_owned()], true));
    let disk_reads: Vec<String> = std::mem::take(&mut *world.sim.faults.reads.lock().unwrap())
        .into_iter()
        .filter(|r| r.contains("/virtualdisks"))
        .collect();
    assert!(
        disk_reads.len() == 1 && disk_reads[0].contains("limit=2"),
        "{disk_reads:?}"
    );
    let (second, more) = disks
        .list_disks_page(Some("pvc-mine"), 2)
        .await
        .expect("page 2");
    assert_eq!(
        (ids(&second), more),
        (vec![paged[0].to_owned(), paged[1].to_owned()], true)
    );
    let (third, more) = disks
        .list_disks_page(Some(paged[1]), 2)
        .await
        .expect("page 3");
    assert_eq!((ids(&third), more), (vec![paged[2].to_owned()], false));
    for d in paged {
        disks.delete_disk(d).await.expect("delete");
    }

    disks
        .detach_disk("pvc-mine", "worker-1")
        .await
        .expect("unpublish");
    for v in &made {
        let _ = world
            .vmbdas()
            .delete(&v.name_any(), &DeleteParams::default())
            .await;
    }
    world.finish().await;
}

/// A CSI name with a dot: the real admission webhook refuses it as a VirtualDisk name
/// (played by the simulator's proxy), so the provider maps it to a valid one.
#[tokio::test]
async fn a_volume_name_with_a_dot_makes_a_disk_the_webhook_admits() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP dotted-name test", "dot").await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (parent, _) = world.proxied(work.path()).await;
    // The proxy refuses a dotted VirtualDisk name as the webhook does.
    let raw: VirtualDisk = serde_json::from_value(serde_json::json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
        "metadata": {"name": "pvc.dotted"},
        "spec": {"persistentVolumeClaim": {"size": "16Mi"}},
    }))
    .unwrap();
    match parent.disks().create(&PostParams::default(), &raw).await {
        Err(kube::Error::Api(e)) => assert!(e.message.contains("'.' is forbidden"), "{e:?}"),
        other => panic!("a dotted VirtualDisk name past the webhook: {other:?}"),
    }
    let disks = DvpDisks::new(parent, 64, waits(Duration::from_secs(30)));
    let made = disks.create_disk(spec("pvc.dotted")).await.expect("create");
    assert!(
        made.id.starts_with("csi-") && !made.id.contains('.'),
        "{made:?}"
    );
    assert_eq!(made.name, "pvc.dotted");
    let again = disks.create_disk(spec("pvc.dotted")).await.expect("repeat");
    assert_eq!(again.id, made.id);
    disks.delete_disk(&made.id).await.expect("delete");
    world.finish().await;
}

/// Through the real csi binary, as external-provisioner calls it: its CreateVolume times
/// out (its deadline is shorter than provisioning), and its repeat must not answer OK
/// while the VirtualDisk is still Provisioning — the PV would bind to a disk that is not
/// there. Once the parent makes it Ready, the repeat answers it.
#[tokio::test]
async fn the_csi_driver_answers_a_repeated_create_only_once_the_disk_is_ready() {
    use overcast_integration::Csi;
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the csi binary's repeated create on DVP", "csirep").await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let config = world.cloud_config(work.path());
    let port = overcast_integration::free_port();
    let driver = Csi::start(&[
        &format!("--metrics-address=127.0.0.1:{port}"),
        "--cloud=dvp",
        &format!("--cloud-config={}", config.display()),
    ])
    .await;
    let mut c = driver.controller().await;
    world
        .sim
        .faults
        .held_provisioning
        .lock()
        .unwrap()
        .insert("pvc-csi-slow".into());
    for attempt in ["first", "repeat"] {
        let mut req = tonic::Request::new(overcast_integration::create_request(
            "pvc-csi-slow",
            32 << 20,
        ));
        req.set_timeout(Duration::from_secs(2));
        match c.create_volume(req).await {
            Err(s) => assert!(
                matches!(
                    s.code(),
                    tonic::Code::DeadlineExceeded
                        | tonic::Code::Cancelled
                        | tonic::Code::Unavailable
                        | tonic::Code::Aborted
                ),
                "{attempt}: {s:?}"
            ),
            Ok(r) => {
                panic!("{attempt} CreateVolume answered OK for a disk still Provisioning: {r:?}")
            }
        }
    }
    world.sim.faults.held_provisioning.lock().unwrap().clear();
    let volume = c
        .create_volume(overcast_integration::create_request(
            "pvc-csi-slow",
            32 << 20,
        ))
        .await
        .expect("the repeat once Ready")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(volume.volume_id, "pvc-csi-slow");
    let vd = world.parent.disks().get("pvc-csi-slow").await.unwrap();
    assert_eq!(vd.status.and_then(|s| s.phase).as_deref(), Some("Ready"));
    c.delete_volume(overcast_api::csi_v1::DeleteVolumeRequest {
        volume_id: volume.volume_id,
        ..Default::default()
    })
    .await
    .expect("delete");
    drop(driver);
    world.finish().await;
}

/// The simulator's guest is this machine: a disk the test still has mounted when its
/// VMBDA is deleted cannot be unbound then. DVP unplugs whatever the guest does, so the
/// VMBDA goes; the loop device is let go by the kernel once unmounted (its autoclear),
/// never left bound and unknown (the leak sessions 24 and 25 found under
/// `/tmp/.tmp*/disks/`: the sim forgot the device before its detach failed).
#[tokio::test]
async fn a_device_still_mounted_when_its_vmbda_goes_is_let_go_once_unmounted() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP mounted-unplug test", "unplug").await else {
        return;
    };
    let disks = world.disks(Duration::from_secs(30));
    disks.create_disk(spec("pvc-unplug")).await.expect("create");
    let v: Vmbda = serde_json::from_value(serde_json::json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2",
        "kind": "VirtualMachineBlockDeviceAttachment",
        "metadata": {"name": "unplug"},
        "spec": {"virtualMachineName": "vm-worker-1",
                 "blockDeviceRef": {"kind": "VirtualDisk", "name": "pvc-unplug"}},
    }))
    .unwrap();
    world
        .vmbdas()
        .create(&PostParams::default(), &v)
        .await
        .expect("VMBDA");
    let device = real::wait_for("the disk plugged", Duration::from_secs(20), async || {
        world.sim.device_of("unplug")
    })
    .await;
    let mnt = tempfile::tempdir().unwrap();
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let status = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&device)
        .status()
        .expect("mkfs");
    assert!(status.success());
    nix::mount::mount(
        Some(&device),
        mnt.path(),
        Some("ext4"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .expect("mount");
    let mounted = Unmount(mnt.path().to_owned());

    world
        .vmbdas()
        .delete("unplug", &DeleteParams::default())
        .await
        .unwrap();
    real::wait_for("the VMBDA gone", Duration::from_secs(20), async || {
        world
            .vmbdas()
            .get_opt("unplug")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let index = overcast_cloud_local::loopdev::index_of(&device).expect("a loop device");
    let sys = format!("/sys/block/loop{index}/loop");
    let autoclear = std::fs::read_to_string(format!("{sys}/autoclear")).unwrap_or_default();
    assert_eq!(autoclear.trim(), "1", "let go once unmounted");
    drop(mounted);
    real::wait_for("the device unbound", Duration::from_secs(10), async || {
        (!std::path::Path::new(&format!("{sys}/backing_file")).exists()).then_some(())
    })
    .await;
    disks
        .delete_disk("pvc-unplug")
        .await
        .expect("delete once detached");
    world.finish().await;
}
