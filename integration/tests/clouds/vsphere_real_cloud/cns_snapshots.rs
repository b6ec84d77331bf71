//! The CNS snapshot front (`overcast_integration::cns_snapshots`) before vcsim, checked
//! with raw CNS calls as vsphere-csi-driver makes them (not through any provider code of
//! ours): a snapshot cut of a volume vcsim holds, answered as a task whose result is a
//! `CnsSnapshotCreateResult`; queried by volume, by snapshot, all of them and in pages;
//! the faults of an unknown volume and snapshot; deleted (and `NotFound` the second
//! time); a volume made from it reaches vcsim without its `volumeSource`; one from a
//! snapshot CNS does not have fails `CnsSnapshotNotFoundFault`; a held task reads
//! `running` while the snapshot exists.

use std::time::Duration;

use overcast_cloud_vsphere::cns::{Cns, CreateSpec};

use super::creates;
use overcast_cloud_vsphere::session::Endpoint;
use overcast_cloud_vsphere::soap::Moref;
use overcast_cloud_vsphere::task::{self, TaskError};
use overcast_cloud_vsphere::xml::Element;
use overcast_integration::cns_snapshots::CnsSnapshots;
use overcast_integration::vcsim_front::{Part, VcsimFront};

use super::*;

const THIS: &str = "<_this type=\"CnsVolumeManager\">cns-volume-manager</_this>";

/// Sends a CNS call and waits for its task: its result.
async fn cns(
    vc: &Vcenter,
    method: &'static str,
    params: &str,
) -> Result<Option<Element>, TaskError> {
    let r = vc
        .call(Endpoint::Cns, method, &format!("{THIS}{params}"), false)
        .await
        .map_err(TaskError::Unread)?;
    let t = r.child("returnval").and_then(Moref::of).expect("a task");
    task::wait(vc, &t, method, Duration::from_secs(10)).await
}

async fn cut(vc: &Vcenter, volume: &str, description: &str) -> Element {
    let r = cns(
        vc,
        "CnsCreateSnapshots",
        &format!("<snapshotSpecs><volumeId><id>{volume}</id></volumeId><description>{description}</description></snapshotSpecs>"),
    )
    .await
    .expect("cut")
    .expect("a result");
    let one = r.all("volumeResults").next().cloned();
    one.expect("one result")
}

async fn query(vc: &Vcenter, spec: &str, offset: u64, limit: u64) -> Element {
    cns(
        vc,
        "CnsQuerySnapshots",
        &format!("<snapshotQueryFilter>{spec}<cursor><offset>{offset}</offset><limit>{limit}</limit></cursor></snapshotQueryFilter>"),
    )
    .await
    .expect("query")
    .expect("a result")
}

