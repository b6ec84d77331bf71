//! The `ovirt` provider on the zVirt engine client, with the oVirt Terraform provider's
//! names and schemas (oVirt/terraform-provider-ovirt v2: `internal/ovirt/*.go`), so
//! layouts written for it run unchanged.
//!
//! Served: the provider block; `ovirt_vm`, `ovirt_vm_start`, `ovirt_nic`, `ovirt_disk`,
//! `ovirt_disk_attachment`, `ovirt_disk_resize`; the data sources `ovirt_templates`,
//! `ovirt_disk_attachments`, `ovirt_wait_for_ip` (and Overcast's `ovirt_existing_vm` and
//! `ovirt_vm_cpu_topology`, for the layouts' takeover); on `ovirt_vm` also the Deckhouse fork's
//! `initialization_dns` and `initialization_nic`. Missing (said in docs/STATUS.md): the oVirt
//! provider's other resources (tags, affinity groups, templates, …).

// The core's modules under the names this crate's files use.
pub(crate) use overcast_terraform_core::{cty, resource, schema};

use std::sync::Arc;

use overcast_cloud::CloudError;
use overcast_cloud_zvirt::{Config, Engine};

use crate::cty::{Type, Value};
use crate::resource::{Diag, Outcome};
use crate::schema::{boolean, optional, required, string, Block, Obj};
use overcast_terraform_core::server::Server;

mod data;
mod disks;
mod existing_vm;
pub mod migrate;
mod nic;
mod vm;
mod vm_cpu;
mod vm_start;

pub type Cloud = Arc<Engine>;

fn provider_block() -> Block {
    Block::new(
        "The oVirt / zVirt engine.",
        vec![
            required(
                "url",
                Type::String,
                "The engine's API URL (https://engine/ovirt-engine/api).",
            ),
            required(
                "username",
                Type::String,
                "The engine user (admin@internal).",
            ),
            required("password", Type::String, "The engine user's password.").sensitive(),
            optional(
                "tls_insecure",
                Type::Bool,
                "Skip verifying the engine's certificate.",
            ),
            optional(
                "tls_ca_bundle",
                Type::String,
                "PEM certificates the engine's is signed by.",
            ),
            optional(
                "tls_ca_files",
                Type::List(Box::new(Type::String)),
                "Files of PEM certificates the engine's is signed by.",
            ),
            optional(
                "tls_system",
                Type::Bool,
                "Also trust the system's CAs (always done here).",
            ),
        ],
    )
}

fn configure(c: &Obj) -> Outcome<Cloud> {
    let need = |k: &str| {
        string(c, k)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| {
                Diag::at(
                    k,
                    format!("{k} is required"),
                    "the provider block must set it",
                )
            })
    };
    let mut ca = string(c, "tls_ca_bundle")
        .map(str::to_owned)
        .unwrap_or_default();
    if let Some(Value::List(files)) = c.get("tls_ca_files") {
        for f in files {
            if let Value::String(path) = f {
                let pem = std::fs::read_to_string(path).map_err(|e| {
                    Diag::at("tls_ca_files", format!("Cannot read {path}"), e.to_string())
                })?;
                ca.push_str(&pem);
                ca.push('\n');
            }
        }
    }
    let config = Config {
        api_url: need("url")?,
        username: need("username")?,
        password: need("password")?,
        insecure: boolean(c, "tls_insecure").unwrap_or(false),
        ca_bundle: (!ca.trim().is_empty()).then_some(ca),
        unknown_keys: Vec::new(),
    };
    overcast_cloud_zvirt::connect(&config, None)
        .map_err(|e| Diag::at("url", "Cannot use the engine's URL", e.to_string()))
}

pub fn server() -> Server<Cloud> {
    Server::new(
        provider_block(),
        Box::new(|c| Box::pin(std::future::ready(configure(&c)))),
    )
    .resource("ovirt_vm", vm::Vm)
    .resource("ovirt_vm_start", vm_start::VmStart)
    .resource("ovirt_nic", nic::Nic)
    .resource("ovirt_disk", disks::Disk)
    .resource("ovirt_disk_attachment", disks::DiskAttachment)
    .resource("ovirt_disk_resize", disks::DiskResize)
    .data_source("ovirt_templates", data::Templates)
    .data_source("ovirt_disk_attachments", data::DiskAttachments)
    .data_source("ovirt_wait_for_ip", data::WaitForIp)
    .data_source("ovirt_vm_cpu_topology", vm_cpu::VmCpuTopology)
    .data_source("ovirt_existing_vm", existing_vm::ExistingVm)
}

pub(crate) use crate::resource::until;

/// Waits until `path` answers 404 (a removal the engine runs as a job).
pub(crate) async fn gone(
    engine: &Cloud,
    name: &'static str,
    path: &str,
    what: &str,
) -> Outcome<()> {
    until(what, || async {
        match engine.json(name, http::Method::GET, path, None).await {
            Err(e) if not_found(&e) => Ok(Some(())),
            Err(e @ CloudError::Unavailable(_)) => Err(Diag::cloud(&format!("see {what}"), e)),
            _ => Ok(None),
        }
    })
    .await
}

pub(crate) fn not_found(e: &CloudError) -> bool {
    matches!(e, CloudError::NotFound { .. })
}

/// An engine UUID (`validateUUID` upstream): checked before any call, and never put in
/// a path unchecked.
pub(crate) fn uuid_of(o: &Obj, name: &str) -> Outcome<String> {
    match string(o, name) {
        Some(v) if overcast_cloud_zvirt::client::is_id(v) => Ok(v.to_owned()),
        Some(v) => Err(Diag::at(
            name,
            format!("{name} is not an engine ID"),
            format!("{v:?} is not a UUID"),
        )),
        None => Err(Diag::at(name, format!("{name} is required"), "")),
    }
}

/// Config-time checks of an id attribute (unknown until apply: not checked yet).
pub(crate) fn check_uuid(o: &Obj, name: &str, out: &mut Vec<Diag>) {
    if let Some(v) = string(o, name) {
        if !overcast_cloud_zvirt::client::is_id(v) {
            out.push(Diag::at(
                name,
                format!("{name} is not an engine ID"),
                format!("{v:?} is not a UUID"),
            ));
        }
    }
}
