//! The ZvirtMachine controller, as capz leads a machine: once its Machine, its Cluster's
//! infrastructure and its bootstrap data are there, the VM named after the Machine is
//! found or cloned, finished and started (each reconcile takes the step the VM's state
//! calls for, so a restart adopts what exists), and `spec.providerID`, the addresses and
//! `ready` are set when its guest reports an address. At rest it asks the engine nothing.
//! A VM in a state no retry mends before its Node joined fails the machine
//! (`failureReason`); everything else is retried with backoff. Deleted, its VM is stopped,
//! every disk it was not made with is detached — a CSI volume removed with the VM would be
//! a user's data lost — and the VM removed; only then does the finalizer go, and never on
//! an engine error.

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event};
use kube::ResourceExt;
use overcast_cloud::{CloudError, Machines, Vm, VmPhase};
use serde_json::{json, Value};

use super::{vm_spec, Context};
use crate::conditions::{self, SEVERITY_ERROR, SEVERITY_INFO};
use crate::core;
use crate::crd::common::MachineAddress;
use crate::crd::zvirt::{
    ZvirtCluster, ZvirtMachine, ZvirtMachineInitialization, ZvirtMachineStatus, MACHINE_FINALIZER,
    REASON_VM_ERROR, REASON_VM_IN_FAILED_STATE, REASON_VM_NOT_READY,
    REASON_WAITING_FOR_BOOTSTRAP_SCRIPT, REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE,
    VM_READY_CONDITION,
};
use crate::{Error, Result};

/// The providerID scheme the zVirt ccm writes too, so CAPI matches the Node.
pub const PROVIDER_ID_PREFIX: &str = "zvirt://";

pub async fn reconcile(zm: Arc<ZvirtMachine>, ctx: Arc<Context>) -> Result<Action> {
    let ns = zm.namespace().unwrap_or_default();
    let api: Api<ZvirtMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let machine = core::owner_machine(&ctx.client, &zm.metadata).await?;
    if zm.metadata.deletion_timestamp.is_none() {
        // capz's order: nothing happens before the Machine owns it and its Cluster is
        // known, nor while either is paused.
        let Some(machine) = machine.as_ref() else {
            tracing::debug!(machine = %zm.name_any(), "no owner Machine yet");
            return Ok(Action::await_change());
        };
        let Some(cluster) = core::cluster_of(&ctx.client, machine).await? else {
            tracing::debug!(machine = %zm.name_any(), "the Machine's Cluster is not there");
            return Ok(Action::requeue(ctx.poll));
        };
        if core::paused(&cluster, &zm.metadata) {
            // Looked at again later (an API read, never an engine call): an unpaused
            // Cluster is not an event of this object's.
            tracing::info!(machine = %zm.name_any(), "paused: not reconciled");
            return Ok(Action::requeue(ctx.poll * 3));
        }
    } else if let Some(machine) = machine.as_ref() {
        if let Some(cluster) = core::cluster_of(&ctx.client, machine).await? {
            if core::paused(&cluster, &zm.metadata) {
                return Ok(Action::requeue(ctx.poll * 3));
            }
        }
    }
    let key = crate::retry::key_of(zm.as_ref());
    let outcome = finalizer(&api, MACHINE_FINALIZER, zm, |event| async {
        match event {
            Event::Apply(zm) => apply(&zm, machine.as_ref(), &ctx).await,
            Event::Cleanup(zm) => cleanup(&zm, &ctx).await,
        }
    })
    .await;
    ctx.retries.settle_finalized(&key, outcome)
}

pub fn error_policy(zm: Arc<ZvirtMachine>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retries.after_failure(zm.as_ref(), error)
}

/// What one pass decided, written to the object at its end.
struct Pass {
    status: ZvirtMachineStatus,
    vm_id: Option<String>,
}

async fn apply(zm: &ZvirtMachine, machine: Option<&Value>, ctx: &Context) -> Result<Action> {
    let Some(machine) = machine else {
        return Ok(Action::await_change());
    };
    let status = zm.status.clone().unwrap_or_default();
    if status.failure_reason.is_some() || status.failure_message.is_some() {
        tracing::info!(machine = %zm.name_any(), "failed: not reconciled (see its status)");
        return Ok(Action::await_change());
    }
    // At rest: provisioned with its providerID and address — as this provider leaves a
    // machine, or as capz did under either of its type versions (v1beta1 `ready`, v1beta2
    // `initialization.provisioned`, which wins where both are). One capz left is adopted
    // as it is, the engine not asked; only the flag it lacks is written.
    let provisioned = status
        .initialization
        .as_ref()
        .and_then(|i| i.provisioned)
        .unwrap_or(status.ready);
    let at_rest = provisioned
        && zm.spec.provider_id.is_some()
        && status.addresses.iter().any(|a| a.type_ == "InternalIP");
    if at_rest {
        if !status.ready || status.initialization.is_none() {
            let mut pass = Pass {
                status,
                vm_id: None,
            };
            mark_provisioned(&mut pass.status);
            write(zm, ctx, &pass).await?;
        }
        return Ok(Action::await_change());
    }
    let mut pass = Pass {
        status,
        vm_id: None,
    };
    let action = step(zm, machine, ctx, &mut pass).await;
    write(zm, ctx, &pass).await?;
    action
}

