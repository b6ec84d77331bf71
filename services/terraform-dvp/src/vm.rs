//! `dvp_virtual_machine`: a VirtualMachine booting the disks it names, provisioned from
//! a cloud-init Secret, its address from a VirtualMachineIPAddress; done when `Running`
//! with an address. While it waits, a timeout says the first condition DVP left unmet
//! (its class, its disks, its provisioning, its address); `Degraded` fails at once.

use kube::api::DynamicObject;
use kube::Api;
use overcast_cloud_dvp::api;
use serde_json::json;

use super::disk::{labels_patch, map_patch};
use super::{
    check_name, create, delete, dynamic, get, labels_of, labels_type, labels_value, map_value,
    name_of, patch, strings_at, waiting_for, Cloud,
};
use crate::cty::{Type, Value};
use crate::resource::{until, Diag, Outcome, Resource};
use crate::schema::{computed, id, int, n, optional, required, s, string, Block, Obj};

const BOOTLOADERS: [&str; 3] = ["BIOS", "EFI", "EFIWithSecureBoot"];
const RUN_POLICIES: [&str; 4] = [
    "AlwaysOn",
    "AlwaysOff",
    "Manual",
    "AlwaysOnUnlessStoppedManually",
];
/// The VirtualMachine CRD's enum (deckhouse/virtualization `crds/virtualmachines.yaml`).
const MIGRATION_POLICIES: [&str; 4] = ["AlwaysSafe", "PreferSafe", "AlwaysForced", "PreferForced"];
/// What a new VM gets when the configuration says nothing: Deckhouse's current layouts'
/// defaults (`layouts/standard/master-node/variables.tf` @76036b98).
const NEW_RUN_POLICY: &str = "AlwaysOnUnlessStoppedManually";
const NEW_MIGRATION_POLICY: &str = "PreferForced";

pub struct VirtualMachine;

fn vm_api(parent: &Cloud) -> Api<DynamicObject> {
    parent.dynamic(&api::virtual_machine(), true)
}

