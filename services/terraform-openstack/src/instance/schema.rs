//! `openstack_compute_instance_v2`'s schema: terraform-provider-openstack 1.54.1's
//! attributes and blocks (`resource_openstack_compute_instance_v2.go`), with which of them
//! replace the server.

use crate::common::{region, with_timeouts};
use crate::cty::{Type, Value};
use crate::schema::{computed, id, optional, required, s, Block, Nesting};

pub(super) fn schema() -> Block {
    let strings = || Type::List(Box::new(Type::String));
    let set = || Type::Set(Box::new(Type::String));
    let attrs = vec![
        id("The server's id."),
        region(),
        required("name", Type::String, "Its name (changed in place)."),
        optional("image_id", Type::String, "The image it boots.").kept(),
        optional("image_name", Type::String, "The image it boots, by name.").kept(),
        optional(
            "flavor_id",
            Type::String,
            "Its flavor (a change resizes it).",
        )
        .kept(),
        optional("flavor_name", Type::String, "Its flavor, by name.").kept(),
        // Deprecated upstream and never set.
        optional("floating_ip", Type::String, "Unused."),
        // The state holds the SHA-1 of the text (upstream's StateFunc); read once, at
        // first boot.
        optional("user_data", Type::String, "cloud-init's user data.").force_new(),
        optional("security_groups", set(), "Its security groups, by name.").kept(),
        optional(
            "availability_zone_hints",
            Type::String,
            "An availability zone hint.",
        )
        .force_new(),
        optional("availability_zone", Type::String, "Its availability zone.")
            .force_new()
            .kept(),
        optional("network_mode", Type::String, "auto or none.").force_new(),
        // Optional and computed, and read as the empty map where the state holds none:
        // Terraform 1.0.3 hands a null map of the configuration over as `{}` once an
        // `ignore_changes` applies to the resource (every layout's server has one), 1.11
        // as null — a state written either way plans no change with both. Left out, it
        // keeps what the server has.
        optional(
            "metadata",
            Type::Map(Box::new(Type::String)),
            "Its metadata (changed in place).",
        )
        .kept(),
        optional("config_drive", Type::Bool, "A config drive.").force_new(),
        optional("admin_pass", Type::String, "Its administrator password.").sensitive(),
        optional("access_ip_v4", Type::String, "Its IPv4 access address.").kept(),
        optional("access_ip_v6", Type::String, "Its IPv6 access address.").kept(),
        optional("key_pair", Type::String, "Its key pair.").force_new(),
        optional(
            "stop_before_destroy",
            Type::Bool,
            "Stop it before it is deleted.",
        )
        .default(Value::Bool(false)),
        optional("force_delete", Type::Bool, "Delete it forcibly.").default(Value::Bool(false)),
        computed(
            "all_metadata",
            Type::Map(Box::new(Type::String)),
            "Its metadata as Nova has it.",
        ),
        optional(
            "power_state",
            Type::String,
            "active, shutoff or shelved_offloaded.",
        )
        .default(s("active")),
        optional("tags", set(), "Its tags."),
        computed("all_tags", set(), "Every tag it has."),
        computed("created", Type::String, "When it was made."),
        computed("updated", Type::String, "When it changed."),
    ];
    let network = Block::new(
        "A network it is on (by port, network id or name).",
        vec![
            optional("uuid", Type::String, "The network's id.")
                .force_new()
                .kept(),
            optional("name", Type::String, "The network's name.")
                .force_new()
                .kept(),
            optional("port", Type::String, "A port of it.")
                .force_new()
                .kept(),
            optional("fixed_ip_v4", Type::String, "Its IPv4 address there.")
                .force_new()
                .kept(),
            optional("fixed_ip_v6", Type::String, "Its IPv6 address there.")
                .force_new()
                .kept(),
            optional("floating_ip", Type::String, "Unused.").kept(),
            computed("mac", Type::String, "Its MAC there."),
            optional(
                "access_network",
                Type::Bool,
                "The network of its access address.",
            )
            .default(Value::Bool(false)),
        ],
    );
    let block_device = Block::new(
        "A block device it is made with.",
        vec![
            required(
                "source_type",
                Type::String,
                "blank, image, snapshot or volume.",
            )
            .force_new(),
            optional("uuid", Type::String, "The source.").force_new(),
            optional(
                "volume_size",
                Type::Number,
                "The size of a new volume (GiB).",
            )
            .force_new(),
            optional("destination_type", Type::String, "local or volume.").force_new(),
            optional("boot_index", Type::Number, "Its boot order.").force_new(),
            optional(
                "delete_on_termination",
                Type::Bool,
                "Deleted with the server.",
            )
            .force_new()
            .default(Value::Bool(false)),
            optional("guest_format", Type::String, "Its file system.").force_new(),
            optional("volume_type", Type::String, "Its volume type.").force_new(),
            optional("device_type", Type::String, "disk or cdrom.").force_new(),
            optional("disk_bus", Type::String, "Its bus.").force_new(),
            optional("multiattach", Type::Bool, "Multi-attach.")
                .force_new()
                .default(Value::Bool(false)),
        ],
    );
    let hints = Block::new(
        "Where Nova may place it.",
        vec![
            optional("group", Type::String, "Its server group.").force_new(),
            optional("different_host", strings(), "Not beside these servers.").force_new(),
            optional("same_host", strings(), "Beside these servers.").force_new(),
            optional("query", strings(), "A scheduler query.").force_new(),
            optional("target_cell", Type::String, "A cell.").force_new(),
            optional("different_cell", strings(), "Not in these cells.").force_new(),
            optional("build_near_host_ip", Type::String, "Near this address.").force_new(),
            optional(
                "additional_properties",
                Type::Map(Box::new(Type::String)),
                "Other hints.",
            )
            .force_new(),
        ],
    );
    let volume = Block::new(
        "Deprecated upstream and unused.",
        vec![
            optional("id", Type::String, "Unused.").kept(),
            required("volume_id", Type::String, "Unused."),
            optional("device", Type::String, "Unused.").kept(),
        ],
    );
    let personality = Block::new(
        "A file put into it.",
        vec![
            required("file", Type::String, "Its path."),
            required("content", Type::String, "Its content."),
        ],
    );
    let vendor = Block::new(
        "Options of this provider.",
        vec![
            optional(
                "ignore_resize_confirmation",
                Type::Bool,
                "Do not confirm a resize.",
            )
            .default(Value::Bool(false)),
            optional(
                "detach_ports_before_destroy",
                Type::Bool,
                "Detach its ports before it is deleted.",
            )
            .default(Value::Bool(false)),
        ],
    );
    let block = Block::new("A Nova server.", attrs)
        .with_nesting("network", network, true, Nesting::List)
        .with_nesting("block_device", block_device, false, Nesting::List)
        .with_nesting("scheduler_hints", hints, false, Nesting::Set)
        .with_nesting("volume", volume, false, Nesting::Set)
        .with_nesting("personality", personality, false, Nesting::Set)
        .with_nesting("vendor_options", vendor, false, Nesting::Set);
    with_timeouts(block, &["create", "update", "delete"])
}