#[tokio::test]
async fn the_cns_snapshot_front_answers_as_the_cns_api_describes() {
    let Some(sim) = Vcsim::start("the CNS snapshot front", &[]) else {
        return;
    };
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let part = CnsSnapshots::new(Arc::clone(&admin));
    let front = VcsimFront::start(&sim, Arc::clone(&part) as Arc<dyn Part>).await;
    let vc = vcenter_at(&sim, front.port, &Arc::new(ApiMetrics::unregistered()));
    let store = Cns::new(Arc::clone(&vc));
    let datastores =
        overcast_cloud_vsphere::inventory::View::new(Arc::clone(&admin), &["Datastore"])
            .retrieve(&[("Datastore", &["name"])])
            .await
            .unwrap();
    let ds = datastores.first().expect("a datastore").obj.clone();
    let spec = |name: &str| CreateSpec {
        name: name.into(),
        capacity_mb: 64,
        datastores: vec![ds.clone()],
        profile_id: None,
        cluster_id: "overcast-it".into(),
        vsphere_user: "user".into(),
        metadata: Default::default(),
        snapshot: None,
    };
    let volume = store.create(&spec("pvc-snap-src")).await.expect("a volume");

    // Cut: a task whose result is the snapshot, with the description sent.
    let made = cut(&vc, &volume, &format!("snapshot-1-{volume}")).await;
    assert_eq!(made.xsi_type.as_deref(), Some("CnsSnapshotCreateResult"));
    assert_eq!(made.text_at(&["volumeId", "id"]), Some(volume.as_str()));
    let snap = made
        .text_at(&["snapshot", "snapshotId", "id"])
        .unwrap()
        .to_owned();
    assert_eq!(snap.len(), 36, "a UUID: {snap}");
    assert_eq!(
        made.text_at(&["snapshot", "description"]),
        Some(format!("snapshot-1-{volume}").as_str())
    );
    assert!(made
        .text_at(&["snapshot", "createTime"])
        .unwrap()
        .ends_with('Z'));
    let second = cut(&vc, &volume, "second").await;
    let unknown = cut(&vc, "no-such-volume", "x").await;
    assert_eq!(
        unknown
            .at(&["fault", "fault"])
            .and_then(|f| f.xsi_type.as_deref()),
        Some("CnsVolumeNotFoundFault")
    );

    // Queried: by volume, by snapshot, all, in pages; unknown ones as faulted entries.
    let by_volume = query(
        &vc,
        &format!("<snapshotQuerySpecs><volumeId><id>{volume}</id></volumeId></snapshotQuerySpecs>"),
        0,
        128,
    )
    .await;
    assert_eq!(
        by_volume.xsi_type.as_deref(),
        Some("CnsSnapshotQueryResult")
    );
    assert_eq!(by_volume.all("entries").count(), 2);
    assert_eq!(by_volume.text_at(&["cursor", "totalRecords"]), Some("2"));
    let one = query(&vc, &format!("<snapshotQuerySpecs><volumeId><id>{volume}</id></volumeId><snapshotId><id>{snap}</id></snapshotId></snapshotQuerySpecs>"), 0, 128).await;
    assert_eq!(one.all("entries").count(), 1);
    assert_eq!(
        one.text_at(&["entries", "snapshot", "snapshotId", "id"]),
        Some(snap.as_str())
    );
    let paged = query(&vc, "", 1, 1).await;
    assert_eq!(paged.all("entries").count(), 1);
    assert_eq!(paged.text_at(&["cursor", "offset"]), Some("2"));
    assert_eq!(paged.text_at(&["cursor", "totalRecords"]), Some("2"));
    let missing = query(&vc, &format!("<snapshotQuerySpecs><volumeId><id>{volume}</id></volumeId><snapshotId><id>00000000-0000-4000-8000-000000000000</id></snapshotId></snapshotQuerySpecs>"), 0, 128).await;
    assert_eq!(
        missing
            .at(&["entries", "error", "fault"])
            .and_then(|f| f.xsi_type.as_deref()),
        Some("CnsSnapshotNotFoundFault")
    );
    let no_volume = query(
        &vc,
        "<snapshotQuerySpecs><volumeId><id>no-such-volume</id></volumeId></snapshotQuerySpecs>",
        0,
        128,
    )
    .await;
    assert_eq!(
        no_volume
            .at(&["entries", "error", "fault"])
            .and_then(|f| f.xsi_type.as_deref()),
        Some("CnsVolumeNotFoundFault")
    );
    let two_specs = cns(
        &vc,
        "CnsQuerySnapshots",
        &format!("<snapshotQueryFilter><snapshotQuerySpecs><volumeId><id>{volume}</id></volumeId></snapshotQuerySpecs><snapshotQuerySpecs><volumeId><id>{volume}</id></volumeId></snapshotQuerySpecs></snapshotQueryFilter>"),
    )
    .await;
    assert!(
        matches!(two_specs, Err(TaskError::Failed(_))),
        "{two_specs:?}"
    );

    // A volume from the snapshot: vcsim makes it (without the source it does not know);
    // from a snapshot CNS does not have, the task fails.
    let from = |name: &str, snapshot: &str| {
        format!(
            "<createSpecs><name>{name}</name><volumeType>BLOCK</volumeType>{}<metadata><containerCluster><clusterType>KUBERNETES</clusterType><clusterId>overcast-it</clusterId><vSphereUser>user</vSphereUser><clusterFlavor>VANILLA</clusterFlavor></containerCluster></metadata><backingObjectDetails xsi:type=\"CnsBlockBackingDetails\"><capacityInMb>64</capacityInMb></backingObjectDetails><volumeSource xsi:type=\"CnsSnapshotVolumeSource\"><volumeId><id>{volume}</id></volumeId><snapshotId><id>{snapshot}</id></snapshotId></volumeSource></createSpecs>",
            ds.xml("datastores")
        )
    };
    let restored = cns(&vc, "CnsCreateVolume", &from("pvc-restored", &snap))
        .await
        .expect("a volume from the snapshot")
        .expect("a result");
    let restored = restored
        .all("volumeResults")
        .next()
        .and_then(|r| r.text_at(&["volumeId", "id"]))
        .expect("its id")
        .to_owned();
    assert_ne!(restored, volume);
    assert_eq!(creates::named(&admin, "pvc-restored").await, vec![restored]);
    let refused = cns(
        &vc,
        "CnsCreateVolume",
        &from("pvc-restored-x", "00000000-0000-4000-8000-000000000000"),
    )
    .await;
    assert!(
        matches!(&refused, Err(TaskError::Failed(e)) if e.to_string().contains("not found")),
        "{refused:?}"
    );
    assert!(creates::named(&admin, "pvc-restored-x").await.is_empty());

    // Deleted; a second time NotFound in the result.
    let del = |id: String| {
        let vc = Arc::clone(&vc);
        let volume = volume.clone();
        async move {
            cns(&vc, "CnsDeleteSnapshots", &format!("<snapshotDeleteSpecs><volumeId><id>{volume}</id></volumeId><snapshotId><id>{id}</id></snapshotId></snapshotDeleteSpecs>"))
                .await
                .expect("delete")
                .expect("a result")
        }
    };
    let gone = del(snap.clone()).await;
    let r = gone.all("volumeResults").next().unwrap();
    assert_eq!(r.xsi_type.as_deref(), Some("CnsSnapshotDeleteResult"));
    assert_eq!(r.text_at(&["snapshotId", "id"]), Some(snap.as_str()));
    let again = del(snap.clone()).await;
    assert_eq!(
        again
            .all("volumeResults")
            .next()
            .unwrap()
            .at(&["fault", "fault"])
            .and_then(|f| f.xsi_type.as_deref()),
        Some("NotFound")
    );
    assert_eq!(part.snapshots().len(), 1);

    // Held: the task reads running, the snapshot is there meanwhile.
    part.hold(&volume);
    let r = vc
        .call(Endpoint::Cns, "CnsCreateSnapshots", &format!("{THIS}<snapshotSpecs><volumeId><id>{volume}</id></volumeId><description>held</description></snapshotSpecs>"), false)
        .await
        .unwrap();
    let t = r.child("returnval").and_then(Moref::of).unwrap();
    let waited = task::wait(&vc, &t, "CnsCreateSnapshots", Duration::from_millis(500)).await;
    assert!(
        matches!(waited, Err(TaskError::Unread(_))),
        "still running: {waited:?}"
    );
    assert_eq!(part.snapshots().len(), 2);
    part.release();
    task::wait(&vc, &t, "CnsCreateSnapshots", Duration::from_secs(5))
        .await
        .expect("done once released");
    let _ = second;
}