fn strings(o: &Obj, name: &str) -> Vec<String> {
    match o.get(name) {
        Some(Value::List(l)) => l
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[async_trait::async_trait]
impl Resource<Cloud> for VirtualMachine {
    fn schema(&self) -> Block {
        let list = || Type::List(Box::new(Type::String));
        Block::new(
            "A VirtualMachine in the parent namespace.",
            vec![
                id("The VM's name."),
                // DVP applies a new shape at the VM's restart; Overcast replaces the VM
                // instead (in-place changes are missing, said in docs/STATUS.md).
                required("name", Type::String, "Its name.").force_new(),
                required("class_name", Type::String, "Its VirtualMachineClass.").force_new(),
                required("cores", Type::Number, "CPU cores.").force_new(),
                optional(
                    "core_fraction",
                    Type::String,
                    "The guaranteed share of each core (100%).",
                )
                .force_new()
                .default(s("100%")),
                required("memory", Type::String, "Memory, a quantity (8Gi).").force_new(),
                // Left out, DVP's default (BIOS), as Deckhouse's layouts leave it.
                optional(
                    "bootloader",
                    Type::String,
                    "BIOS, EFI or EFIWithSecureBoot (DVP's default, BIOS, when unset).",
                )
                .force_new()
                .kept(),
                // Both kept when left out, and changed in place (DVP takes either on
                // a running VM): Deckhouse's layouts wrote `AlwaysOn` and no migration
                // policy (≤ 1.74, `terraform-modules/master/main.tf` @6e01cad3), then
                // `AlwaysOnUnlessStoppedManually` and `PreferForced` (≥ 1.75,
                // `layouts/standard/master-node/variables.tf` @095e8372): a VM taken
                // over keeps its own. A new VM gets the latter, Deckhouse's current.
                optional(
                    "run_policy",
                    Type::String,
                    "DVP's run policy. Left out: the VM's own; AlwaysOnUnlessStoppedManually when new.",
                )
                .kept(),
                optional(
                    "live_migration_policy",
                    Type::String,
                    "DVP's live migration policy. Left out: the VM's own; PreferForced when new.",
                )
                .kept(),
                required(
                    "disks",
                    list(),
                    "The VirtualDisks it boots from, the first first.",
                )
                .force_new(),
                optional(
                    "ip_address_name",
                    Type::String,
                    "The VirtualMachineIPAddress it takes its address from.",
                )
                .force_new(),
                optional(
                    "cloud_init_secret",
                    Type::String,
                    "The cloud-init Secret it is provisioned from.",
                )
                .force_new(),
                optional(
                    "node_selector",
                    labels_type(),
                    "Labels of the parent nodes it may run on.",
                )
                .force_new()
                // None is an empty map (read below): so in a state written before it.
                .absent_as(Value::Map(Default::default())),
                optional(
                    "tolerations",
                    Type::List(Box::new(labels_type())),
                    "Taints of the parent nodes it tolerates (key, operator, value, effect, tolerationSeconds).",
                )
                .force_new(),
                optional(
                    "priority_class_name",
                    Type::String,
                    "The parent's PriorityClass for it.",
                )
                .force_new(),
                optional("labels", labels_type(), "Labels of the VM."),
                // Deckhouse's layouts annotate a VM with the instance class's
                // `additionalAnnotations` (beside their own `last_applied_*`); changed in
                // place, as labels. None in a state written before it: an empty map.
                optional("annotations", labels_type(), "Annotations of the VM.")
                    .absent_as(Value::Map(Default::default())),
                computed("phase", Type::String, "Pending, Starting, Running, …"),
                computed("ip_address", Type::String, "Its address."),
                computed("node_name", Type::String, "The parent node it runs on."),
            ],
        )
    }

    /// No node selector, null or an empty map (1c81bb4's layouts passed null, today's
    /// `{}`): the same VM, never replaced for it.
    fn same(&self, name: &str, prior: &Value, proposed: &Value) -> bool {
        let none = |v: &Value| match v {
            Value::Null => true,
            Value::Map(m) => m.is_empty(),
            _ => false,
        };
        name == "node_selector" && none(prior) && none(proposed)
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_name(c, "name", &mut out);
        check_name(c, "ip_address_name", &mut out);
        check_name(c, "cloud_init_secret", &mut out);
        if int(c, "cores").is_some_and(|v| v <= 0) {
            out.push(Diag::at("cores", "cores must be positive", ""));
        }
        if let Some(m) =
            string(c, "memory").filter(|m| super::disk::bytes(m).is_none_or(|b| b == 0))
        {
            out.push(Diag::at(
                "memory",
                "memory is not a quantity",
                format!("{m:?}: write it as 8Gi"),
            ));
        }
        for (attr, allowed) in [
            ("bootloader", &BOOTLOADERS[..]),
            ("run_policy", &RUN_POLICIES[..]),
            ("live_migration_policy", &MIGRATION_POLICIES[..]),
        ] {
            if let Some(v) = string(c, attr).filter(|v| !allowed.contains(v)) {
                out.push(Diag::at(
                    attr,
                    format!("Unknown {attr}"),
                    format!("{v:?} is not one of {}", allowed.join(", ")),
                ));
            }
        }
        if matches!(c.get("disks"), Some(Value::List(l)) if l.is_empty()) {
            out.push(Diag::at("disks", "A VM needs a disk to boot from", ""));
        }
        out
    }

    async fn create(&self, parent: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let name = name_of(p, "name").map_err(|d| (None, d))?;
        let refs: Vec<_> = strings(p, "disks")
            .into_iter()
            .map(|d| json!({"kind": "VirtualDisk", "name": d}))
            .collect();
        let mut spec = json!({
            "virtualMachineClassName": string(p, "class_name").unwrap_or_default(),
            "cpu": {"cores": int(p, "cores").unwrap_or(1), "coreFraction": string(p, "core_fraction").unwrap_or("100%")},
            "memory": {"size": string(p, "memory").unwrap_or_default()},
            "runPolicy": string(p, "run_policy").unwrap_or(NEW_RUN_POLICY),
            "liveMigrationPolicy": string(p, "live_migration_policy").unwrap_or(NEW_MIGRATION_POLICY),
            "osType": "Generic",
            "enableParavirtualization": true,
            "blockDeviceRefs": refs,
            // As Deckhouse's layouts make a node's VM.
            "terminationGracePeriodSeconds": 90,
            "disruptions": {"restartApprovalMode": "Automatic"},
        });
        if let Some(b) = string(p, "bootloader") {
            spec["bootloader"] = json!(b);
        }
        if let Some(Value::Map(m)) = p
            .get("node_selector")
            .filter(|m| **m != Value::Map(Default::default()))
        {
            spec["nodeSelector"] = json!(strings_of(m));
        }
        if let Some(Value::List(l)) = p.get("tolerations") {
            spec["tolerations"] = l
                .iter()
                .filter_map(|t| match t {
                    Value::Map(m) => Some(toleration(m)),
                    _ => None,
                })
                .collect();
        }
        if let Some(c) = string(p, "priority_class_name") {
            spec["priorityClassName"] = json!(c);
        }
        if let Some(ip) = string(p, "ip_address_name") {
            spec["virtualMachineIPAddressName"] = json!(ip);
        }
        if let Some(secret) = string(p, "cloud_init_secret") {
            spec["provisioning"] =
                json!({"type": "UserDataRef", "userDataRef": {"kind": "Secret", "name": secret}});
        }
        let mut obj =
            dynamic("VirtualMachine", &name, labels_of(p), spec).map_err(|d| (None, d))?;
        let annotations = strings_at(p, "annotations");
        if !annotations.is_empty() {
            obj.metadata.annotations = Some(
                annotations
                    .into_iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_owned())))
                    .collect(),
            );
        }
        create(parent, "vm_create", &vm_api(parent), "VirtualMachine", &obj)
            .await
            .map_err(|d| (None, d))?;
        let mut state = p.clone();
        state.insert("id".into(), s(&name));
        state.insert("run_policy".into(), spec_text(&obj, "runPolicy"));
        state.insert(
            "live_migration_policy".into(),
            spec_text(&obj, "liveMigrationPolicy"),
        );
        match running(parent, &name).await {
            Ok(vm) => {
                observe(&mut state, &vm);
                Ok(state)
            }
            Err(d) => {
                for k in ["phase", "ip_address", "node_name"] {
                    state.insert(k.into(), Value::Null);
                }
                Err((Some(state), d))
            }
        }
    }

    async fn read(&self, parent: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let name = name_of(state, "id")?;
        let Some(vm) = get(parent, "vm_get", &vm_api(parent), &name).await? else {
            return Ok(None);
        };
        let spec = &vm.data["spec"];
        let mut seen = Obj::from([("id".to_owned(), s(&name)), ("name".to_owned(), s(&name))]);
        observe(&mut seen, &vm);
        let text = |v: &serde_json::Value| v.as_str().map(s);
        for (attr, v) in [
            ("class_name", &spec["virtualMachineClassName"]),
            ("core_fraction", &spec["cpu"]["coreFraction"]),
            ("memory", &spec["memory"]["size"]),
            ("bootloader", &spec["bootloader"]),
            ("run_policy", &spec["runPolicy"]),
            ("live_migration_policy", &spec["liveMigrationPolicy"]),
            ("ip_address_name", &spec["virtualMachineIPAddressName"]),
            (
                "cloud_init_secret",
                &spec["provisioning"]["userDataRef"]["name"],
            ),
        ] {
            if let Some(v) = text(v) {
                seen.insert(attr.into(), v);
            }
        }
        // None is an empty map, never null: the layouts pass a map, and Terraform turns a
        // null map of the configuration into an empty one when it applies an
        // `ignore_changes` to another attribute (seen with 1.0.3), which would read as a
        // change of this replacing one.
        let empty = serde_json::Map::new();
        seen.insert(
            "node_selector".into(),
            text_map(spec["nodeSelector"].as_object().unwrap_or(&empty)),
        );
        if let Some(l) = spec["tolerations"].as_array().filter(|l| !l.is_empty()) {
            let l = l.iter().filter_map(|t| t.as_object().map(text_map));
            seen.insert("tolerations".into(), Value::List(l.collect()));
        }
        if let Some(c) = spec["priorityClassName"].as_str() {
            seen.insert("priority_class_name".into(), s(c));
        }
        if let Some(c) = spec["cpu"]["cores"].as_i64() {
            seen.insert("cores".into(), n(c));
        }
        if let Some(refs) = spec["blockDeviceRefs"].as_array() {
            let disks = refs
                .iter()
                .filter(|r| r["kind"] == "VirtualDisk")
                .filter_map(|r| r["name"].as_str().map(s))
                .collect();
            seen.insert("disks".into(), Value::List(disks));
        }
        seen.insert(
            "labels".into(),
            labels_value(state, vm.metadata.labels.as_ref()),
        );
        seen.insert(
            "annotations".into(),
            map_value(state, "annotations", vm.metadata.annotations.as_ref()),
        );
        Ok(Some(seen))
    }

    /// Labels and annotations, and the run and migration policies: DVP applies both to a
    /// running VM.
    async fn update(&self, parent: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let name = name_of(prior, "id")?;
        let mut body = json!({"metadata": {
            "labels": labels_patch(prior, planned),
            "annotations": map_patch(prior, planned, "annotations"),
        }});
        for (attr, field) in [
            ("run_policy", "runPolicy"),
            ("live_migration_policy", "liveMigrationPolicy"),
        ] {
            if let Some(v) = string(planned, attr).filter(|v| string(prior, attr) != Some(*v)) {
                body["spec"][field] = json!(v);
            }
        }
        patch(parent, "vm_update", &vm_api(parent), &name, body).await?;
        Ok(planned.clone())
    }

    async fn delete(&self, parent: &Cloud, state: &Obj) -> Outcome<()> {
        let name = name_of(state, "id")?;
        delete(parent, "vm_delete", "vm_get", &vm_api(parent), &name).await
    }
}

