//! The simulated `vdsnapshot` controller: a `VirtualDiskSnapshot` goes as
//! deckhouse/virtualization's does at cf3a9e6c (`controller/vdsnapshot/internal/
//! life_cycle.go`, `virtual_disk_ready.go`, `deletion.go`; the facts and strings are in
//! docs/clouds/dvp.md, Snapshots):
//!
//! - phase `Pending`; a disk that is missing or not Ready fails it at once (`Failed`,
//!   VirtualDiskSnapshotReady=False `WaitingForTheVirtualDisk`; Failed is final);
//! - a disk attached to a running VM: frozen through the guest agent where the VM has
//!   one ([`crate::Faults::agent_vms`]); without one, `requiredConsistency` (default
//!   true) fails it (`PotentiallyInconsistent`), else it is cut unfrozen and Ready without
//!   `consistent`;
//! - `InProgress` (`Snapshotting`) and, after the latency, the disk's file copied (as a
//!   VolumeSnapshot of its PVC keeps its content), `consistent: true` where it was
//!   frozen or not in use, `Ready` with `volumeSnapshotName` `d8v-vds-<name>-<uid>`
//!   (the VolumeSnapshot object itself is not made: the kit's parent runs no CSI
//!   snapshot controller);
//! - deleted: `Terminating`, both conditions `Unknown`, the copy removed, the finalizer
//!   gone.
//!
//! Faults: snapshots kept `InProgress` ([`crate::Faults::held_snapshots`]) and ones whose
//! VolumeSnapshot reports an error ([`crate::Faults::failing_snapshots`]).

use std::path::PathBuf;
use std::sync::Arc;

use kube::api::DynamicObject;
use kube::{Api, ResourceExt};
use overcast_cloud_dvp::api::{VirtualDisk, VirtualMachine, Vmbda};
use overcast_cloud_local::copy;
use serde_json::json;

use super::{
    add_finalizer, cond, disk_file, due, forget, remove_finalizer, set_status, State, FINALIZER,
};

/// The file a snapshot's content is kept in (what its VolumeSnapshot holds).
pub(super) fn snapshot_file(state: &State, uid: &str) -> PathBuf {
    state.dir.join(format!("snapshot-{uid}.img"))
}

/// What the objects around a snapshot say: its disk, the VMs the disk is attached to.
pub(super) struct Around<'a> {
    pub disks: &'a [Arc<VirtualDisk>],
    pub vmbdas: &'a [Arc<Vmbda>],
    pub vms: &'a [Arc<VirtualMachine>],
}

