use super::*;
use overcast_cloud_vsphere::inventory::View;
use overcast_cloud_vsphere::vms::{snapshot, VIEW_TYPES};

#[tokio::test]
async fn one_property_collector_call_reads_every_vm_and_its_ancestors() {
    let Some(sim) = Vcsim::start("inventory", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let vc = vcenter(&sim, &metrics);
    let view = View::new(Arc::clone(&vc), VIEW_TYPES);
    let snap = snapshot(&view).await.unwrap();
    assert_eq!(snap.vms.len(), 4, "vcsim's default inventory has 4 VMs");
    for vm in &snap.vms {
        assert!(vm.uuid.is_some(), "{vm:?}");
        let up = snap.ancestors(vm.host.as_ref().unwrap());
        assert!(up.iter().any(|m| m.kind == "Datacenter"), "{up:?}");
    }
    // Again: the view and the session are kept, one call.
    let before = metrics.total();
    snapshot(&view).await.unwrap();
    assert_eq!(metrics.total() - before, 1);
}