/// A string of the object's spec, as a value.
fn spec_text(obj: &DynamicObject, field: &str) -> Value {
    obj.data["spec"][field]
        .as_str()
        .map(s)
        .unwrap_or(Value::Null)
}

fn strings_of(
    m: &std::collections::BTreeMap<String, Value>,
) -> serde_json::Map<String, serde_json::Value> {
    m.iter()
        .filter_map(|(k, v)| match v {
            Value::String(v) => Some((k.clone(), json!(v))),
            _ => None,
        })
        .collect()
}

/// A toleration as Kubernetes takes it: `tolerationSeconds` a number (a map of strings
/// carries it as text, as Deckhouse's layouts pass it).
fn toleration(m: &std::collections::BTreeMap<String, Value>) -> serde_json::Value {
    let mut t = strings_of(m);
    if let Some(n) = t
        .get("tolerationSeconds")
        .and_then(|v| v.as_str())
        .and_then(|v| v.parse::<i64>().ok())
    {
        t.insert("tolerationSeconds".into(), json!(n));
    }
    serde_json::Value::Object(t)
}

/// An object of scalars as a map of strings (numbers and booleans as their text).
fn text_map(m: &serde_json::Map<String, serde_json::Value>) -> Value {
    Value::Map(
        m.iter()
            .filter_map(|(k, v)| match v {
                serde_json::Value::String(v) => Some((k.clone(), s(v))),
                serde_json::Value::Number(_) | serde_json::Value::Bool(_) => {
                    Some((k.clone(), s(v.to_string())))
                }
                _ => None,
            })
            .collect(),
    )
}