pub(super) async fn reconcile_snapshot(
    api: &Api<DynamicObject>,
    vds: &DynamicObject,
    around: &Around<'_>,
    state: &State,
) -> anyhow::Result<()> {
    let name = vds.name_any();
    let uid = vds.uid().unwrap_or_default();
    let file = snapshot_file(state, &uid);
    let status = &vds.data["status"];
    let phase = status["phase"].as_str().unwrap_or_default();
    let disk_name = vds.data["spec"]["virtualDiskName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The CRD's default.
    let required = vds.data["spec"]["requiredConsistency"]
        .as_bool()
        .unwrap_or(true);
    let ready_cond = |ok: bool, reason: &str, message: &str| {
        cond("VirtualDiskSnapshotReady", ok, reason, message)
    };
    if vds.metadata.deletion_timestamp.is_some() {
        if phase != "Terminating" {
            set_status(
                api,
                &name,
                json!({"phase": "Terminating", "conditions": [
                    cond_unknown("VirtualDiskReady"), cond_unknown("VirtualDiskSnapshotReady")]}),
            )
            .await?;
            return Ok(());
        }
        let held = state
            .faults
            .held_deletions
            .lock()
            .expect("lock")
            .contains(&name);
        if !held && vds.finalizers().iter().any(|f| f == FINALIZER) {
            let _ = std::fs::remove_file(&file);
            forget(state, &uid);
            remove_finalizer(api, vds).await?;
        }
        return Ok(());
    }
    if !vds.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(api, vds).await?;
        return Ok(());
    }
    // Failed is final (life_cycle.go keeps the reason and never retries).
    if phase == "Failed" {
        return Ok(());
    }
    let disk = around.disks.iter().find(|d| d.name_any() == disk_name);
    let disk_ready = disk.is_some_and(|d| {
        d.metadata.deletion_timestamp.is_none()
            && d.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready")
    });
    let disk_cond = match disk {
        _ if disk_ready => cond("VirtualDiskReady", true, "VirtualDiskReady", ""),
        None => cond(
            "VirtualDiskReady",
            false,
            "VirtualDiskNotReadyForSnapshotting",
            &format!("The virtual disk {disk_name:?} was not found."),
        ),
        Some(d) => cond(
            "VirtualDiskReady",
            false,
            "VirtualDiskNotReadyForSnapshotting",
            &format!(
                "The virtual disk {disk_name:?} is in the {:?} phase: waiting for it to reach the Ready phase.",
                d.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
            ),
        ),
    };
    if phase == "Ready" {
        if !file.exists() {
            let vs = status["volumeSnapshotName"].as_str().unwrap_or_default();
            set_status(
                api,
                &name,
                json!({"phase": "Failed", "conditions": [disk_cond, ready_cond(false, "Lost",
                    &format!("The underlying VolumeSnapshot {vs:?} is no longer available."))]}),
            )
            .await?;
        }
        return Ok(());
    }
    let failed = |reason: &str, message: String| json!({"phase": "Failed", "conditions": [disk_cond.clone(), ready_cond(false, reason, &message)]});
    if phase.is_empty() || phase == "Pending" {
        let Some(disk) = disk.filter(|_| disk_ready) else {
            let why = if disk.is_none() {
                "does not exist"
            } else {
                "is not ready"
            };
            let message = format!("Cannot take a snapshot: the virtual disk {disk_name:?} {why}.");
            set_status(api, &name, failed("WaitingForTheVirtualDisk", message)).await?;
            return Ok(());
        };
        let vms = attached_vms(disk, around);
        if vms.len() > 1 {
            let message =
                format!("The virtual disk {disk_name:?} is attached to multiple virtual machines.");
            set_status(api, &name, failed("VirtualDiskSnapshotFailed", message)).await?;
            return Ok(());
        }
        if let Some(vm) = vms.first().filter(|vm| running(vm)) {
            let vm_name = vm.name_any();
            if !has_agent(state, &vm_name) && required {
                let message = format!(
                    "Cannot take a consistent snapshot of virtual disk {disk_name:?} attached to virtual machine {vm_name:?}: virtual machine agent is not ready and the virtual machine cannot be frozen."
                );
                set_status(api, &name, failed("PotentiallyInconsistent", message)).await?;
                return Ok(());
            }
        }
        set_status(
            api,
            &name,
            json!({"phase": "InProgress", "conditions": [disk_cond, ready_cond(false, "Snapshotting",
                "The snapshotting process has started.")]}),
        )
        .await?;
        return Ok(());
    }
    // InProgress: cut after the latency, unless held.
    let held = state
        .faults
        .held_snapshots
        .lock()
        .expect("lock")
        .contains(&name);
    if held || !due(state, &uid) {
        return Ok(());
    }
    forget(state, &uid);
    let vs = format!("d8v-vds-{name}-{uid}");
    let failing = state
        .faults
        .failing_snapshots
        .lock()
        .expect("lock")
        .contains(&name);
    if failing {
        let message = format!("VolumeSnapshot {vs:?} has an error: Failed to create snapshot: the storage refused it.");
        set_status(api, &name, failed("VirtualDiskSnapshotFailed", message)).await?;
        return Ok(());
    }
    let Some(disk) = disk.filter(|_| disk_ready) else {
        // Gone while being cut: the VolumeSnapshot of a missing PVC never becomes ready.
        return Ok(());
    };
    let vm = attached_vms(disk, around)
        .into_iter()
        .find(|vm| running(vm));
    // Consistent where nothing wrote meanwhile: no VM, a stopped one, or one frozen by
    // its agent; a running VM without an agent was let through only by
    // requiredConsistency false, and the snapshot says nothing of consistency.
    let consistent = vm.is_none_or(|vm| has_agent(state, &vm.name_any()));
    let source = disk_file(state, &disk.uid().unwrap_or_default());
    let from = std::fs::File::open(&source)?;
    let part = file.with_extension("part");
    let to = std::fs::File::create(&part)?;
    copy::copy(&from, &to)?;
    to.sync_all()?;
    std::fs::rename(&part, &file)?;
    let mut s = json!({
        "phase": "Ready", "volumeSnapshotName": vs,
        "conditions": [disk_cond, ready_cond(true, "VirtualDiskSnapshotReady", "")],
    });
    if consistent {
        s["consistent"] = json!(true);
    }
    set_status(api, &name, s).await?;
    Ok(())
}

fn cond_unknown(type_: &str) -> serde_json::Value {
    json!({"type": type_, "status": "Unknown", "reason": "Unknown", "message": "",
        "lastTransitionTime": "2026-11-23T00:00:00Z"})
}

/// The VMs the disk is attached to (the real controller reads the disk's
/// `status.attachedToVirtualMachines`; the simulator's attachments are its VMBDAs).
fn attached_vms<'a>(disk: &VirtualDisk, around: &'a Around<'_>) -> Vec<&'a Arc<VirtualMachine>> {
    let mut names: Vec<&str> = around
        .vmbdas
        .iter()
        .filter(|v| v.spec.block_device_ref.kind == "VirtualDisk")
        .filter(|v| v.spec.block_device_ref.name == disk.name_any())
        .filter(|v| v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Attached"))
        .map(|v| v.spec.virtual_machine_name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    around
        .vms
        .iter()
        .filter(|vm| names.contains(&vm.name_any().as_str()))
        .collect()
}

fn running(vm: &VirtualMachine) -> bool {
    vm.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Stopped")
}

fn has_agent(state: &State, vm: &str) -> bool {
    state.faults.agent_vms.lock().expect("lock").contains(vm)
}
