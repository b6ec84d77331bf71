//! The OpenStack CSI on the real services' unhappy paths: a server deleted while Cinder
//! could not be told, a server Nova keeps in ERROR, a volume type named by id, a volume
//! already `deleting`, volumes on their way reported as such, Keystone paused under a
//! Probe. Each test failed against the provider before it handled the case.

use overcast_cloud::{CloudError, DiskSpec};
use overcast_integration::{csi_v1 as csi, mount_cap, Csi};

use super::*;

fn spec(name: &str, parameters: BTreeMap<String, String>) -> DiskSpec {
    DiskSpec {
        name: name.into(),
        size_bytes: 1 << 30,
        zone: Zone::default(),
        parameters,
        metadata: BTreeMap::new(),
        source: None,
    }
}

/// A server booted and a volume made for a test, both named `overcast-it-<tag>-<pid>`.
async fn server_and_volume(
    cloud: &Cloud,
    tag: &str,
) -> (String, CinderDisks, overcast_cloud::Disk) {
    let name = format!("overcast-it-{tag}-{}", std::process::id());
    let server = cloud.boot(&name).await;
    let disks = cloud.disks();
    let disk = created(&disks, spec(&name, BTreeMap::new())).await;
    (server, disks, disk)
}

/// A controller-only csi on the real services.
async fn controller(cloud: &Cloud, work: &std::path::Path) -> Csi {
    let conf = cloud_conf_through_login_cache(&cloud.env, work);
    Csi::start(&[
        "--cloud=openstack",
        &format!("--cloud-config={}", conf.display()),
        "--mode=controller",
        "--cluster=overcast-it",
    ])
    .await
}

/// A server deleted while cinder-api is down: Nova deletes it, Cinder keeps its
/// attachment, and the volume stays `in-use` (cloud-provider-openstack #1056). The real
/// csi's unpublish from the gone server removes Cinder's attachment: the volume is
/// `available`, and deletes.
#[tokio::test]
async fn a_volume_of_a_server_deleted_behind_cinder_s_back_is_released_by_unpublish() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let (server, disks, disk) = server_and_volume(&cloud, "crash").await;
    // Retried as the attacher retries: the simulator's Nova can roll an attach back when
    // its SQLite database is locked under load (UNAVAILABLE, retryable).
    let mut attempts = 0;
    while let Err(e) = disks.attach_disk(&disk.id, &server, false).await {
        attempts += 1;
        assert!(e.is_retryable() && attempts < 3, "attach: {e:?}");
    }
    let api = CinderApi::find(&cloud.env);
    api.stop().await;
    cloud.delete_server(&server).await;
    api.start().await;
    let held = disks.disk(&disk.id).await.expect("get");
    assert!(
        held.attachments.iter().any(|a| a.node == server),
        "Cinder still holds the deleted server's attachment: {held:?}"
    );
    let work = tempfile::tempdir().unwrap();
    let driver = controller(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    c.controller_unpublish_volume(overcast_integration::detach_request(&disk.id, &server))
        .await
        .expect("unpublish from the deleted server");
    let freed = disks.disk(&disk.id).await.expect("get");
    assert!(freed.attachments.is_empty(), "{freed:?}");
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: disk.id.clone(),
        ..Default::default()
    })
    .await
    .expect("the released volume deletes");
}