fn observe(state: &mut Obj, vm: &DynamicObject) {
    let st = &vm.data["status"];
    let text = |v: &serde_json::Value| v.as_str().map(s).unwrap_or(Value::Null);
    state.insert("phase".into(), text(&st["phase"]));
    state.insert("ip_address".into(), text(&st["ipAddress"]));
    state.insert("node_name".into(), text(&st["nodeName"]));
}

/// Waits until the VM runs with an address; a Degraded VM is an error, and a timeout
/// says what the VM still waits for.
async fn running(parent: &Cloud, name: &str) -> Outcome<DynamicObject> {
    let last = std::sync::Mutex::new(String::new());
    let out = until(&format!("VirtualMachine {name} Running"), || async {
        let Some(vm) = get(parent, "vm_get", &vm_api(parent), name).await? else {
            return Err(Diag::new(
                "The VM is gone",
                format!("VirtualMachine {name} was deleted while it started"),
            ));
        };
        *last.lock().unwrap_or_else(|e| e.into_inner()) = waiting_for(&vm);
        let st = &vm.data["status"];
        match st["phase"].as_str() {
            Some("Running") if st["ipAddress"].as_str().is_some_and(|a| !a.is_empty()) => {
                Ok(Some(vm))
            }
            Some("Degraded") => Err(Diag::new(
                format!("VirtualMachine {name} is Degraded"),
                waiting_for(&vm),
            )),
            _ => Ok(None),
        }
    })
    .await;
    let last = last.into_inner().unwrap_or_else(|e| e.into_inner());
    out.map_err(|d| Diag::new(d.summary, format!("{}; it waits for {last}", d.detail)))
}
