//! The simulated VirtualMachine controller, for the VMs a provider makes (a VM
//! [`super::DvpSim::add_vm`] made is left as the test set it): as deckhouse/virtualization's
//! `vm` controller, a VM is `Pending` until it can start — its class Ready (`ClassReady`,
//! [`super::class`]), its block devices Ready
//! (`BlockDevicesReady`, reason `BlockDevicesNotReady`) and its provisioning Secret usable
//! (`ProvisioningReady`, reason `ProvisioningNotReady`, the messages of its
//! `provisioning.go`: a Secret not found, of an unexpected type, without a `userData`/
//! `userdata` key) — then `Starting`, then `Running` on a parent node with an address
//! from 10.66.10.0/24, each after the latency. A VM named in `Faults::degraded_vms` goes
//! `Degraded` instead of `Running`; one in `Faults::stopped_vms` is `Stopped` (as by hand)
//! until taken out, then starts again. A VM naming a VirtualMachineIPAddress also waits
//! for it (`VirtualMachineIPAddressReady`, [`super::vmip`]) and runs with its address. Deleted, it is `Terminating` for the latency, then its
//! finalizer goes. Nothing else is made: disks and Secrets are the provider's.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use overcast_cloud_dvp::api::{VirtualDisk, VirtualMachine};
use serde_json::json;

use super::class::class_ready;
use super::vmip::ip_address_ready;
use super::{add_finalizer, cond, due, forget, remove_finalizer, set_status, State, FINALIZER};

/// On a VM a test made through `add_vm`: its status is the test's, not this controller's.
pub const STATIC_ANNOTATION: &str = "overcast.dev/dvp-sim-static";
/// The cloud-init Secret type and the keys `provisioning.go` looks for.
const CLOUD_INIT_TYPE: &str = "provisioning.virtualization.deckhouse.io/cloud-init";
const USER_DATA_KEYS: [&str; 2] = ["userdata", "userData"];

pub(super) async fn reconcile_vm(
    api: &Api<VirtualMachine>,
    vm: &VirtualMachine,
    disks: &[std::sync::Arc<VirtualDisk>],
    vmips: &[std::sync::Arc<kube::api::DynamicObject>],
    state: &State,
) -> anyhow::Result<()> {
    if vm.annotations().contains_key(STATIC_ANNOTATION) {
        return Ok(());
    }
    let name = vm.name_any();
    let key = format!("vm/{}", vm.uid().unwrap_or_default());
    let phase = vm
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    if vm.metadata.deletion_timestamp.is_some() {
        if phase != "Terminating" {
            set_status(api, &name, json!({"phase": "Terminating"})).await?;
        } else if due(state, &key) {
            forget(state, &key);
            remove_finalizer(api, vm).await?;
        }
        return Ok(());
    }
    if !vm.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(api, vm).await?;
        return Ok(());
    }
    // Stopped by hand (its run policy lets it be): until taken out of the set.
    let stopped = state
        .faults
        .stopped_vms
        .lock()
        .expect("lock")
        .contains(&name);
    if stopped && !matches!(phase.as_str(), "Stopped" | "" | "Pending") {
        set_status(api, &name, json!({"phase": "Stopped", "ipAddress": null})).await?;
        return Ok(());
    }
    if matches!(phase.as_str(), "Running" | "Degraded") || (stopped && phase == "Stopped") {
        return Ok(());
    }
    let namespace = vm.namespace().unwrap_or_default();
    let refs: Vec<&str> = vm
        .spec
        .block_device_refs
        .iter()
        .filter(|r| r.kind == "VirtualDisk")
        .map(|r| r.name.as_str())
        .collect();
    let ready = refs
        .iter()
        .filter(|n| {
            disks.iter().any(|d| {
                d.name_any() == **n
                    && d.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready")
            })
        })
        .count();
    let devices = if ready == refs.len() {
        cond("BlockDevicesReady", true, "BlockDevicesReady", "")
    } else {
        cond(
            "BlockDevicesReady",
            false,
            "BlockDevicesNotReady",
            &format!(
                "Waiting for block devices to be ready: {ready}/{}.",
                refs.len()
            ),
        )
    };
    let secrets: Api<Secret> = Api::namespaced(api.clone().into_client(), &namespace);
    let provisioning = provisioning(vm, &secrets, &namespace).await?;
    let class = class_ready(
        &api.clone().into_client(),
        &vm.spec.virtual_machine_class_name,
    )
    .await?;
    // A VM naming its VirtualMachineIPAddress waits for it (ipam.go).
    let ipam = ip_address_ready(vm, vmips);
    let ip_ready = ipam.as_ref().is_none_or(|(c, _)| c["status"] == "True");
    let mut conditions = vec![class.clone(), devices.clone(), provisioning.clone()];
    if let Some((c, _)) = &ipam {
        conditions.push(c.clone());
    }
    let startable = ready == refs.len()
        && provisioning["status"] == "True"
        && class["status"] == "True"
        && ip_ready;
    if !startable {
        forget(state, &key);
        let status = json!({"phase": "Pending", "conditions": conditions});
        // Written when it says something new (the loop runs every few milliseconds).
        let now = vm
            .status
            .as_ref()
            .map(|s| json!({"phase": s.phase, "conditions": s.conditions}));
        if now.as_ref() != Some(&status) {
            set_status(api, &name, status).await?;
        }
        return Ok(());
    }
    if !due(state, &key) {
        return Ok(());
    }
    forget(state, &key);
    let next = match phase.as_str() {
        "Starting" => {
            let degraded = state
                .faults
                .degraded_vms
                .lock()
                .expect("lock")
                .contains(&name);
            if degraded {
                json!({"phase": "Degraded", "conditions": conditions})
            } else {
                let address = match ipam.and_then(|(_, a)| a) {
                    Some(a) => a,
                    None => {
                        let mut next = state.next_vm_address.lock().expect("lock");
                        *next = next.wrapping_add(1).max(1);
                        format!("10.66.10.{}", *next)
                    }
                };
                json!({
                    "phase": "Running", "ipAddress": address,
                    "nodeName": "parent-a", "conditions": conditions,
                })
            }
        }
        _ => json!({"phase": "Starting", "conditions": conditions}),
    };
    set_status(api, &name, next).await?;
    Ok(())
}

