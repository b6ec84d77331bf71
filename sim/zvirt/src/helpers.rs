//! Answers, faults, the JSON of the engine's objects and its search language.

use super::*;

pub(super) fn vm_json(vm: &SimVm, follow_devices: bool) -> Value {
    let topology = match &vm.shape["topology"] {
        Value::Null => json!({"sockets": vm.cpus.to_string(), "cores": "1", "threads": "1"}),
        t => {
            json!({"sockets": t["sockets"].to_string(), "cores": t["cores"].to_string(), "threads": t["threads"].to_string()})
        }
    };
    let mut v = json!({"href": format!("{API}/vms/{}", vm.id), "id": vm.id, "name": vm.name,
        "status": vm.status, "memory": vm.memory.to_string(),
        "type": vm.shape["type"].as_str().unwrap_or("server"),
        "cpu": {"architecture": "x86_64", "topology": topology},
        "cluster": {"href": format!("{API}/clusters/{}", vm.cluster), "id": vm.cluster},
        "link": [{"href": format!("{API}/vms/{}/reporteddevices", vm.id), "rel": "reporteddevices"},
                 {"href": format!("{API}/vms/{}/diskattachments", vm.id), "rel": "diskattachments"}]});
    if let Some(c) = vm.shape["comment"].as_str() {
        v["comment"] = json!(c);
    }
    if let Some(t) = vm.shape["template"].as_str() {
        v["template"] = json!({"href": format!("{API}/templates/{t}"), "id": t});
    }
    if !vm.shape["memory_policy"].is_null() {
        v["memory_policy"] = vm.shape["memory_policy"].clone();
    }
    if let Some(t) = &vm.instance_type {
        let id = instance_type_id(t);
        v["instance_type"] = json!({"href": format!("{API}/instancetypes/{id}"), "id": id});
    }
    if follow_devices {
        v["reported_devices"] = reported_devices(vm);
    }
    v
}

/// The guest agent's report: one NIC carrying every address (`{}` before it reports).
pub(super) fn reported_devices(vm: &SimVm) -> Value {
    if vm.ips.is_empty() {
        return json!({});
    }
    let ips: Vec<Value> = vm
        .ips
        .iter()
        .map(|ip| json!({"address": ip, "version": if ip.contains(':') {"v6"} else {"v4"}}))
        .collect();
    json!({"reported_device": [{
        "href": format!("{API}/vms/{}/reporteddevices/{}", vm.id, vm.id), "id": vm.id,
        "name": "eth0", "type": "network", "description": "guest reported data",
        "ips": {"ip": ips}, "mac": {"address": "56:6f:1a:2b:00:01"},
        "vm": {"href": format!("{API}/vms/{}", vm.id), "id": vm.id},
    }]})
}

/// The XML root of a successful answer: a collection's plural, an object's type, the
/// API root's `api`, an action's `action`.
pub(super) fn xml_root(method: &str, path: &str) -> String {
    let rest = path.strip_prefix(API).unwrap_or(path).trim_matches('/');
    if rest.is_empty() {
        return "api".into();
    }
    let parts: Vec<&str> = rest.split('/').collect();
    let collection = parts[(parts.len() - 1) / 2 * 2];
    let singular = match collection {
        "disks" => "disk",
        "vms" => "vm",
        "diskattachments" => "disk_attachment",
        "storagedomains" => "storage_domain",
        "clusters" => "cluster",
        "datacenters" => "data_center",
        "instancetypes" => "instance_type",
        "reporteddevices" => "reported_device",
        "nics" => "nic",
        "templates" => "template",
        other => other,
    };
    let action = parts.len() % 2 == 1
        && parts.len() > 1
        && matches!(parts[parts.len() - 1], "start" | "stop" | "shutdown");
    match (method, parts.len() % 2) {
        ("DELETE", _) => "action".into(),
        ("POST", _) if action => "action".into(),
        ("GET", 1) => format!("{singular}s"),
        _ => singular.into(),
    }
}

/// Each disk's backing file, by disk id (what plugging and unplugging a device needs while
/// the VMs are borrowed mutably).
pub(super) fn disk_files(st: &State) -> BTreeMap<String, PathBuf> {
    st.disks
        .values()
        .map(|d| (d.id.clone(), d.file.clone()))
        .collect()
}

pub(super) fn data_center_id(st: &State, name: &str) -> String {
    st.data_centers
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.id.clone())
        .unwrap_or_else(|| panic!("no data center {name}"))
}

pub(super) fn data_center_json(dc: &DataCenter) -> Value {
    json!({"href": format!("{API}/datacenters/{}", dc.id), "id": dc.id, "name": dc.name,
        "status": "up", "local": "false", "storage_format": "v5"})
}

/// A link to data center `id`, or the data center itself when the query follows it.
pub(super) fn data_center_ref(st: &State, id: &str, follow: bool) -> Value {
    match st.data_centers.iter().find(|d| d.id == id) {
        Some(dc) if follow => data_center_json(dc),
        _ => json!({"href": format!("{API}/datacenters/{id}"), "id": id}),
    }
}

/// Whether `?follow=` names `link` (a comma-separated list).
pub(super) fn follows(query: &str, link: &str) -> bool {
    form_value(query, "follow").is_some_and(|f| f.split(',').any(|l| l.trim() == link))
}

pub(super) fn not_found(id: &str) -> Answer {
    fault(404, &format!("Entity not found: {id}"))
}

/// A collection as the engine writes it: `{"disk": [...]}`, and `{}` when empty.
pub(super) fn collection(key: &str, items: Vec<Value>) -> Answer {
    if items.is_empty() {
        return answer(200, json!({}));
    }
    answer(200, json!({ key: items }))
}

pub(super) fn number(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

pub(super) fn form_value(form: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(form.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// Whether the engine's search matches `value` with `pattern` (see [`super::search`]).
pub(super) use super::search::wildcard as search_matches;

/// `alias="x"` or `alias=x` in a search expression: the value for `key`.
pub(super) fn search_term(search: &str, key: &str) -> Option<String> {
    let rest = search
        .trim()
        .strip_prefix(key)?
        .trim_start()
        .strip_prefix('=')?;
    let rest = rest.trim();
    Some(match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap_or("").to_owned(),
        None => rest.split_whitespace().next().unwrap_or("").to_owned(),
    })
}

/// Whether the search backend accepts `search`: its SyntaxChecker has `'` and `;` as
/// DISALLOWED_CHARS, and a value ending in a backslash escapes its own closing quote.
pub(super) fn search_is_valid(search: &str) -> bool {
    if search.contains(['\'', ';']) {
        return false;
    }
    let value = search.split_once('=').map(|(_, v)| v.trim()).unwrap_or("");
    let value = value.trim_end_matches('"');
    !value.ends_with('\\')
}

/// A VM status as the engine's messages spell it (`VMStatus` names: `PoweringUp`, …).
pub(super) fn vm_status_text(status: &str) -> String {
    status
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}
