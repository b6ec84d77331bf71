//! The DeckhouseMachine controller, as capdvp leads a machine: once its Machine, its
//! Cluster's infrastructure and its bootstrap data are there, the parent VM named after
//! the DeckhouseMachine is found or made with its boot disk, additional disks and
//! cloud-init Secret; while it is on its way every missing part is made again (capdvp
//! makes them once, so a create cut short leaves a VM that never starts); once Running,
//! `spec.providerID` (`dvp://<vm>`), the addresses, `ready` (contract v1beta1) and
//! `initialization.provisioned` (v1beta2) are set. The `VirtualMachineReady` condition
//! carries capdvp's reasons. At rest it asks the parent nothing. A Degraded VM whose Node
//! never joined fails the machine (`failureReason: CreateError`). Deleted, what CSI
//! attached is detached and kept, the VM and its own parts removed; only then does the
//! finalizer go, and never on a parent error.

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event};
use kube::ResourceExt;
use overcast_cloud::{Machines, Vm, VmPhase};
use overcast_cloud_dvp::machines::name_refusal;
use serde_json::{json, Value};

use super::{vm_spec, Context};
use crate::core;
use crate::crd::common::{ConditionStatus, MachineAddress, MetaCondition};
use crate::crd::dvp::{
    DeckhouseMachine, DeckhouseMachineStatus, MachineInitialization, MACHINE_FINALIZER,
    REASON_VM_ERROR, REASON_VM_IN_FAILED_STATE, REASON_VM_IN_STOPPED_STATE, REASON_VM_NOT_READY,
    REASON_WAITING_FOR_BOOTSTRAP_SCRIPT, REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE,
    VM_READY_CONDITION,
};
use crate::{Error, Result};

/// The providerID scheme the DVP ccm writes too, so CAPI matches the Node.
pub const PROVIDER_ID_PREFIX: &str = "dvp://";
/// capdvp's reason for a Running VM.
pub const REASON_VM_RUNNING: &str = "VMRunning";
/// Cluster API's `failureReason` for a machine no retry can make (`capierrors`).
pub const REASON_INVALID_CONFIGURATION: &str = "InvalidConfiguration";
/// The label Cluster API puts on a control plane's Machines.
const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

pub async fn reconcile(dm: Arc<DeckhouseMachine>, ctx: Arc<Context>) -> Result<Action> {
    let ns = dm.namespace().unwrap_or_default();
    let api: Api<DeckhouseMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let machine = core::owner_machine(&ctx.client, &dm.metadata).await?;
    let cluster = match machine.as_ref() {
        Some(m) => core::cluster_of(&ctx.client, m).await?,
        None => None,
    };
    if let Some(c) = &cluster {
        if core::paused(c, &dm.metadata) {
            tracing::info!(machine = %dm.name_any(), "paused: not reconciled");
            return Ok(Action::requeue(ctx.poll * 3));
        }
    }
    if dm.metadata.deletion_timestamp.is_none() && (machine.is_none() || cluster.is_none()) {
        // capdvp's order: nothing before the Machine owns it and its Cluster is known.
        return Ok(Action::requeue(ctx.poll));
    }
    let key = crate::retry::key_of(dm.as_ref());
    let outcome = finalizer(&api, MACHINE_FINALIZER, dm, |event| async {
        match event {
            Event::Apply(dm) => apply(&dm, machine.as_ref(), cluster.as_ref(), &ctx).await,
            Event::Cleanup(dm) => cleanup(&dm, &ctx).await,
        }
    })
    .await;
    ctx.retries.settle_finalized(&key, outcome)
}

pub fn error_policy(dm: Arc<DeckhouseMachine>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retries.after_failure(dm.as_ref(), error)
}

struct Pass {
    status: DeckhouseMachineStatus,
    provider_id: Option<String>,
    generation: Option<i64>,
    now: String,
}

impl Pass {
    /// Sets `VirtualMachineReady` (its transition time kept while its status holds).
    fn mark(&mut self, status: ConditionStatus, reason: &str, message: impl Into<String>) {
        let message = message.into();
        let conditions = &mut self.status.conditions;
        let since = conditions
            .iter()
            .find(|c| c.type_ == VM_READY_CONDITION && c.status == status)
            .map(|c| c.last_transition_time.clone());
        conditions.retain(|c| c.type_ != VM_READY_CONDITION);
        conditions.push(MetaCondition {
            type_: VM_READY_CONDITION.into(),
            status,
            observed_generation: self.generation,
            last_transition_time: since.unwrap_or_else(|| self.now.clone()),
            reason: reason.into(),
            message,
        });
    }

