//! The provider against the engine's behaviour as its source has it (see the simulator's
//! header): what a disk GET carries without `all_content`, the search grammar and its
//! silent empty answer, the 400s for "already gone", the description's limit, the
//! domain a class names. Each test failed against the provider before it read the
//! engine this way.

use super::*;

/// A csi controller on `s`, its VM ids being node ids.
async fn controller(s: &Sim) -> Csi {
    let conf = s.cloud_config();
    Csi::start(&[
        "--cloud=zvirt",
        &format!("--cloud-config={}", conf.display()),
        "--cluster=overcast-it",
        &format!("--device-by-id-dir={}", s.by_id.display()),
    ])
    .await
}

fn create(name: &str) -> csi::CreateVolumeRequest {
    let mut create = overcast_integration::create_request(name, GIB as i64);
    create.parameters = parameters("data").into_iter().collect();
    create
}

/// Through the real csi binary. A disk's `vms` come only with `all_content`, and never in
/// a listing: read that way, ControllerGetVolume and ListVolumes name the node a volume
/// is published to; a publish to a second VM is FAILED_PRECONDITION (single-node); an
/// unpublish really detaches it on the engine, so the volume moves to another node; and
/// DeleteVolume of an attached volume is FAILED_PRECONDITION even with its VM down —
/// where the engine itself would remove the disk and its attachment.
#[tokio::test]
async fn attachments_are_read_as_the_engine_gives_them_and_unpublish_really_detaches() {
    let s = sim(Latency::default()).await;
    let (a, b) = (s.engine.add_vm("worker-a"), s.engine.add_vm("worker-b"));
    let driver = controller(&s).await;
    let mut c = driver.controller().await;
    let id = c
        .create_volume(create("pvc-zvirt-moves"))
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    c.controller_publish_volume(overcast_integration::attach_request(
        &id,
        &a,
        mount_cap("xfs"),
    ))
    .await
    .expect("publish to a");
    assert!(
        s.engine.active_at(&a, &id).is_some(),
        "attached on the engine"
    );
    let got = c
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(got.status.unwrap().published_node_ids, vec![a.clone()]);
    let listed = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .expect("list")
        .into_inner();
    let entry = listed
        .entries
        .iter()
        .find(|e| e.volume.as_ref().is_some_and(|v| v.volume_id == id))
        .expect("listed");
    assert_eq!(
        entry.status.as_ref().unwrap().published_node_ids,
        vec![a.clone()],
        "ListVolumes names the node (external-attacher relies on it)"
    );
    let elsewhere = c
        .controller_publish_volume(overcast_integration::attach_request(
            &id,
            &b,
            mount_cap("xfs"),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        elsewhere.code(),
        tonic::Code::FailedPrecondition,
        "{elsewhere:?}"
    );
    c.controller_unpublish_volume(overcast_integration::detach_request(&id, &a))
        .await
        .expect("unpublish");
    assert!(
        s.engine.active_at(&a, &id).is_none(),
        "the engine has no attachment left after an unpublish"
    );
    c.controller_publish_volume(overcast_integration::attach_request(
        &id,
        &b,
        mount_cap("xfs"),
    ))
    .await
    .expect("the volume moves to b");
    s.engine.set_vm_status(&b, "down");
    let refused = c
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        s.engine.disks().iter().any(|(d, _, _)| *d == id),
        "a volume in use is never removed"
    );
    assert!(
        s.engine.active_at(&b, &id).is_some(),
        "nor detached by a delete"
    );
    c.controller_unpublish_volume(overcast_integration::detach_request(&id, &b))
        .await
        .expect("unpublish");
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: id,
        ..Default::default()
    })
    .await
    .expect("delete once detached");
}