/// The step the VM's state calls for; the status to write is left in `pass`.
async fn step(
    zm: &ZvirtMachine,
    machine: &Value,
    ctx: &Context,
    pass: &mut Pass,
) -> Result<Action> {
    let now = now();
    let mark = |pass: &mut Pass,
                status: &str,
                reason: Option<&str>,
                severity: Option<&str>,
                message: Option<String>| {
        conditions::set(
            &mut pass.status.conditions,
            VM_READY_CONDITION,
            status,
            reason,
            severity,
            message,
            &now,
        );
    };
    let ns = zm.namespace().unwrap_or_default();
    let name = machine["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let cluster = core::cluster_of(&ctx.client, machine)
        .await?
        .unwrap_or(Value::Null);
    if !core::infrastructure_ready(&cluster) {
        mark(
            pass,
            "False",
            Some(REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE),
            Some(SEVERITY_INFO),
            None,
        );
        return Ok(Action::requeue(ctx.poll));
    }
    let Some(secret) = core::bootstrap_secret_name(machine).map(str::to_owned) else {
        mark(
            pass,
            "False",
            Some(REASON_WAITING_FOR_BOOTSTRAP_SCRIPT),
            Some(SEVERITY_INFO),
            None,
        );
        return Ok(Action::requeue(ctx.poll));
    };
    pass.status.addresses = vec![address("Hostname", &name), address("InternalDNS", &name)];

    let found = match ctx.vms.find(&name).await {
        Ok(vm) => vm,
        Err(e) => {
            mark(
                pass,
                "False",
                Some(REASON_VM_ERROR),
                Some(SEVERITY_ERROR),
                Some(format!("the engine: {e}")),
            );
            return Err(e.into());
        }
    };
    let vm = match found {
        Some(vm) => vm,
        None => {
            let cluster_id = engine_cluster(ctx, &ns, &cluster).await?;
            let data = core::bootstrap_data(&ctx.client, &ns, &secret).await?;
            let spec = vm_spec(&zm.spec, &cluster_id, &name);
            match ctx.vms.create(&name, &spec, &data).await {
                Ok(vm) => {
                    tracing::info!(machine = %name, vm = %vm.id, "VM cloned from template {}", spec.template);
                    vm
                }
                Err(e) => {
                    mark(
                        pass,
                        "False",
                        Some(REASON_VM_ERROR),
                        Some(SEVERITY_ERROR),
                        Some(format!(
                            "no VM can be found or created for the Machine: {e}"
                        )),
                    );
                    return Err(e.into());
                }
            }
        }
    };
    pass.vm_id = Some(vm.id.clone());

    match &vm.phase {
        VmPhase::Creating | VmPhase::Transitioning(_) => {
            let state = match &vm.phase {
                VmPhase::Transitioning(s) => s.as_str(),
                _ => "image_locked",
            };
            mark(
                pass,
                "Unknown",
                Some(REASON_VM_NOT_READY),
                None,
                Some(format!("VM is not ready, state is {state}")),
            );
            Ok(Action::requeue(ctx.poll))
        }
        VmPhase::Stopped => {
            let cluster_id = engine_cluster(ctx, &ns, &cluster).await?;
            let spec = vm_spec(&zm.spec, &cluster_id, &name);
            match ctx.vms.start(&vm, &spec, &[]).await {
                Ok(()) => {
                    tracing::info!(machine = %name, vm = %vm.id, "VM finished and started");
                    mark(
                        pass,
                        "Unknown",
                        Some(REASON_VM_NOT_READY),
                        None,
                        Some("VM is starting".into()),
                    );
                    Ok(Action::requeue(ctx.poll))
                }
                // A disk still locked, the VM changing state: passes.
                Err(CloudError::Conflict(m)) => {
                    mark(pass, "Unknown", Some(REASON_VM_NOT_READY), None, Some(m));
                    Ok(Action::requeue(ctx.poll))
                }
                Err(e) => {
                    mark(
                        pass,
                        "False",
                        Some(REASON_VM_ERROR),
                        Some(SEVERITY_ERROR),
                        Some(format!("cannot start VM {}: {e}", vm.id)),
                    );
                    Err(e.into())
                }
            }
        }
        VmPhase::Failed(state) => {
            // A machine whose Node has joined was working: the state may pass. One that
            // never joined is more likely misconfigured: failed, never retried.
            if !core::has_node(machine) {
                pass.status.failure_reason = Some("UpdateError".into());
                pass.status.failure_message = Some(format!("VM state {state:?} is unexpected"));
            }
            mark(
                pass,
                "False",
                Some(REASON_VM_IN_FAILED_STATE),
                Some(SEVERITY_ERROR),
                None,
            );
            Ok(Action::await_change())
        }
        VmPhase::Running => running(&vm, ctx, pass, &name, mark).await,
    }
}

async fn running(
    vm: &Vm,
    ctx: &Context,
    pass: &mut Pass,
    name: &str,
    mark: impl Fn(&mut Pass, &str, Option<&str>, Option<&str>, Option<String>),
) -> Result<Action> {
    let addresses = ctx.vms.addresses(vm).await?;
    // capz's choice: the last address the guest reports on eth0, IPv4 before IPv6.
    let Some(ip) = addresses
        .iter()
        .rev()
        .find(|a| a.is_ipv4())
        .or(addresses.last())
    else {
        mark(
            pass,
            "Unknown",
            Some(REASON_VM_NOT_READY),
            None,
            Some(format!(
                "waiting for VM {name}'s guest to report an address on eth0"
            )),
        );
        return Ok(Action::requeue(ctx.poll));
    };
    pass.status
        .addresses
        .push(address("InternalIP", &ip.to_string()));
    pass.status
        .addresses
        .push(address("ExternalIP", &ip.to_string()));
    mark_provisioned(&mut pass.status);
    mark(pass, "True", None, None, None);
    tracing::info!(machine = %name, vm = %vm.id, address = %ip, "machine ready");
    Ok(Action::await_change())
}

/// The engine cluster the machine's ZvirtCluster names.
async fn engine_cluster(ctx: &Context, ns: &str, cluster: &Value) -> Result<String> {
    let name = core::infrastructure_name(cluster)
        .ok_or_else(|| Error::Invalid("the Cluster names no infrastructure".into()))?;
    let api: Api<ZvirtCluster> = Api::namespaced(ctx.client.clone(), ns);
    let zc = api.get(name).await?;
    if zc.spec.id.is_empty() {
        return Err(Error::Invalid(format!(
            "ZvirtCluster {ns}/{name}: {}",
            crate::crd::zvirt::CLUSTER_ID_NOT_PROVIDED
        )));
    }
    Ok(zc.spec.id)
}

/// Writes what the pass found: the VM's id and providerID on the spec, the status.
async fn write(zm: &ZvirtMachine, ctx: &Context, pass: &Pass) -> Result<()> {
    let api: Api<ZvirtMachine> =
        Api::namespaced(ctx.client.clone(), &zm.namespace().unwrap_or_default());
    let name = zm.name_any();
    if let Some(id) = &pass.vm_id {
        let provider_id = format!("{PROVIDER_ID_PREFIX}{id}");
        if zm.spec.id != *id || zm.spec.provider_id.as_deref() != Some(provider_id.as_str()) {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"id": id, "providerID": provider_id}})),
            )
            .await?;
        }
    }
    if zm.status.as_ref() != Some(&pass.status) {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": pass.status})),
        )
        .await?;
    }
    Ok(())
}