    fn provisioned(&mut self, yes: bool) {
        self.status.ready = yes;
        let init = self
            .status
            .initialization
            .get_or_insert_with(MachineInitialization::default);
        init.provisioned = Some(yes);
        init.infrastructure_provisioned = Some(yes);
    }
}

async fn apply(
    dm: &DeckhouseMachine,
    machine: Option<&Value>,
    cluster: Option<&Value>,
    ctx: &Context,
) -> Result<Action> {
    let (Some(machine), Some(cluster)) = (machine, cluster) else {
        return Ok(Action::requeue(ctx.poll));
    };
    let status = dm.status.clone().unwrap_or_default();
    if status.failure_reason.is_some() || status.failure_message.is_some() {
        tracing::info!(machine = %dm.name_any(), "failed: not reconciled (see its status)");
        return Ok(Action::await_change());
    }
    // At rest: provisioned with its providerID and address. capdvp's newer controller
    // writes only `initialization.provisioned` (and leaves a `ready` an older one wrote,
    // so the former wins); a machine it left is adopted as it is, the parent not asked,
    // and only the flags this provider also keeps are written.
    let init = status.initialization.clone().unwrap_or_default();
    let provisioned = init.provisioned.unwrap_or(status.ready);
    let at_rest = provisioned
        && dm.spec.provider_id.is_some()
        && status.addresses.iter().any(|a| a.type_ == "InternalIP");
    let mut pass = Pass {
        status,
        provider_id: None,
        generation: dm.metadata.generation,
        now: now(),
    };
    if at_rest {
        if !pass.status.ready || init.infrastructure_provisioned != Some(true) {
            pass.provisioned(true);
            write(dm, ctx, &pass).await?;
        }
        return Ok(Action::await_change());
    }
    let action = step(dm, machine, cluster, ctx, &mut pass).await;
    write(dm, ctx, &pass).await?;
    action
}

async fn step(
    dm: &DeckhouseMachine,
    machine: &Value,
    cluster: &Value,
    ctx: &Context,
    pass: &mut Pass,
) -> Result<Action> {
    if !core::infrastructure_ready(cluster) {
        pass.mark(
            ConditionStatus::False,
            REASON_WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            "Cluster infrastructure is not ready yet",
        );
        return Ok(Action::requeue(ctx.poll));
    }
    let Some(secret) = core::bootstrap_secret_name(machine).map(str::to_owned) else {
        pass.mark(
            ConditionStatus::False,
            REASON_WAITING_FOR_BOOTSTRAP_SCRIPT,
            "Bootstrap cloud-init secret is missing",
        );
        return Ok(Action::requeue(ctx.poll));
    };
    let ns = dm.namespace().unwrap_or_default();
    let name = dm.name_any();
    let control_plane = machine["metadata"]["labels"]
        .get(CONTROL_PLANE_LABEL)
        .is_some();
    let spec = vm_spec(&dm.spec.machine, control_plane)
        .map_err(|m| Error::Invalid(format!("DeckhouseMachine {ns}/{name}: {m}")))?;
    let vm_error = |pass: &mut Pass, e: &dyn std::fmt::Display| {
        pass.mark(
            ConditionStatus::False,
            REASON_VM_ERROR,
            format!("No VM can be found or created for Machine: {e}"),
        );
    };
    let found = match ctx.vms.find(&name).await {
        Ok(vm) => vm,
        Err(e) => {
            vm_error(pass, &e);
            return Err(e.into());
        }
    };
    let vm = match found {
        Some(vm) => vm,
        None if name_refusal(&name).is_some() => {
            // The name cannot be edited and the parent would refuse its disks forever.
            let why = name_refusal(&name).unwrap_or_default();
            pass.status.failure_reason = Some(REASON_INVALID_CONFIGURATION.into());
            pass.status.failure_message = Some(format!("DeckhouseMachine {name}: {why}"));
            vm_error(pass, &why);
            return Ok(Action::await_change());
        }
        None => {
            // capdvp's `validateVMResources`: a class or image the parent lacks is said
            // before anything is made, and retried (either may be made later).
            match ctx.vms.refusal(&spec).await {
                Ok(None) => {}
                Ok(Some(why)) => {
                    vm_error(pass, &format!("resource validation failed: {why}"));
                    return Err(Error::Invalid(format!("DeckhouseMachine {name}: {why}")));
                }
                Err(e) => {
                    vm_error(pass, &format!("resource validation failed: {e}"));
                    return Err(e.into());
                }
            }
            let data = core::bootstrap_data(&ctx.client, &ns, &secret).await?;
            match ctx.vms.create(&name, &spec, &data).await {
                Ok(vm) => {
                    tracing::info!(machine = %name, "VM made with its disks and cloud-init Secret");
                    vm
                }
                Err(e) => {
                    vm_error(pass, &e);
                    return Err(e.into());
                }
            }
        }
    };
    pass.status.addresses = vec![
        address("Hostname", &vm.name),
        address("InternalDNS", &vm.name),
    ];
    pass.provider_id = Some(format!("{PROVIDER_ID_PREFIX}{}", vm.name));
    match &vm.phase {
        VmPhase::Running => running(&vm, ctx, pass).await,
        VmPhase::Stopped => {
            // Its run policy lets it be stopped by hand: not forced on (as capdvp).
            pass.provisioned(false);
            pass.mark(
                ConditionStatus::False,
                REASON_VM_IN_STOPPED_STATE,
                "VM is in Stopped state; manual stop is allowed by runPolicy. Not forcing start",
            );
            Ok(Action::requeue(ctx.poll * 3))
        }
        VmPhase::Failed(state) => {
            if !core::has_node(machine) {
                pass.status.failure_reason = Some("CreateError".into());
                pass.status.failure_message = Some(format!(
                    "VM failed to start (vmClass: {}, memory: {}, CPU: {} cores): VM state {state:?} indicates failure",
                    spec.class, spec.memory, spec.cores
                ));
            }
            pass.mark(
                ConditionStatus::False,
                REASON_VM_IN_FAILED_STATE,
                format!("VM in degraded state: {state}"),
            );
            Ok(Action::await_change())
        }
        VmPhase::Creating | VmPhase::Transitioning(_) => {
            // Waiting for its parts (Pending): what a create cut short left out is made
            // now. Starting, migrating …: it has them.
            if vm.phase == VmPhase::Creating {
                let data = core::bootstrap_data(&ctx.client, &ns, &secret).await?;
                if let Err(e) = ctx.vms.start(&vm, &spec, &data).await {
                    vm_error(pass, &e);
                    return Err(e.into());
                }
            }
            let state = match &vm.phase {
                VmPhase::Transitioning(s) => s.as_str(),
                _ => "Pending",
            };
            pass.provisioned(false);
            // capdvp's message, and what the parent says the VM waits for.
            let message = match &vm.waiting_for {
                Some(why) => format!("VM is not ready, state is {state}: {why}"),
                None => format!("VM is not ready, state is {state}"),
            };
            pass.mark(ConditionStatus::Unknown, REASON_VM_NOT_READY, message);
            Ok(Action::requeue(ctx.poll))
        }
    }
}

