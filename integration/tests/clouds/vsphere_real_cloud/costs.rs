//! What the `csi` binary's RPCs cost the vCenter as the inventory grows, measured as a
//! sidecar drives them — on the socket, through a counting front before vcsim
//! (`overcast_integration::vsphere_costs`): an attach at 500 VMs reads what it reads at
//! 10, and so do a detach and a listing; a listing names the node a volume is attached
//! to whether the vCenter says which VMs hold it or (a vCenter that spells those VMs
//! otherwise) every VM's devices are read.

use overcast_integration::vcsim::{plug_disk, unplug_disk};
use overcast_integration::vcsim_front::{Tally, VmIdSpelling};
use overcast_integration::vsphere_costs::{Costs, NODE};
use overcast_integration::{
    attach_request, create_request, csi_v1 as csi, detach_request, mount_cap,
};

/// What publish, unpublish and a listing of one attached volume cost at `per_pool` VMs
/// in each of vcsim's two pools.
async fn costs_at(per_pool: usize) -> Option<(usize, [Tally; 3])> {
    let costs = Costs::start(
        "what RPCs cost against the inventory",
        per_pool,
        VmIdSpelling::Moref,
        "",
        &["--cluster=overcast-it"],
    )
    .await?;
    let mut c = costs.driver.controller().await;
    let id = c
        .create_volume(create_request("pvc-costs", 1 << 30))
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let (r, publish, _) = costs
        .measure(c.controller_publish_volume(attach_request(&id, NODE, mount_cap("ext4"))))
        .await;
    let uuid = r.expect("publish").into_inner().publish_context["diskUUID"].clone();
    plug_disk(&costs.admin, &costs.vm, &costs.vm_name, &id, &uuid).await;
    let (r, list, _) = costs
        .measure(c.list_volumes(csi::ListVolumesRequest::default()))
        .await;
    let entries = r.expect("list").into_inner().entries;
    let published: Vec<_> = entries
        .iter()
        .filter(|e| e.volume.as_ref().unwrap().volume_id == id)
        .flat_map(|e| e.status.as_ref().unwrap().published_node_ids.clone())
        .collect();
    assert_eq!(published, [NODE], "{entries:?}");
    let (r, unpublish, _) = costs
        .measure(c.controller_unpublish_volume(detach_request(&id, NODE)))
        .await;
    r.expect("unpublish");
    unplug_disk(&costs.admin, &costs.vm, &id).await;
    Some((costs.vms, [publish, unpublish, list]))
}

#[tokio::test]
async fn publish_unpublish_and_list_read_no_more_at_500_vms_than_at_10() {
    let Some((small_vms, small)) = costs_at(5).await else {
        return;
    };
    let (large_vms, large) = costs_at(250).await.unwrap();
    assert!(
        small_vms < 20 && large_vms >= 500,
        "{small_vms} and {large_vms} VMs"
    );
    for (rpc, (s, l)) in [
        "ControllerPublishVolume",
        "ControllerUnpublishVolume",
        "ListVolumes",
    ]
    .iter()
    .zip(small.iter().zip(large.iter()))
    {
        eprintln!(
            "{rpc}: {} calls / {} bytes at {small_vms} VMs, {} / {} at {large_vms} ({:?})",
            s.calls, s.answer_bytes, l.calls, l.answer_bytes, l.methods
        );
        assert!(
            l.answer_bytes < 2 * s.answer_bytes,
            "{rpc} read {} bytes at {large_vms} VMs and {} at {small_vms}: {:?}",
            l.answer_bytes,
            s.answer_bytes,
            l.methods
        );
        assert_eq!(
            l.calls, s.calls,
            "{rpc}: {:?} against {:?}",
            l.methods, s.methods
        );
    }
}

/// A vCenter whose associations name VMs by something other than their reference: the
/// listing reads every VM's devices instead — the right node, at the old cost — and says
/// so once.
#[tokio::test]
async fn a_listing_whose_associations_cannot_be_resolved_reads_every_vm() {
    let Some(costs) = Costs::start(
        "associations spelled otherwise",
        60,
        VmIdSpelling::InstanceUuid,
        "",
        &["--cluster=overcast-it"],
    )
    .await
    else {
        return;
    };
    let mut c = costs.driver.controller().await;
    let id = c
        .create_volume(create_request("pvc-costs-uuid", 1 << 30))
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let ctx = c
        .controller_publish_volume(attach_request(&id, NODE, mount_cap("ext4")))
        .await
        .expect("publish")
        .into_inner()
        .publish_context;
    plug_disk(
        &costs.admin,
        &costs.vm,
        &costs.vm_name,
        &id,
        &ctx["diskUUID"],
    )
    .await;
    let (r, tally, _) = costs
        .measure(c.list_volumes(csi::ListVolumesRequest::default()))
        .await;
    let entries = r.expect("list").into_inner().entries;
    let published: Vec<_> = entries
        .iter()
        .flat_map(|e| e.status.as_ref().unwrap().published_node_ids.clone())
        .collect();
    assert_eq!(published, [NODE], "{entries:?}");
    // The associations' VMs tried, then every VM listed without its devices and read
    // 100 at a time (120 VMs: two batches) — memory follows a batch, not the inventory.
    assert!(
        tally
            .methods
            .iter()
            .filter(|m| *m == "RetrievePropertiesEx")
            .count()
            >= 4,
        "the associations' VMs tried, the VMs listed, then two batches of devices: {:?}",
        tally.methods
    );
    // A CreateVolume repeated by name answers without the volume's holders: it asks the
    // vCenter nothing about VMs (before: every VM's devices, twice).
    let (r, tally, _) = costs
        .measure(c.create_volume(create_request("pvc-costs-uuid", 1 << 30)))
        .await;
    assert_eq!(
        r.expect("create again")
            .into_inner()
            .volume
            .unwrap()
            .volume_id,
        id
    );
    assert!(
        !tally
            .methods
            .iter()
            .any(|m| m == "RetrieveVStorageObjectAssociations"),
        "a repeated create read the volume's holders: {:?}",
        tally.methods
    );
}
