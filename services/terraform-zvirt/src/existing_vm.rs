//! `ovirt_existing_vm` (Overcast's, not the oVirt provider's): what the VM of a name has
//! now — its CPU topology, its boot disk's size and the size of a data disk of an alias —
//! so a layout can keep what a node has where the configuration says nothing.
//!
//! Why it exists: Deckhouse's zVirt releases made nodes differently where the instance
//! class is silent — `numCPUs` spread as sockets or as cores, a boot disk grown to 20 or
//! to 50 GiB when `rootDiskSizeGb` is left out, or not grown at all, an etcd disk of a
//! fixed 15 GiB or of `etcdDiskSizeGb` (10 by default). A layout that imposed one release's
//! defaults would replace or grow every node another release made on its first plan after
//! a switch. With this, ours keeps what exists and uses Deckhouse's current defaults for a
//! new VM.
//!
//! It only reads: one search by name (with the VM's disk attachments), then its boot disk
//! and the data disk of that alias when there is a VM. No VM of that name answers zeros.

use http::Method;
use overcast_cloud_zvirt::client::{boolean, members, number};
use overcast_cloud_zvirt::vms::search;

use super::{not_found, Cloud};
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome};
use crate::schema::{computed, id, n, optional, required, s, string, Block, Obj};

pub struct ExistingVm;

#[async_trait::async_trait]
impl DataSource<Cloud> for ExistingVm {
    fn schema(&self) -> Block {
        Block::new(
            "What the VM of a name has now (zeros when there is none).",
            vec![
                id("The VM's id, or the name when there is no VM of that name."),
                required("name", Type::String, "The VM's name."),
                optional(
                    "data_disk_alias",
                    Type::String,
                    "The alias of a data disk whose size to read too.",
                ),
                computed("exists", Type::Bool, "Whether a VM of that name exists."),
                computed("cpu_sockets", Type::Number, "Its CPU sockets (0: no VM)."),
                computed(
                    "cpu_cores",
                    Type::Number,
                    "Its cores per socket (0: no VM).",
                ),
                computed(
                    "cpu_threads",
                    Type::Number,
                    "Its threads per core (0: no VM).",
                ),
                computed(
                    "boot_disk_size",
                    Type::Number,
                    "Its bootable disk's size in bytes (0: no VM or no such disk).",
                ),
                computed(
                    "data_disk_size",
                    Type::Number,
                    "The size in bytes of the disk of `data_disk_alias` (0: no VM or no such disk).",
                ),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        for k in ["name", "data_disk_alias"] {
            if string(c, k) == Some("") {
                out.push(Diag::at(k, format!("{k} is empty"), ""));
            }
        }
        out
    }

    async fn read(&self, engine: &Cloud, config: &Obj) -> Outcome<Obj> {
        let name = string(config, "name").unwrap_or_default().to_owned();
        let vm = vm_named(engine, &name, "&follow=disk_attachments").await?;
        let mut out = config.clone();
        topology(&mut out, &name, vm.as_ref());
        let mut boot = 0;
        let mut data = 0;
        if let Some(vm) = &vm {
            let bootable = members(&vm["disk_attachments"], "disk_attachment")
                .find(|a| boolean(&a["bootable"]))
                .and_then(|a| a["disk"]["id"].as_str().or(a["id"].as_str()));
            if let Some(id) = bootable.filter(|id| overcast_cloud_zvirt::client::is_id(id)) {
                boot = size_of(engine, &format!("/disks/{id}")).await?;
            }
            if let Some(alias) = string(config, "data_disk_alias") {
                let found = engine
                    .json(
                        "disk_search",
                        Method::GET,
                        &format!("/disks?{}", search("alias", alias)),
                        None,
                    )
                    .await
                    .map_err(|e| Diag::cloud(&format!("look up disk {alias}"), e))?;
                data = members(&found, "disk")
                    .find(|d| d["alias"].as_str() == Some(alias))
                    .and_then(|d| number(&d["provisioned_size"]))
                    .unwrap_or(0);
            }
        }
        out.insert("boot_disk_size".into(), n(boot as i64));
        out.insert("data_disk_size".into(), n(data as i64));
        Ok(out)
    }
}

/// The VM named `name` (the search's `extra` query appended), `None` when there is none.
/// The engine's search matches patterns: the name is compared whole.
pub(super) async fn vm_named(
    engine: &Cloud,
    name: &str,
    extra: &str,
) -> Outcome<Option<serde_json::Value>> {
    let doc = engine
        .json(
            "vm_search",
            Method::GET,
            &format!("/vms?{}{extra}", search("name", name)),
            None,
        )
        .await
        .map_err(|e| Diag::cloud(&format!("look up VM {name}"), e))?;
    let vm = members(&doc, "vm")
        .find(|v| v["name"].as_str() == Some(name))
        .cloned();
    Ok(vm)
}

/// `id`, `exists` and the CPU topology of `vm` (zeros when there is none) into `out`.
pub(super) fn topology(out: &mut Obj, name: &str, vm: Option<&serde_json::Value>) {
    let topology = vm.map(|v| &v["cpu"]["topology"]);
    let count = |k: &str| n(topology.and_then(|t| number(&t[k])).unwrap_or(0) as i64);
    out.insert(
        "id".into(),
        s(vm.and_then(|v| v["id"].as_str()).unwrap_or(name)),
    );
    out.insert("exists".into(), Value::Bool(vm.is_some()));
    out.insert("cpu_sockets".into(), count("sockets"));
    out.insert("cpu_cores".into(), count("cores"));
    out.insert("cpu_threads".into(), count("threads"));
}

/// The provisioned size of the disk at `path` (0 when it is gone).
async fn size_of(engine: &Cloud, path: &str) -> Outcome<u64> {
    match engine.json("disk_get", Method::GET, path, None).await {
        Ok(d) => Ok(number(&d["provisioned_size"]).unwrap_or(0)),
        Err(e) if not_found(&e) => Ok(0),
        Err(e) => Err(Diag::cloud("read the boot disk", e)),
    }
}