/// Names the engine's alias or search cannot take (`'`, `;`, a trailing `\`, `"`,
/// spaces, non-ASCII) are given a `csi-<md5>` alias, so a retried create finds the disk
/// and never makes a second; and when the search answers nothing for a disk this process
/// made (the engine's answer to a search it refuses), the disk is looked up by id
/// before anything is made again.
#[tokio::test]
async fn names_the_engine_cannot_search_make_one_disk_each() {
    let s = sim(Latency::default()).await;
    let d = disks(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD));
    let spec = |name: &str| DiskSpec {
        name: name.into(),
        size_bytes: GIB,
        zone: Zone::default(),
        parameters: parameters("data"),
        metadata: BTreeMap::new(),
        source: None,
    };
    let names = [
        "it's",
        "a;b",
        "ends\\",
        "pvc\"quoted",
        "two words",
        "pvc*",
        "nämé",
    ];
    let mut ids = Vec::new();
    for name in names {
        let first = d.create_disk(spec(name)).await.expect(name);
        let again = d.create_disk(spec(name)).await.expect(name);
        assert_eq!(again.id, first.id, "{name:?} found again");
        assert_eq!(first.name, name);
        assert_eq!(d.disk_by_name(name).await.unwrap().unwrap().id, first.id);
        ids.push(first.id);
    }
    assert_eq!(s.engine.disks().len(), names.len(), "one disk a name");
    // The search goes blind: a disk this process made is still found, by id.
    s.engine.set_blind_search(true);
    let again = d.create_disk(spec("it's")).await.expect("blind");
    assert_eq!(again.id, ids[0]);
    assert_eq!(s.engine.disks().len(), names.len(), "no second disk");
    s.engine.set_blind_search(false);
    for id in ids {
        d.delete_disk(&id).await.unwrap();
    }
}

/// The engine answers "already gone" with 400, not 404: detaching from a VM that no
/// longer exists, or a disk that is not attached, is success; an attach to a gone VM is
/// NOT_FOUND (read from the fault, not the status alone).
#[tokio::test]
async fn the_engine_s_400s_for_gone_vms_and_detached_disks() {
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-0");
    let gone = s.engine.add_vm("worker-gone");
    let d = disks(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD));
    let disk = d
        .create_disk(DiskSpec {
            name: "pvc-gone".into(),
            size_bytes: GIB,
            zone: Zone::default(),
            parameters: parameters("data"),
            metadata: BTreeMap::new(),
            source: None,
        })
        .await
        .unwrap();
    d.detach_disk(&disk.id, &vm)
        .await
        .expect("a disk that is not attached is detached");
    d.attach_disk(&disk.id, &gone, false).await.expect("attach");
    s.engine.remove_vm(&gone);
    d.detach_disk(&disk.id, &gone)
        .await
        .expect("detaching from a VM that is gone is success");
    match d.attach_disk(&disk.id, &gone, false).await {
        Err(CloudError::NotFound { .. }) => {}
        other => panic!("attach to a gone VM: {other:?}"),
    }
    d.delete_disk(&disk.id).await.unwrap();
}

/// The longest names the sidecars send (a PVC name of 253 characters, a namespace of
/// 63) fit the engine's 500-character description, and a class naming a storage domain
/// the engine lacks is INVALID_ARGUMENT before anything is made.
#[tokio::test]
async fn the_longest_names_fit_and_an_unknown_domain_is_invalid() {
    let s = sim(Latency::default()).await;
    let driver = controller(&s).await;
    let mut c = driver.controller().await;
    let mut req = create("pvc-0a1b2c3d-0000-4000-8000-000000000001");
    req.parameters
        .insert("csi.storage.k8s.io/pvc/name".into(), "p".repeat(253));
    req.parameters
        .insert("csi.storage.k8s.io/pvc/namespace".into(), "n".repeat(63));
    req.parameters.insert(
        "csi.storage.k8s.io/pv/name".into(),
        "pvc-0a1b2c3d-0000-4000-8000-000000000001".into(),
    );
    let volume = c
        .create_volume(req.clone())
        .await
        .expect("the longest names")
        .into_inner()
        .volume
        .unwrap();
    let again = c.create_volume(req).await.expect("repeat").into_inner();
    assert_eq!(again.volume.unwrap().volume_id, volume.volume_id);
    let mut unknown = create("pvc-zvirt-nodomain");
    unknown
        .parameters
        .insert("storageDomainName".into(), "no-such-domain".into());
    let before = s.engine.disks().len();
    let e = c.create_volume(unknown).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert_eq!(s.engine.disks().len(), before, "nothing made");
}
