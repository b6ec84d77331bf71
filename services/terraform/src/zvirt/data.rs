//! The data sources.

use http::Method;
use overcast_cloud_zvirt::client::{boolean as engine_bool, members};

use super::{check_uuid, uuid_of, Cloud};
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome};
use crate::schema::{boolean, computed, id, optional, required, s, string, Block, Obj};
use overcast_cloud_zvirt::vms::search;

// --- ovirt_templates --------------------------------------------------------------

pub struct Templates;

fn template_type() -> Type {
    Type::Object([("id".into(), Type::String), ("name".into(), Type::String)].into())
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
                        ("name".into(), s(name.clone())),
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
        out.insert("id".into(), s(format!("templates:{name}")));
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