/// The `ProvisioningReady` condition as `provisioning.go` writes it.
async fn provisioning(
    vm: &VirtualMachine,
    secrets: &Api<Secret>,
    namespace: &str,
) -> anyhow::Result<serde_json::Value> {
    let Some(p) = vm.spec.provisioning.as_ref() else {
        return Ok(cond("ProvisioningReady", true, "ProvisioningReady", ""));
    };
    if p["type"] != "UserDataRef" {
        let ok = p["type"] == "UserData" && p["userData"].as_str().is_some_and(|u| !u.is_empty());
        return Ok(if ok {
            cond("ProvisioningReady", true, "ProvisioningReady", "")
        } else {
            cond(
                "ProvisioningReady",
                false,
                "ProvisioningNotReady",
                "Provisioning is defined but it is empty.",
            )
        });
    }
    let reference = &p["userDataRef"];
    if reference["kind"] != "Secret" {
        return Ok(cond(
            "ProvisioningReady",
            false,
            "ProvisioningNotReady",
            "spec.provisioning.userDataRef.kind must be \"Secret\".",
        ));
    }
    let secret_name = reference["name"].as_str().unwrap_or_default();
    let key = format!("{namespace}/{secret_name}");
    let Some(secret) = secrets.get_opt(secret_name).await? else {
        return Ok(cond(
            "ProvisioningReady",
            false,
            "ProvisioningNotReady",
            &format!("Secret {key} not found"),
        ));
    };
    let type_ = secret.type_.clone().unwrap_or_default();
    if type_ != CLOUD_INIT_TYPE {
        return Ok(cond(
            "ProvisioningReady",
            false,
            "ProvisioningNotReady",
            &format!("Unexpected secret type: {type_}"),
        ));
    }
    let data = secret.data.unwrap_or_default();
    if !USER_DATA_KEYS.iter().any(|k| data.contains_key(*k)) {
        return Ok(cond(
            "ProvisioningReady",
            false,
            "ProvisioningNotReady",
            &format!(
                "Invalid secret {key:?}: the secret should have one of data fields [userdata userData]: secret is not valid"
            ),
        ));
    }
    Ok(cond("ProvisioningReady", true, "ProvisioningReady", ""))
}
