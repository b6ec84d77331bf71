//! The CNS calls against vcsim's CNS (bookkeeping: no device reaches a VM, and every
//! attach answers the same disk UUID): a block volume made on a datastore with the
//! cluster's metadata, found by id and by name, attached and detached, extended,
//! deleted, and deleted again.

use super::*;
use overcast_cloud::CloudError;
use overcast_cloud_vsphere::cns::{Cns, CreateSpec, Filter, PVC_NAME, PVC_NAMESPACE, PV_NAME};
use overcast_cloud_vsphere::inventory::View;

#[tokio::test]
async fn a_block_volume_is_made_found_attached_extended_and_deleted() {
    let Some(sim) = Vcsim::start("cns", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let vc = vcenter(&sim, &metrics);
    let view = View::new(Arc::clone(&vc), &["Datastore", "VirtualMachine"]);
    let found = view
        .retrieve(&[("Datastore", &["name"]), ("VirtualMachine", &["name"])])
        .await
        .unwrap();
    let ds = found
        .iter()
        .find(|p| p.obj.kind == "Datastore")
        .unwrap()
        .obj
        .clone();
    let vm = found
        .iter()
        .find(|p| p.obj.kind == "VirtualMachine")
        .unwrap()
        .obj
        .clone();
    let cns = Cns::new(Arc::clone(&vc));
    let spec = CreateSpec {
        name: "pvc-0001".into(),
        capacity_mb: 1024,
        datastores: vec![ds],
        profile_id: None,
        cluster_id: "cluster-a".into(),
        vsphere_user: "user".into(),
        metadata: [
            (PV_NAME, "pvc-0001"),
            (PVC_NAME, "data"),
            (PVC_NAMESPACE, "default"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        snapshot: None,
    };
    let id = cns.create(&spec).await.unwrap();
    // Another cluster's volume of the same name is not ours.
    cns.create(&CreateSpec {
        cluster_id: "cluster-b".into(),
        ..spec.clone()
    })
    .await
    .unwrap();
    let ours = cns
        .query(&Filter {
            names: vec!["pvc-0001".into()],
            cluster_ids: vec!["cluster-a".into()],
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(
        (ours[0].id.as_str(), ours[0].capacity_mb),
        (id.as_str(), 1024)
    );
    assert!(!ours[0].datastore_url.is_empty(), "{:?}", ours[0]);
    // The PV and the PVC recorded as Kubernetes entities, read back.
    assert_eq!(ours[0].metadata, spec.metadata);
    let by_id = cns
        .query(&Filter {
            ids: vec![id.clone()],
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(by_id.len(), 1);

    let uuid = cns.attach(&id, &vm).await.unwrap();
    assert_eq!(uuid.len(), 32, "{uuid}");
    // vcsim refuses a second attach of an attached volume (ResourceInUse): Busy, not gone.
    let e = cns.attach(&id, &vm).await.unwrap_err();
    assert!(matches!(e, CloudError::Busy(_)), "{e:?}");
    cns.detach(&id, &vm).await.unwrap();
    cns.extend(&id, 2048).await.unwrap();
    let grown = cns
        .query(&Filter {
            ids: vec![id.clone()],
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(grown[0].capacity_mb, 2048);
    cns.delete(&id).await.unwrap();
    assert!(cns
        .query(&Filter {
            ids: vec![id.clone()],
            ..Filter::default()
        })
        .await
        .unwrap()
        .is_empty());
    cns.delete(&id).await.unwrap();
}
