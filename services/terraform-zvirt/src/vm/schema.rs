//! `ovirt_vm`'s schema: upstream terraform-provider-ovirt's attributes (2.2.x) and the
//! one Deckhouse's fork adds, with which of them replace the VM.

use crate::cty::Type;
use crate::schema::{computed, id, optional, required, Block};

pub(super) fn schema() -> Block {
    let int = || Type::Number;
    Block::new(
        "A virtual machine made from a template.",
        vec![
            id("oVirt ID of this VM."),
            // Renamed and re-commented in place (the engine's UpdateVm); the rest of
            // a VM's shape replaces it (its memory, say, waits for a restart).
            required("name", Type::String, "The VM's name."),
            // Kept when left out: upstream's Read writes the engine's comment ("")
            // into its state, which must plan no change here.
            optional("comment", Type::String, "A comment on the VM.").kept(),
            required("cluster_id", Type::String, "The cluster to make the VM in.").force_new(),
            required(
                "template_id",
                Type::String,
                "The template the VM is made from.",
            )
            .force_new(),
            computed(
                "effective_template_id",
                Type::String,
                "The template the engine says the VM is of (the blank one when cloned).",
            ),
            computed(
                "status",
                Type::String,
                "The VM's status (down, up, image_locked, …).",
            ),
            optional("cpu_mode", Type::String, "The CPU mode.").force_new(),
            optional("cpu_cores", int(), "CPU cores per socket.").force_new(),
            optional("cpu_threads", int(), "Threads per core.").force_new(),
            optional("cpu_sockets", int(), "CPU sockets.").force_new(),
            optional("os_type", Type::String, "The operating system type.").force_new(),
            optional(
                "vm_type",
                Type::String,
                "desktop, server or high_performance.",
            )
            .force_new(),
            optional(
                "placement_policy_affinity",
                Type::String,
                "migratable, user_migratable or pinned.",
            )
            .force_new(),
            optional(
                "placement_policy_host_ids",
                Type::Set(Box::new(Type::String)),
                "Hosts to pin the VM to.",
            )
            .force_new(),
            optional(
                "initialization_custom_script",
                Type::String,
                "cloud-init user data.",
            )
            .force_new(),
            optional(
                "initialization_hostname",
                Type::String,
                "The hostname cloud-init sets.",
            )
            .force_new(),
            optional("memory", int(), "Memory in bytes.").force_new(),
            optional(
                "maximum_memory",
                int(),
                "The memory policy's maximum, in bytes.",
            )
            .force_new(),
            optional(
                "memory_ballooning",
                Type::Bool,
                "Memory ballooning on or off.",
            )
            .force_new(),
            optional(
                "serial_console",
                Type::Bool,
                "The serial console on or off.",
            )
            .force_new(),
            optional("soundcard_enabled", Type::Bool, "The sound card on or off.").force_new(),
            optional(
                "instance_type_id",
                Type::String,
                "An instance type overriding the hardware.",
            )
            .force_new(),
            optional(
                "clone",
                Type::Bool,
                "Copy the template's disks instead of layering on them.",
            )
            .force_new(),
            optional("huge_pages", int(), "Huge page size (2048 or 1048576).").force_new(),
            // Deckhouse's layouts set these (its fork of the oVirt provider).
            // Kept when left out: Deckhouse's layouts write "" (no custom network),
            // older ones nothing; create-only, as in its fork.
            optional(
                "initialization_dns",
                Type::String,
                "DNS servers cloud-init sets, space-separated.",
            )
            .force_new()
            .kept(),
        ],
    )
    // Upstream's; modelled so that a state holding one keeps it (not dropped on the
    // first refresh) and a configuration giving one is read.
    .with_nested(
        "template_disk_attachment_override",
        Block::new(
            "How one of the template's disks is copied for the VM (with clone).",
            vec![
                required("disk_id", Type::String, "The template's disk."),
                optional("format", Type::String, "raw or cow."),
                optional("provisioning", Type::String, "sparse or non-sparse."),
                optional(
                    "storage_domain_id",
                    Type::String,
                    "The storage domain the copy goes to.",
                ),
            ],
        ),
        true,
    )
    .with_nested(
        "initialization_nic",
        Block::new(
            "A NIC's static address cloud-init sets.",
            vec![required(
                "name",
                Type::String,
                "The guest's interface (eth0).",
            )],
        )
        .with_nested("ipv4", address_block("Its IPv4 address."), true)
        .with_nested("ipv6", address_block("Its IPv6 address (optional)."), true),
        true,
    )
}

fn address_block(description: &'static str) -> Block {
    Block::new(
        description,
        vec![
            optional("address", Type::String, "The address."),
            optional("netmask", Type::String, "The netmask."),
            optional("gateway", Type::String, "The gateway."),
        ],
    )
}
