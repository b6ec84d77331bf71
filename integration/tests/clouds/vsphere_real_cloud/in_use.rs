//! CNS answers `ResourceInUse` to an attach of a volume it is still attaching as to one
//! held by another VM (issue 71: a publish retried while the host attached was answered
//! FAILED_PRECONDITION "attached to another VM", naming nothing but its own VM). As
//! vsphere-csi-driver does, the requested VM is read again: the disk there, the attach
//! is done; another VM holding it, FAILED_PRECONDITION naming it; neither, ABORTED.

use std::collections::BTreeMap;

use overcast_cloud::{CloudError, DiskSpec, Disks, Zone};
use overcast_cloud_vsphere::cns::Cns;
use overcast_cloud_vsphere::disks::VsphereDisks;

use super::*;

#[tokio::test]
async fn an_attach_cns_finds_in_use_is_done_under_way_or_held_by_the_vm_it_names() {
    let Some(sim) = Vcsim::start("attach in use", &[]) else {
        return;
    };
    let vc = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let disks = VsphereDisks::new(Cns::new(Arc::clone(&vc)), "overcast-it".into(), 59);
    let vms = overcast_sim_vsphere::vcsim::vms(&vc).await;
    let ((a, a_vm), (b, _)) = (&vms[0], &vms[1]);
    let d = disks
        .create_disk(DiskSpec {
            name: "pvc-in-use".into(),
            size_bytes: 1 << 30,
            zone: Zone::default(),
            parameters: BTreeMap::new(),
            metadata: BTreeMap::new(),
            source: None,
        })
        .await
        .unwrap();

    // CNS has attached it to A; the host has not put the disk on A's VM yet (vcsim's CNS
    // never does: the test is the host). A publish retried meanwhile: under way.
    Cns::new(Arc::clone(&vc)).attach(&d.id, a_vm).await.unwrap();
    let e = disks.attach_disk(&d.id, a, false).await.unwrap_err();
    assert!(
        matches!(&e, CloudError::Busy(m) if m.contains("under way") && m.contains(a.as_str())),
        "{e:?}"
    );
    // To B meanwhile: nothing holds it yet that could be named — under way too, not
    // "attached to another VM".
    let e = disks.attach_disk(&d.id, b, false).await.unwrap_err();
    assert!(matches!(&e, CloudError::Busy(_)), "{e:?}");

    // The host done: the disk on A's VM. The retried publish answers the attachment.
    let uuid = overcast_sim_vsphere::esxi_host::disk_uuid(&d.id);
    overcast_sim_vsphere::vcsim::plug_disk(&vc, a_vm, a, &d.id, &uuid).await;
    let attached = disks.attach_disk(&d.id, a, false).await.unwrap();
    assert_eq!(attached.node, *a, "{attached:?}");
    // To B now: FAILED_PRECONDITION, naming the VM that holds it.
    let e = disks.attach_disk(&d.id, b, false).await.unwrap_err();
    assert!(
        matches!(&e, CloudError::FailedPrecondition(m) if m.contains(&format!("attached to {a}"))),
        "{e:?}"
    );
}