/// A server Nova holds in ERROR (`nova reset-state`): Nova's 409 ("Cannot
/// 'attach_volume' instance … while it is in vm_state error") is FAILED_PRECONDITION with
/// Nova's reason, at once — not UNAVAILABLE after three attempts, nor a wait of the whole
/// deadline.
#[tokio::test]
async fn a_server_in_error_is_failed_precondition_with_nova_s_reason() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let (server, disks, disk) = server_and_volume(&cloud, "error").await;
    let (status, body) = cloud
        .compute(
            "server_reset_state",
            Method::POST,
            &format!("/servers/{server}/action"),
            Some(&json!({"os-resetState": {"state": "error"}})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let work = tempfile::tempdir().unwrap();
    let driver = controller(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    let started = std::time::Instant::now();
    let e = c
        .controller_publish_volume(overcast_integration::attach_request(
            &disk.id,
            &server,
            mount_cap("xfs"),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("vm_state error"), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let v = disks.disk(&disk.id).await.expect("get");
    assert!(v.attachments.is_empty(), "{v:?}");
    cloud.delete_server(&server).await;
    disks.delete_disk(&disk.id).await.expect("delete");
}

/// A StorageClass naming its volume type by id (cinder-csi-plugin accepts ids; Cinder
/// answers a volume's type by name): the first CreateVolume and its repeat both answer
/// OK with one volume — not ALREADY_EXISTS.
#[tokio::test]
async fn a_volume_type_given_by_id_is_the_type_cinder_names() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let name = format!("overcast-it-type-{}", std::process::id());
    let resp = cloud
        .os
        .call(
            Service::BlockStorage,
            "volume_type_create",
            Method::POST,
            "/types",
            Some(&json!({"volume_type": {"name": name}})),
            None,
        )
        .await
        .expect("create a type");
    let doc: Value = serde_json::from_slice(&resp.body).unwrap();
    let type_id = doc["volume_type"]["id"]
        .as_str()
        .expect("type id")
        .to_owned();
    let work = tempfile::tempdir().unwrap();
    let driver = controller(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    let mut create = overcast_integration::create_request(&name, 1 << 30);
    create.parameters.insert("type".into(), type_id.clone());
    let first = c
        .create_volume(create.clone())
        .await
        .expect("the first create")
        .into_inner()
        .volume
        .unwrap();
    let again = c
        .create_volume(create)
        .await
        .expect("its repeat")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(again.volume_id, first.volume_id);
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: first.volume_id,
        ..Default::default()
    })
    .await
    .expect("delete");
    let _ = cloud
        .os
        .call(
            Service::BlockStorage,
            "volume_type_delete",
            Method::DELETE,
            &format!("/types/{type_id}"),
            None,
            None,
        )
        .await;
}

/// A volume already `deleting` (its deletion queued while cinder-volume is paused): a
/// DeleteVolume sends no second DELETE (Cinder's 400 read as "in use") but waits, with a
/// retryable answer when its deadline comes first, and OK once the volume is gone; a
/// volume `creating` or `deleting` is reported abnormal, not healthy.
#[tokio::test]
async fn a_volume_being_deleted_is_waited_for_and_not_reported_healthy() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let disks = cloud.disks();
    let disk = created(
        &disks,
        spec(
            &format!("overcast-it-deleting-{}", std::process::id()),
            BTreeMap::new(),
        ),
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let driver = controller(&cloud, work.path()).await;
    let mut c = driver.controller().await;
    let condition = |v: &csi::ControllerGetVolumeResponse| {
        v.status
            .as_ref()
            .and_then(|s| s.volume_condition.clone())
            .map(|c| c.abnormal)
    };
    // `creating`, as Cinder's admin API can put it.
    let resp = cloud
        .os
        .call(
            Service::BlockStorage,
            "volume_reset_status",
            Method::POST,
            &format!("/volumes/{}/action", disk.id),
            Some(&json!({"os-reset_status": {"status": "creating"}})),
            None,
        )
        .await
        .unwrap();
    assert_eq!(resp.status.as_u16(), 202);
    let got = c
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: disk.id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(condition(&got), Some(true), "a volume creating is abnormal");
    let resp = cloud
        .os
        .call(
            Service::BlockStorage,
            "volume_reset_status",
            Method::POST,
            &format!("/volumes/{}/action", disk.id),
            Some(&json!({"os-reset_status": {"status": "available"}})),
            None,
        )
        .await
        .unwrap();
    assert_eq!(resp.status.as_u16(), 202);
    {
        let _paused = Paused::new(service_group(&cloud, "cinder-volume"));
        let resp = cloud
            .os
            .call(
                Service::BlockStorage,
                "volume_delete",
                Method::DELETE,
                &format!("/volumes/{}", disk.id),
                None,
                None,
            )
            .await
            .unwrap();
        assert_eq!(resp.status.as_u16(), 202);
        let got = c
            .controller_get_volume(csi::ControllerGetVolumeRequest {
                volume_id: disk.id.clone(),
            })
            .await
            .expect("get")
            .into_inner();
        assert_eq!(condition(&got), Some(true), "a volume deleting is abnormal");
        let mut req = tonic::Request::new(csi::DeleteVolumeRequest {
            volume_id: disk.id.clone(),
            ..Default::default()
        });
        req.set_timeout(Duration::from_secs(3));
        let e = c.delete_volume(req).await.unwrap_err();
        assert!(
            matches!(
                e.code(),
                tonic::Code::DeadlineExceeded
                    | tonic::Code::Cancelled
                    | tonic::Code::Aborted
                    | tonic::Code::Unavailable
            ),
            "a delete of a volume being deleted is retryable: {e:?}"
        );
    }
    // Retried as external-provisioner retries: the call the deadline cut short may still
    // be waiting for the deletion in the driver (its volume guard answers ABORTED to a
    // concurrent call), until Cinder has deleted the volume.
    let started = std::time::Instant::now();
    loop {
        match c
            .delete_volume(csi::DeleteVolumeRequest {
                volume_id: disk.id.clone(),
                ..Default::default()
            })
            .await
        {
            Ok(_) => break,
            Err(e)
                if e.code() == tonic::Code::Aborted
                    && started.elapsed() < Duration::from_secs(90) =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Err(e) => panic!("OK once Cinder has deleted it: {e:?}"),
        }
    }
    match disks.disk(&disk.id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => panic!("the volume is gone: {other:?}"),
    }
}

/// Keystone paused (SIGSTOP: connections are accepted, nothing answers) before the
/// driver holds a token: Probe answers within its own short deadline that the driver is
/// not ready, rather than hanging behind the token request.
#[tokio::test]
async fn probe_answers_while_keystone_hangs() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    // Paused before the driver's first token request: with a token in hand the probe
    // would not need Keystone at all.
    let _paused = Paused::new(service_group(&cloud, "keystone"));
    let work = tempfile::tempdir().unwrap();
    let conf = cloud_conf(&cloud.env, work.path());
    let driver = Csi::start_unready(&[
        "--cloud=openstack",
        &format!("--cloud-config={}", conf.display()),
        "--mode=controller",
        "--cluster=overcast-it",
    ])
    .await;
    let mut identity = driver.identity().await;
    let started = std::time::Instant::now();
    let mut req = tonic::Request::new(csi::ProbeRequest {});
    req.set_timeout(Duration::from_secs(10));
    let ready = identity
        .probe(req)
        .await
        .expect("Probe answers")
        .into_inner()
        .ready;
    assert_eq!(
        ready,
        Some(false),
        "not ready while the cloud does not answer"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "answered after {:?}",
        started.elapsed()
    );
}
