//! VirtualMachineIPAddresses, as deckhouse/virtualization's `vmip` controller takes them
//! (its `vmipcondition` types and reasons): a finalizer; `Pending`; after the latency a
//! lease — `Auto` the next free address of the simulated range 10.66.20.0/24, `Static`
//! its `staticIP` when in the controller's range (10.66.0.0/16) and no other lease holds
//! it — and `Bound` (condition `Bound`, reason `Bound`); else `Pending` with `Bound`
//! False `VirtualMachineIPAddressIsOutOfTheValidRange` or
//! `VirtualMachineIPAddressLeaseAlreadyExists`. A VM naming it in
//! `spec.virtualMachineIPAddressName` attaches it: `Attached` (reason `Attached`),
//! `status.virtualMachineName`; without one, `Attached` False `VirtualMachineNotFound`.
//! Deleted, it goes after the latency with its lease.
//!
//! The VM side (the `vm` controller's `ipam.go`: `VirtualMachineIPAddressReady`) is
//! [`ip_address_ready`]. Not simulated: the VirtualMachineIPAddress the `vm` controller
//! makes for a VM that names none (such a VM gets an address of its own, as before).

use std::net::Ipv4Addr;

use kube::api::DynamicObject;
use kube::{Api, ResourceExt};
use overcast_cloud_dvp::api::VirtualMachine;
use serde_json::{json, Value};

use super::{add_finalizer, cond, due, forget, remove_finalizer, set_status, State, FINALIZER};

/// The simulated controller's range (its `virtualMachineCIDRs`).
fn in_range(ip: Ipv4Addr) -> bool {
    let [a, b, _, _] = ip.octets();
    (a, b) == (10, 66)
}

fn status_of(vmip: &DynamicObject) -> &Value {
    &vmip.data["status"]
}

pub(super) async fn reconcile_vmip(
    api: &Api<DynamicObject>,
    vmip: &DynamicObject,
    all: &[std::sync::Arc<DynamicObject>],
    vms: &[std::sync::Arc<VirtualMachine>],
    state: &State,
) -> anyhow::Result<()> {
    let name = vmip.name_any();
    let key = format!("vmip/{}", vmip.uid().unwrap_or_default());
    if vmip.metadata.deletion_timestamp.is_some() {
        if due(state, &key) {
            forget(state, &key);
            remove_finalizer(api, vmip).await?;
        }
        return Ok(());
    }
    if !vmip.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(api, vmip).await?;
        return Ok(());
    }
    let status = status_of(vmip);
    let mut address = status["address"].as_str().map(str::to_owned);
    let mut bound = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Bound").cloned());
    if address.is_none() {
        if !due(state, &key) {
            if status["phase"].is_null() {
                let pending = cond("Bound", false, "VirtualMachineIPAddressLeaseNotReady", "");
                set_status(
                    api,
                    &name,
                    json!({"phase": "Pending", "conditions": [pending]}),
                )
                .await?;
            }
            return Ok(());
        }
        forget(state, &key);
        let taken: Vec<&str> = all
            .iter()
            .filter(|o| o.uid() != vmip.uid())
            .filter_map(|o| status_of(o)["address"].as_str())
            .collect();
        let spec = &vmip.data["spec"];
        match spec["type"].as_str() {
            Some("Static") => {
                let ip = spec["staticIP"].as_str().unwrap_or_default();
                let parsed = ip.parse::<Ipv4Addr>().ok().filter(|a| in_range(*a));
                bound = Some(match parsed {
                    None => cond(
                        "Bound",
                        false,
                        "VirtualMachineIPAddressIsOutOfTheValidRange",
                        &format!("The requested address {ip} is out of the valid range"),
                    ),
                    Some(_) if taken.contains(&ip) => cond(
                        "Bound",
                        false,
                        "VirtualMachineIPAddressLeaseAlreadyExists",
                        &format!(
                            "VirtualMachineIPAddressLease for the address {ip} already exists"
                        ),
                    ),
                    Some(_) => {
                        address = Some(ip.to_owned());
                        cond("Bound", true, "Bound", "")
                    }
                });
            }
            _ => {
                let free = (1..=254u8)
                    .map(|n| format!("10.66.20.{n}"))
                    .find(|a| !taken.contains(&a.as_str()));
                bound = Some(match free {
                    Some(a) => {
                        address = Some(a);
                        cond("Bound", true, "Bound", "")
                    }
                    None => cond(
                        "Bound",
                        false,
                        "VirtualMachineIPAddressLeaseNotReady",
                        "no free address",
                    ),
                });
            }
        }
    }
    let user = vms.iter().find(|vm| {
        vm.metadata.deletion_timestamp.is_none()
            && vm.spec.virtual_machine_ip_address_name.as_deref() == Some(name.as_str())
    });
    let attached = match (&address, user) {
        (Some(_), Some(vm)) => cond("Attached", true, "Attached", &vm.name_any()),
        _ => cond("Attached", false, "VirtualMachineNotFound", ""),
    };
    let phase = match (&address, user) {
        (None, _) => "Pending",
        (Some(_), None) => "Bound",
        (Some(_), Some(_)) => "Attached",
    };
    let want = json!({
        "phase": phase,
        "address": address,
        "virtualMachineName": user.map(|vm| vm.name_any()),
        "conditions": [bound, attached],
    });
    let now = json!({
        "phase": status["phase"], "address": status["address"],
        "virtualMachineName": status["virtualMachineName"], "conditions": status["conditions"],
    });
    if now != want {
        set_status(api, &name, want).await?;
    }
    Ok(())
}

/// The VM's `VirtualMachineIPAddressReady` as `ipam.go` writes it, and the address, for
/// a VM that names its VirtualMachineIPAddress; `None` for one that names none.
pub(super) fn ip_address_ready(
    vm: &VirtualMachine,
    vmips: &[std::sync::Arc<DynamicObject>],
) -> Option<(Value, Option<String>)> {
    let wanted = vm.spec.virtual_machine_ip_address_name.as_deref()?;
    let found = vmips.iter().find(|o| o.name_any() == wanted);
    let vm_name = vm.name_any();
    Some(match found {
        None => (
            cond(
                "VirtualMachineIPAddressReady",
                false,
                "IPAddressNotReady",
                &format!(
                    "The requested ip address ({wanted}) for the virtual machine not found: waiting for the ip address"
                ),
            ),
            None,
        ),
        Some(ip) => {
            let status = status_of(ip);
            let holder = status["virtualMachineName"].as_str().unwrap_or_default();
            let address = status["address"].as_str().map(str::to_owned);
            if !holder.is_empty() && holder != vm_name {
                (
                    cond(
                        "VirtualMachineIPAddressReady",
                        false,
                        "IPAddressNotReady",
                        &format!(
                            "The requested ip address ({wanted}) attached to VirtualMachine '{holder}': waiting for the ip address"
                        ),
                    ),
                    None,
                )
            } else if address.is_some() && matches!(status["phase"].as_str(), Some("Bound" | "Attached")) {
                (cond("VirtualMachineIPAddressReady", true, "IPAddressReady", ""), address)
            } else {
                (
                    cond(
                        "VirtualMachineIPAddressReady",
                        false,
                        "IPAddressNotReady",
                        "Ip address not bound: waiting for the ip address",
                    ),
                    None,
                )
            }
        }
    })
}
