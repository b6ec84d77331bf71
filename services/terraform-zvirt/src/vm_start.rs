//! `ovirt_vm_start`: a VM started when made, stopped when destroyed.

use http::Method;
use serde_json::json;

use super::vm::wait_status;
use super::{check_uuid, not_found, uuid_of, Cloud};
use crate::cty::{Type, Value};
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{boolean, id, optional, required, s, string, Block, Obj};

// --- ovirt_vm_start ---------------------------------------------------------------

/// Starts a VM when made, stops it when destroyed.
pub struct VmStart;

/// The oVirt provider's default stop behaviour.
const DEFAULT_STOP: &str = "shutdown";

#[async_trait::async_trait]
impl Resource<Cloud> for VmStart {
    fn schema(&self) -> Block {
        Block::new(
            "Starts a VM when created and stops it when destroyed.",
            vec![
                id("The VM's id."),
                required("vm_id", Type::String, "The VM to start.").force_new(),
                optional(
                    "status",
                    Type::String,
                    "The VM's wanted status: only \"up\".",
                )
                .force_new()
                .default(s("up")),
                // Kept, not defaulted: Deckhouse's layouts wrote "stop" (2026) or left
                // the oVirt provider's default, "shutdown" (before); ours leave it
                // unset, so a state keeps what it holds (it is used only at destroy, and
                // upstream changes it in the state alone). A new start: "shutdown".
                optional(
                    "stop_behavior",
                    Type::String,
                    "\"stop\" powers the VM off; \"shutdown\" asks the guest (ACPI). Left out: what the state holds, \"shutdown\" when new.",
                )
                .kept(),
                optional("force_stop", Type::Bool, "Stop even while a backup runs.")
                    .default(Value::Bool(false)),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_uuid(c, "vm_id", &mut out);
        if let Some(st) = string(c, "status").filter(|st| *st != "up") {
            out.push(Diag::at(
                "status",
                "Invalid status",
                format!("{st:?}: the only status is \"up\""),
            ));
        }
        if let Some(b) = string(c, "stop_behavior").filter(|b| !["stop", "shutdown"].contains(b)) {
            out.push(Diag::at(
                "stop_behavior",
                "Invalid stop_behavior",
                format!("{b:?} is neither \"stop\" nor \"shutdown\""),
            ));
        }
        out
    }

    async fn create(&self, engine: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let vm = uuid_of(p, "vm_id").map_err(|d| (None, d))?;
        let mut state = p.clone();
        state.insert("id".into(), s(&vm));
        if string(p, "stop_behavior").is_none() {
            state.insert("stop_behavior".into(), s(DEFAULT_STOP));
        }
        let now = engine
            .json("vm_get", Method::GET, &format!("/vms/{vm}"), None)
            .await
            .map_err(|e| (None, Diag::cloud("read the VM", e)))?;
        // Already running (a re-run after an outage): nothing to start.
        if now["status"].as_str() != Some("up") {
            engine
                .json(
                    "vm_start",
                    Method::POST,
                    &format!("/vms/{vm}/start"),
                    Some(&json!({})),
                )
                .await
                .map_err(|e| (None, Diag::cloud("start the VM", e)))?;
        }
        match wait_status(engine, &vm, "up").await {
            Ok(Some(_)) => Ok(state),
            Ok(None) => Err((
                None,
                Diag::new(
                    "The VM is gone",
                    format!("VM {vm} was removed while it started"),
                ),
            )),
            Err(d) => Err((Some(state), d)),
        }
    }

    async fn read(&self, engine: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let vm = uuid_of(state, "id")?;
        match engine
            .json("vm_get", Method::GET, &format!("/vms/{vm}"), None)
            .await
        {
            Ok(v) => Ok(Some(Obj::from([
                ("id".into(), s(&vm)),
                ("vm_id".into(), s(&vm)),
                (
                    "status".into(),
                    s(v["status"].as_str().unwrap_or("unknown")),
                ),
            ]))),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(Diag::cloud("read the VM", e)),
        }
    }

    async fn delete(&self, engine: &Cloud, state: &Obj) -> Outcome<()> {
        let vm = uuid_of(state, "id")?;
        let action = match string(state, "stop_behavior") {
            Some("stop") => "stop",
            _ => "shutdown",
        };
        let force = boolean(state, "force_stop").unwrap_or(false);
        match engine
            .json(
                if action == "stop" {
                    "vm_stop"
                } else {
                    "vm_shutdown"
                },
                Method::POST,
                &format!("/vms/{vm}/{action}"),
                Some(&json!({"force": force.to_string()})),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(Diag::cloud(&format!("{action} the VM"), e)),
        }
        wait_status(engine, &vm, "down").await.map(drop)
    }
}
