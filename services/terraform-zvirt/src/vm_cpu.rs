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
//! It only reads (one search by name); no VM of that name answers zeros. Earlier layouts of
//! ours read it; today's read [`super::existing_vm`], which answers the same and more.

use super::existing_vm::{topology, vm_named};
use super::Cloud;
use crate::cty::Type;
use crate::resource::{DataSource, Diag, Outcome};
use crate::schema::{computed, id, required, string, Block, Obj};

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
        let vm = vm_named(engine, &name, "").await?;
        let mut out = config.clone();
        topology(&mut out, &name, vm.as_ref());
        Ok(out)
    }
}
