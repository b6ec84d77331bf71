//! `ovirt_vm_cpu_topology` (Overcast's, not the oVirt provider's): the CPU topology of the
//! VM of a name, as the engine has it now, so a layout can keep an existing VM's own.
//!
//! Why it exists: Deckhouse's zVirt layouts changed how they spread `numCPUs` (its 2024
//! master: `numCPUs` sockets of one core; since: one socket of `numCPUs` cores), and the
//! oVirt provider replaces a VM whose topology changes. A layout that wrote one topology
//! would replace every master made with the other on its first plan after a switch. With
//! this, ours keeps what the VM has when it has the CPUs asked for, and uses Deckhouse's
//! current topology otherwise (a new VM, or a real change of `numCPUs`).
//!
//! It only reads (one search by name); no VM of that name answers zeros.

use http::Method;
use overcast_cloud_zvirt::client::{members, number};
use overcast_cloud_zvirt::vms::search;

use super::Cloud;
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome};
use crate::schema::{computed, id, n, required, s, string, Block, Obj};

pub struct VmCpuTopology;

#[async_trait::async_trait]
impl DataSource<Cloud> for VmCpuTopology {
    fn schema(&self) -> Block {
        Block::new(
            "The CPU topology of the VM of a name (zeros when there is none).",
            vec![
                id("The VM's id, or the name when there is no VM of that name."),
                required("name", Type::String, "The VM's name."),
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
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        match string(c, "name") {
            Some("") => vec![Diag::at("name", "name is empty", "")],
            _ => Vec::new(),
        }
    }

    async fn read(&self, engine: &Cloud, config: &Obj) -> Outcome<Obj> {
        let name = string(config, "name").unwrap_or_default().to_owned();
        let doc = engine
            .json(
                "vm_search",
                Method::GET,
                &format!("/vms?{}", search("name", &name)),
                None,
            )
            .await
            .map_err(|e| Diag::cloud(&format!("look up VM {name}"), e))?;
        // The engine's search matches patterns; the name is compared whole.
        let vm = members(&doc, "vm").find(|v| v["name"].as_str() == Some(name.as_str()));
        let mut out = config.clone();
        let topology = vm.map(|v| &v["cpu"]["topology"]);
        let count = |k: &str| n(topology.and_then(|t| number(&t[k])).unwrap_or(0) as i64);
        out.insert(
            "id".into(),
            s(vm.and_then(|v| v["id"].as_str()).unwrap_or(&name)),
        );
        out.insert("exists".into(), Value::Bool(vm.is_some()));
        out.insert("cpu_sockets".into(), count("sockets"));
        out.insert("cpu_cores".into(), count("cores"));
        out.insert("cpu_threads".into(), count("threads"));
        Ok(out)
    }
}