async fn cleanup(zm: &ZvirtMachine, ctx: &Context) -> Result<Action> {
    // The VM removed is the one named after the Machine (what this provider made; the
    // owner reference keeps the name once the Machine is gone), never whatever `spec.id`
    // says: anyone who may edit the object could point that at another VM.
    let Some(name) = core::owner_machine_name(&zm.metadata) else {
        tracing::warn!(machine = %zm.name_any(), "no owner Machine: no VM is removed");
        return Ok(Action::await_change());
    };
    if let Some(vm) = ctx.vms.find(&name).await? {
        if !zm.spec.id.is_empty() && zm.spec.id != vm.id {
            tracing::warn!(machine = %zm.name_any(), spec_id = %zm.spec.id, vm = %vm.id, "spec.id names another VM than the Machine's: that one is left alone");
        }
        let removal = ctx.vms.remove(&vm).await?;
        tracing::info!(machine = %zm.name_any(), vm = %vm.id, detached = ?removal.detached, "VM removed, its volumes detached and kept");
    }
    Ok(Action::await_change())
}

/// Provisioned in both contracts' words: `ready` (v1beta1, what this CRD's contract
/// label has Cluster API read) and `initialization.provisioned` (v1beta2).
fn mark_provisioned(status: &mut ZvirtMachineStatus) {
    status.ready = true;
    status
        .initialization
        .get_or_insert_with(ZvirtMachineInitialization::default)
        .provisioned = Some(true);
}

fn address(kind: &str, value: &str) -> MachineAddress {
    MachineAddress {
        type_: kind.to_owned(),
        address: value.to_owned(),
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
