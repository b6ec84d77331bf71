//! VirtualMachineClasses, as DVP ships and marks them: a test adds one, `Ready` (nodes
//! can run it) or `Pending`, as the `vmclass` controller writes its phase; `generic`,
//! which DVP makes itself, is made Ready at start when missing. A VM's `ClassReady`
//! condition is the vm controller's `class.go`: True with `VirtualMachineClassReady` once
//! its class is Ready, else False with `VirtualMachineClassNotReady` and the message
//! `VirtualMachineClassName "<name>" not found` or `… is not ready` — and the VM stays
//! `Pending` meanwhile ([`super::vm`]).

use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use overcast_cloud_dvp::api;
use serde_json::{json, Value};

use super::{cond, DvpSim};

/// The class DVP ships, which provider tests name.
pub const GENERIC: &str = "generic";

fn classes(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &api::virtual_machine_class())
}

/// Makes the class `name` (CPU type `Host`) if it is missing, and writes its phase.
pub(super) async fn ensure_class(client: &Client, name: &str, ready: bool) {
    let api = classes(client);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachineClass",
        "metadata": {"name": name},
        "spec": {"cpu": {"type": "Host"}},
    }))
    .expect("class");
    // Another test's simulator may have made it meanwhile: that one is as good.
    let _ = api.create(&PostParams::default(), &obj).await;
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": if ready { "Ready" } else { "Pending" }}})),
    )
    .await
    .unwrap_or_else(|e| panic!("the VirtualMachineClass {name}'s phase: {e}"));
}

impl DvpSim {
    /// Adds (or marks) the VirtualMachineClass `name`, Ready or Pending.
    pub async fn set_vm_class(&self, name: &str, ready: bool) {
        ensure_class(&self.client, name, ready).await;
    }

    /// Deletes the VirtualMachineClass `name` (cluster-wide: only a test's own).
    pub async fn delete_vm_class(&self, name: &str) {
        let _ = classes(&self.client)
            .delete(name, &Default::default())
            .await;
    }
}

/// The `ClassReady` condition of a VM naming the class `name`.
pub(super) async fn class_ready(client: &Client, name: &str) -> anyhow::Result<Value> {
    let class = classes(client).get_opt(name).await?;
    let phase = class
        .as_ref()
        .and_then(|c| c.data["status"]["phase"].as_str().map(str::to_owned));
    Ok(match (class, phase.as_deref()) {
        (Some(_), Some("Ready")) => cond("ClassReady", true, "VirtualMachineClassReady", ""),
        (None, _) => cond(
            "ClassReady",
            false,
            "VirtualMachineClassNotReady",
            &format!("VirtualMachineClassName {name:?} not found"),
        ),
        (Some(_), _) => cond(
            "ClassReady",
            false,
            "VirtualMachineClassNotReady",
            &format!("VirtualMachineClassName {name:?} is not ready"),
        ),
    })
}