async fn running(vm: &Vm, ctx: &Context, pass: &mut Pass) -> Result<Action> {
    let ips = ctx.vms.addresses(vm).await?;
    let Some(ip) = ips.first() else {
        pass.mark(
            ConditionStatus::Unknown,
            REASON_VM_NOT_READY,
            "VM is running and has no address yet",
        );
        return Ok(Action::requeue(ctx.poll));
    };
    pass.status
        .addresses
        .push(address("InternalIP", &ip.to_string()));
    pass.status
        .addresses
        .push(address("ExternalIP", &ip.to_string()));
    pass.provisioned(true);
    pass.mark(
        ConditionStatus::True,
        REASON_VM_RUNNING,
        "VM is running and ready",
    );
    tracing::info!(machine = %vm.name, address = %ip, "machine ready");
    Ok(Action::await_change())
}

async fn write(dm: &DeckhouseMachine, ctx: &Context, pass: &Pass) -> Result<()> {
    let api: Api<DeckhouseMachine> =
        Api::namespaced(ctx.client.clone(), &dm.namespace().unwrap_or_default());
    let name = dm.name_any();
    if let Some(id) = &pass.provider_id {
        if dm.spec.provider_id.as_deref() != Some(id.as_str()) {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": id}})),
            )
            .await?;
        }
    }
    if dm.status.as_ref() != Some(&pass.status) {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": pass.status})),
        )
        .await?;
    }
    Ok(())
}

/// The VM removed is the one named after this DeckhouseMachine (what capdvp made; a name
/// cannot be edited), never one `spec.providerID` names, and only if it is this
/// cluster's (`ParentVms::remove` looks: another cluster's VM of the name is kept, and
/// this machine, which never had it, goes).
async fn cleanup(dm: &DeckhouseMachine, ctx: &Context) -> Result<Action> {
    let name = dm.name_any();
    let vm = Vm {
        id: name.clone(),
        name: name.clone(),
        phase: VmPhase::Stopped,
        waiting_for: None,
    };
    // Called even when the VM is gone: its own disks and Secret may be left over from
    // a removal that did not finish.
    let removal = ctx.vms.remove(&vm).await?;
    tracing::info!(machine = %name, detached = ?removal.detached, "removed: its VM and parts, if it had any (volumes detached and kept)");
    Ok(Action::await_change())
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
