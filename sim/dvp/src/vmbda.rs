//! The simulated attachment controller: a VMBDA waits for its VM and disk, then the
//! disk's file is bound to a loop device and linked where udev would link it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use kube::{Api, ResourceExt};
use overcast_cloud_dvp::api::{self, VirtualDisk, VirtualMachine, Vmbda};
use overcast_cloud_local::loopdev;
use serde_json::json;

use super::{
    add_finalizer, cond, disk_file, due, forget, remove_finalizer, set_status, Attached, State,
    FINALIZER,
};

/// The parent node of the Running VM a VMBDA attaches `vd` to: where a disk waiting for
/// its first consumer is provisioned.
pub(super) fn consumer_node(
    vd: &VirtualDisk,
    vmbdas: &[Arc<Vmbda>],
    vms: &[Arc<VirtualMachine>],
) -> Option<String> {
    vmbdas
        .iter()
        .filter(|v| v.spec.block_device_ref.name == vd.name_any())
        .find_map(|v| {
            let vm = vms
                .iter()
                .find(|vm| vm.name_any() == v.spec.virtual_machine_name)?;
            let status = vm.status.as_ref()?;
            (status.phase.as_deref() == Some("Running"))
                .then(|| status.node_name.clone())
                .flatten()
        })
}

pub(super) async fn reconcile_vmbda(
    api: &Api<Vmbda>,
    vms_api: &Api<VirtualMachine>,
    v: &Vmbda,
    vms: &[Arc<VirtualMachine>],
    disks: &[Arc<VirtualDisk>],
    state: &State,
) -> anyhow::Result<()> {
    let name = v.name_any();
    let vm = vms
        .iter()
        .find(|vm| vm.name_any() == v.spec.virtual_machine_name);
    let disk = disks
        .iter()
        .find(|d| d.name_any() == v.spec.block_device_ref.name);
    if v.metadata.deletion_timestamp.is_some() {
        if v.finalizers().iter().any(|f| f == FINALIZER) {
            // Forgotten only once let go of. DVP unplugs a disk whatever the guest does
            // with it; here the guest is this machine, so a device still mounted is let
            // go when it is unmounted (the kernel's autoclear), never left bound unknown.
            let bound = state
                .attached
                .lock()
                .expect("lock")
                .get(&name)
                .map(|a| (a.index, a.file.clone(), a.link.clone()));
            if let Some((index, file, link)) = bound {
                let _ = std::fs::remove_file(&link);
                match loopdev::detach(index, &file) {
                    Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => {
                        loopdev::release_when_unused(index, &file)?
                    }
                    other => drop(other?),
                }
                state.attached.lock().expect("lock").remove(&name);
            }
            if let Some(vm) = vm {
                set_vm_devices(vms_api, vm, &name, None).await?;
            }
            forget(state, &name);
            remove_finalizer(api, v).await?;
        }
        return Ok(());
    }
    if !v.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(api, v).await?;
        return Ok(());
    }
    let phase = v.status.as_ref().and_then(|s| s.phase.clone());
    let vm_running =
        vm.is_some_and(|vm| vm.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
    let disk_ready =
        disk.is_some_and(|d| d.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready"));
    if phase.as_deref() == Some("Attached") {
        return Ok(());
    }
    if !vm_running || !disk_ready {
        let vm_msg = match vm {
            None => format!("VirtualMachine {} not found", v.spec.virtual_machine_name),
            Some(_) if !vm_running => format!(
                "VirtualMachine {} is not running",
                v.spec.virtual_machine_name
            ),
            Some(_) => String::new(),
        };
        let disk_msg = if disk_ready {
            String::new()
        } else {
            format!("VirtualDisk {} is not ready", v.spec.block_device_ref.name)
        };
        let want = json!({
            "phase": "Pending", "virtualMachineName": v.spec.virtual_machine_name,
            "conditions": [
                cond("VirtualMachineReady", vm_running, if vm_running { "Ready" } else { "NotReady" }, &vm_msg),
                cond("BlockDeviceReady", disk_ready, if disk_ready { "Ready" } else { "NotReady" }, &disk_msg),
            ],
        });
        if v.status
            .as_ref()
            .map(|s| serde_json::to_value(s).unwrap_or_default())
            != Some(want.clone())
        {
            set_status(api, &name, want).await?;
        }
        forget(state, &name);
        return Ok(());
    }
    if phase.as_deref() != Some("InProgress") {
        set_status(api, &name, json!({
            "phase": "InProgress", "virtualMachineName": v.spec.virtual_machine_name,
            "conditions": [
                cond("VirtualMachineReady", true, "Ready", ""),
                cond("BlockDeviceReady", true, "Ready", ""),
                cond("Attached", false, "AttachmentRequestSent", "the hot-plug request was sent to the VirtualMachine"),
            ],
        }))
        .await?;
        return Ok(());
    }
    if state.faults.stuck_attachments.load(Ordering::Relaxed) || !due(state, &name) {
        return Ok(());
    }
    let (Some(vm), Some(disk)) = (vm, disk) else {
        return Ok(());
    };
    let uid = disk.uid().unwrap_or_default();
    let file = disk_file(state, &uid);
    let link = state.by_id.join(format!(
        "scsi-0QEMU_QEMU_HARDDISK_{}",
        api::disk_serial(&uid)
    ));
    // One device per attachment, also when the status writes below fail and the next
    // pass comes here again.
    let bound = state.attached.lock().expect("lock").contains_key(&name);
    if !bound {
        let index = loopdev::attach(&file, false, &format!("dvp-sim-{name}"))?;
        // Known before anything else can fail, so that a detach or the sim's end finds it.
        state.attached.lock().expect("lock").insert(
            name.clone(),
            Attached {
                index,
                file,
                link: link.clone(),
            },
        );
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(loopdev::device_path(index), &link)?;
    }
    let size = disk
        .status
        .as_ref()
        .and_then(|s| s.capacity.clone())
        .unwrap_or_default();
    set_vm_devices(vms_api, vm, &name, Some((&disk.name_any(), &size))).await?;
    // Taken as the status write is sent: the provider may see it before the write returns.
    state
        .attached_at
        .lock()
        .expect("lock")
        .insert(name.clone(), Instant::now());
    set_status(
        api,
        &name,
        json!({
            "phase": "Attached", "virtualMachineName": v.spec.virtual_machine_name,
            "conditions": [
                cond("VirtualMachineReady", true, "Ready", ""),
                cond("BlockDeviceReady", true, "Ready", ""),
                cond("Attached", true, "Attached", ""),
            ],
        }),
    )
    .await?;
    forget(state, &name);
    Ok(())
}

/// Adds (or, with `disk` None, removes) the hot-plugged disk of `vmbda` in the VM's
/// `status.blockDeviceRefs`.
async fn set_vm_devices(
    api: &Api<VirtualMachine>,
    vm: &VirtualMachine,
    vmbda: &str,
    disk: Option<(&str, &str)>,
) -> anyhow::Result<()> {
    let mut refs: Vec<serde_json::Value> = vm
        .status
        .as_ref()
        .map(|s| {
            s.block_device_refs
                .iter()
                .filter(|r| {
                    r.virtual_machine_block_device_attachment_name.as_deref() != Some(vmbda)
                })
                .map(|r| serde_json::to_value(r).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    if let Some((disk, size)) = disk {
        // The guest's name for it: sdb, sdc, … after the root disk.
        let target = format!("sd{}", char::from(b'b' + (refs.len() % 24) as u8));
        refs.push(json!({"kind": "VirtualDisk", "name": disk, "size": size, "target": target, "attached": true, "hotplugged": true, "virtualMachineBlockDeviceAttachmentName": vmbda}));
    }
    match set_status(api, &vm.name_any(), json!({"blockDeviceRefs": refs})).await {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
