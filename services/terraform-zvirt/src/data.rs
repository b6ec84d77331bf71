//! The data sources.

use http::Method;
use overcast_cloud_zvirt::client::{boolean as engine_bool, members};

use super::{check_uuid, until, uuid_of, Cloud};
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome};
use crate::schema::{boolean, computed, id, optional, required, s, string, Block, Obj};
use overcast_cloud_zvirt::vms::search;

// --- ovirt_templates --------------------------------------------------------------

pub struct Templates;

/// Upstream's element: the template's id and description (its name is the search's).
fn template_type() -> Type {
    Type::Object(
        [
            ("id".into(), Type::String),
            ("description".into(), Type::String),
        ]
        .into(),
    )
}

#[async_trait::async_trait]
impl DataSource<Cloud> for Templates {
    fn schema(&self) -> Block {
        Block::new(
            "Templates of a name.",
            vec![
                id("The search's id."),
                required("name", Type::String, "The templates' name."),
                optional(
                    "fail_on_empty",
                    Type::Bool,
                    "Fail when no template has that name.",
                ),
                computed(
                    "templates",
                    Type::Set(Box::new(template_type())),
                    "The templates found.",
                ),
            ],
        )
    }

    async fn read(&self, engine: &Cloud, config: &Obj) -> Outcome<Obj> {
        let name = string(config, "name").unwrap_or_default().to_owned();
        let doc = engine
            .json(
                "template_search",
                Method::GET,
                &format!("/templates?{}", search("name", &name)),
                None,
            )
            .await
            .map_err(|e| Diag::cloud("list templates", e))?;
        let found: Vec<Value> = members(&doc, "template")
            .filter(|t| t["name"].as_str() == Some(name.as_str()))
            .map(|t| {
                Value::Map(
                    [
                        ("id".into(), s(t["id"].as_str().unwrap_or_default())),
                        (
                            "description".into(),
                            s(t["description"].as_str().unwrap_or_default()),
                        ),
                    ]
                    .into(),
                )
            })
            .collect();
        if found.is_empty() && boolean(config, "fail_on_empty") == Some(true) {
            return Err(Diag::at(
                "name",
                "No template found",
                format!("the engine has no template named {name:?}"),
            ));
        }
        let mut out = config.clone();
        // Upstream's id: the name searched.
        out.insert("id".into(), s(name.clone()));
        out.insert("templates".into(), Value::List(found));
        Ok(out)
    }
}

// --- ovirt_disk_attachments -------------------------------------------------------

pub struct DiskAttachments;

fn attachment_type() -> Type {
    Type::Object(
        [
            ("id".into(), Type::String),
            ("disk_id".into(), Type::String),
            ("disk_interface".into(), Type::String),
            ("bootable".into(), Type::Bool),
            ("active".into(), Type::Bool),
        ]
        .into(),
    )
}

#[async_trait::async_trait]
impl DataSource<Cloud> for DiskAttachments {
    fn schema(&self) -> Block {
        Block::new(
            "The disks attached to a VM.",
            vec![
                id("The VM's id."),
                required("vm_id", Type::String, "The VM."),
                computed(
                    "attachments",
                    Type::Set(Box::new(attachment_type())),
                    "Its disk attachments.",
                ),
            ],
        )
    }

    fn validate(&self, config: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_uuid(config, "vm_id", &mut out);
        out
    }

    async fn read(&self, engine: &Cloud, config: &Obj) -> Outcome<Obj> {
        let vm = uuid_of(config, "vm_id")?;
        let doc = engine
            .json(
                "diskattachment_list",
                Method::GET,
                &format!("/vms/{vm}/diskattachments"),
                None,
            )
            .await
            .map_err(|e| Diag::cloud("list the VM's disk attachments", e))?;
        let list = members(&doc, "disk_attachment")
            .map(|a| {
                let disk = a["disk"]["id"]
                    .as_str()
                    .or(a["id"].as_str())
                    .unwrap_or_default();
                Value::Map(
                    [
                        ("id".into(), s(format!("{vm}/{disk}"))),
                        ("disk_id".into(), s(disk)),
                        (
                            "disk_interface".into(),
                            s(a["interface"].as_str().unwrap_or_default()),
                        ),
                        ("bootable".into(), Value::Bool(engine_bool(&a["bootable"]))),
                        ("active".into(), Value::Bool(engine_bool(&a["active"]))),
                    ]
                    .into(),
                )
            })
            .collect();
        let mut out = config.clone();
        out.insert("id".into(), s(vm));
        out.insert("attachments".into(), Value::List(list));
        Ok(out)
    }
}

// --- ovirt_wait_for_ip ------------------------------------------------------------

/// Waits until the VM's guest agent reports a non-local address.
pub struct WaitForIp;

fn interface_type() -> Type {
    let set = || Type::Set(Box::new(Type::String));
    Type::Object(
        [
            ("name".into(), Type::String),
            ("ipv4_addresses".into(), set()),
            ("ipv6_addresses".into(), set()),
        ]
        .into(),
    )
}

/// The guest's interfaces with their non-local addresses (loopback, link-local and
/// unspecified are not reachable from outside the VM).
fn interfaces(doc: &serde_json::Value) -> Vec<Value> {
    use std::net::IpAddr;
    members(doc, "reported_device")
        .filter_map(|dev| {
            let (mut v4, mut v6) = (Vec::new(), Vec::new());
            for ip in members(&dev["ips"], "ip") {
                match ip["address"]
                    .as_str()
                    .and_then(|a| a.parse::<IpAddr>().ok())
                {
                    Some(IpAddr::V4(a))
                        if !(a.is_loopback() || a.is_link_local() || a.is_unspecified()) =>
                    {
                        v4.push(s(a.to_string()))
                    }
                    Some(IpAddr::V6(a))
                        if !(a.is_loopback()
                            || a.is_unspecified()
                            || a.is_unicast_link_local()) =>
                    {
                        v6.push(s(a.to_string()))
                    }
                    _ => {}
                }
            }
            (!v4.is_empty() || !v6.is_empty()).then(|| {
                Value::Map(
                    [
                        ("name".into(), s(dev["name"].as_str().unwrap_or_default())),
                        ("ipv4_addresses".into(), Value::List(v4)),
                        ("ipv6_addresses".into(), Value::List(v6)),
                    ]
                    .into(),
                )
            })
        })
        .collect()
}

#[async_trait::async_trait]
impl DataSource<Cloud> for WaitForIp {
    fn schema(&self) -> Block {
        Block::new(
            "Waits for a VM to report an address.",
            vec![
                id("The VM's id."),
                required("vm_id", Type::String, "The VM."),
                computed(
                    "interfaces",
                    Type::Set(Box::new(interface_type())),
                    "Its interfaces with addresses.",
                ),
            ],
        )
    }

    fn validate(&self, config: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_uuid(config, "vm_id", &mut out);
        out
    }

    async fn read(&self, engine: &Cloud, config: &Obj) -> Outcome<Obj> {
        let vm = uuid_of(config, "vm_id")?;
        let found = until(&format!("VM {vm} to report an address"), || async {
            let doc = engine
                .json(
                    "reporteddevice_list",
                    Method::GET,
                    &format!("/vms/{vm}/reporteddevices"),
                    None,
                )
                .await
                .map_err(|e| Diag::cloud("read the VM's reported devices", e))?;
            let found = interfaces(&doc);
            Ok((!found.is_empty()).then_some(found))
        })
        .await?;
        let mut out = config.clone();
        out.insert("id".into(), s(&vm));
        out.insert("interfaces".into(), Value::List(found));
        Ok(out)
    }
}
