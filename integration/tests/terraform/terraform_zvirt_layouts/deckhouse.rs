//! Every version of Deckhouse's zVirt layouts the code index holds, as far as what it
//! writes into the engine and the state differs: read from their files in
//! `deckhouse/deckhouse` (each version names the files and commits it was read from) and
//! kept here apart from our layouts — the values a takeover test builds Deckhouse's engine
//! objects and Terraform state from. Nothing here comes from `deploy/terraform/zvirt`; where
//! a value agrees with ours, it is because Deckhouse's file says so. (The files themselves
//! are not copied in: they are Deckhouse's EE-licensed code; each value names the file it
//! was read from.)
//!
//! Three homes, oldest first: `ee/candi/cloud-providers/zvirt` (2024, "L1"),
//! `ee/se-plus/candi/cloud-providers/zvirt` ("L2"), `ee/se-plus/modules/
//! 030-cloud-provider-zvirt/candi` ("L3"). Versions whose files differ only where nothing
//! reaches the engine or the state (comments, formatting, variable plumbing) are one entry
//! here; the entry lists them all.
//!
//! Common to every version: root-module addresses (`ovirt_vm.master_vm`, `ovirt_nic.
//! master_vm_nic`, …; `node_vm`, `node_vm_nic` for a static node), the VM cloned
//! (`clone = true`) from `data.ovirt_templates`, `memory = maximum_memory = memory·1024²`,
//! `memory_ballooning = false`, one `ovirt_nic`, the etcd disk `sparse = false` attached
//! `bootable = false, active = true`, `ovirt_vm_start` with `force_stop = true`.

/// Which node a version's module makes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Master,
    Static,
}

/// How a version gives a node a static address (cloud-init through the engine's
/// `initialization`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Network {
    /// It cannot: no `initialization_nic` (its provider, 2.1.5, has none).
    None,
    /// `customNetworkConfig: true` on the instance class beside flat keys
    /// (`networkInterfaceName`, `networkInterfaceAddress[i]`, `networkInterfaceNetmask[i]`
    /// — one netmask per node —, `networkInterfaceGateway`); no DNS.
    Flag,
    /// The class's `customNetworkConfig` object (`networkInterfaceName`,
    /// `networkInterfaceAddress[i]`, `networkInterfaceNetmask`, `networkInterfaceGateway`,
    /// `dnsServers`); `dns`: whether it writes `initialization_dns` from `dnsServers`.
    Object { dns: bool },
}

/// Where a version reads its inputs when dhctl passes the module's objects instead of
/// the ZvirtClusterConfiguration.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Objects {
    /// It takes only the ZvirtClusterConfiguration.
    None,
    /// The custom network from the ModuleConfig: `settings.spec.settings.nodes.parameters.
    /// customNetworkConfigs[<group>]`, addresses in `networkInterfaceAddresses`
    /// (`master-node/variables.tf` @89d82879, `migration/locals.tf` @b548e6aa).
    ModuleConfigNetwork,
    /// The custom network from the ZvirtInstanceClass's `spec.customNetworkConfig`
    /// (`master-node/variables.tf` @cf4bf011, `migration/locals.tf` @cf4bf011).
    ClassNetwork,
}

/// The tool and provider that wrote a version's state.
#[derive(Clone, Copy, Debug)]
pub struct Tool {
    /// The provider address its state records (`provider["…"]`).
    pub provider: &'static str,
    /// `terraform_version` in the state.
    pub terraform_version: &'static str,
    /// The oVirt provider 2.2.0 of Deckhouse's build: `ovirt_vm` has `initialization_nic`
    /// and `initialization_dns` (2.1.5's schema has neither).
    pub provider_2_2: bool,
}

/// 2024: `ee/candi/cloud-providers/zvirt/terraform-modules/versions.tf` @edb6cb46
/// (`source = "oVirt/ovirt"`, `version = "2.1.5"`, Terraform stores the namespace
/// lower-cased) and `candi/terraform_versions.yml` @9c7dc75 (Terraform 0.14.8).
pub const TERRAFORM_2_1_5: Tool = Tool {
    provider: "registry.terraform.io/ovirt/ovirt",
    terraform_version: "0.14.8",
    provider_2_2: false,
};

/// `ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-versions.yml` @111e61c2:
/// OpenTofu 1.9.4, ovirt 2.1.5 (namespace `terraform-provider-ovirt`, `useOpentofu`).
pub const OPENTOFU_2_1_5: Tool = Tool {
    provider: "registry.opentofu.org/terraform-provider-ovirt/ovirt",
    terraform_version: "1.9.4",
    provider_2_2: false,
};

/// `…/candi/terraform_versions.yml` @d2cd3d10: OpenTofu 1.9.4, ovirt 2.2.0.
pub const OPENTOFU_2_2_0: Tool = Tool {
    provider: "registry.opentofu.org/terraform-provider-ovirt/ovirt",
    terraform_version: "1.9.4",
    provider_2_2: true,
};

/// `…/candi/terraform_versions.yml` @88f286a9: OpenTofu 1.12.0, ovirt 2.2.0.
pub const OPENTOFU_1_12: Tool = Tool {
    provider: "registry.opentofu.org/terraform-provider-ovirt/ovirt",
    terraform_version: "1.12.0",
    provider_2_2: true,
};

/// One version of a node module, as far as what it writes differs.
#[derive(Clone, Copy, Debug)]
pub struct Version {
    /// How the test and the docs' table name it (`L1 master-node/main.tf@0505833c`).
    pub label: &'static str,
    /// The files (path@commit) this entry was read from.
    pub files: &'static [&'static str],
    pub kind: Kind,
    pub tool: Tool,
    /// Terraform refuses the module itself, so no node can have been made with it: the
    /// construct of the file it stops at (HCL), and what Terraform says of it.
    pub refused_by_terraform: Option<(&'static str, &'static str)>,
    /// The instance class's keys of the earliest versions: `vnicProfileId`,
    /// `storageDomainId`, `clusterId` (in the class), `nicName`, `vmType`, `os`; later
    /// ones read `vnicProfileID`, `storageDomainID` and a top-level `clusterID`.
    pub old_keys: bool,
    /// The VM's name for node index 0 of the test's cluster (prefix `tf`, group `worker`).
    pub vm_name: &'static str,
    /// `cpu_sockets`, `cpu_cores`, `cpu_threads` for `numCPUs`.
    pub cpu: fn(i64) -> (i64, i64, i64),
    /// `os_type` from the class's `os`.
    pub os_type: bool,
    /// `initialization_custom_script` (cloud-init) written.
    pub custom_script: bool,
    /// `initialization_hostname` = the VM's name.
    pub hostname: bool,
    /// The boot disk grown by `ovirt_disk_resize` to the class's `rootDiskSizeGb`, this
    /// many GiB when the class leaves it out; `None`: no resize at all (the template's
    /// size, and no such resource in the state).
    pub root_default_gb: Option<u64>,
    /// The etcd disk's size when the class says nothing: a fixed size (the earliest
    /// versions, which read no `etcdDiskSizeGb`), or `etcdDiskSizeGb`'s default.
    pub etcd_gb: u64,
    /// `format` of the etcd disk.
    pub etcd_format: &'static str,
    /// The etcd disk's `disk_interface`.
    pub etcd_interface: &'static str,
    /// `ovirt_vm_start.stop_behavior` as written; `None`: left unset (the provider's
    /// default, "shutdown", is what its state holds).
    pub stop_behavior: Option<&'static str>,
    pub network: Network,
    pub objects: Objects,
}

/// `initialization_dns = custom_network_dns` in the VM (the `local.` left out, @d34dde5a).
const DNS_WITHOUT_LOCAL: &str =
    "resource \"ovirt_vm\" \"vm\" {\n  initialization_dns = custom_network_dns\n}\n";

const fn sockets(n: i64) -> (i64, i64, i64) {
    (n, 1, 1)
}
const fn cores(n: i64) -> (i64, i64, i64) {
    (1, n, 1)
}

const L1_EARLY: Version = Version {
    label: "",
    files: &[],
    kind: Kind::Master,
    tool: TERRAFORM_2_1_5,
    refused_by_terraform: None,
    old_keys: true,
    vm_name: "tf-master-0",
    cpu: sockets,
    os_type: true,
    custom_script: false,
    hostname: false,
    root_default_gb: None,
    etcd_gb: 15,
    etcd_format: "raw",
    etcd_interface: "virtio_scsi",
    stop_behavior: None,
    network: Network::None,
    objects: Objects::None,
};

/// Deckhouse's zVirt master-node modules, oldest first.
pub const MASTERS: &[Version] = &[
    // The layout holding the VM itself, before terraform-modules: one master named
    // `<prefix>-master` (no index), the class's snake_case keys, no cloud-init (no SSH
    // key: dhctl cannot reach such a node), the etcd disk `cow`.
    Version {
        label: "L1 layouts/standard/master-node/main.tf@1c8c88ff",
        files: &["ee/candi/cloud-providers/zvirt/layouts/standard/master-node/main.tf@1c8c88ff"],
        vm_name: "tf-master",
        etcd_format: "cow",
        ..L1_EARLY
    },
    // terraform-modules/master-node: `<prefix>-master-<index>`, `numCPUs` sockets, the
    // class's `os` and `vmType`, the etcd disk 15 GiB fixed, no resize, no cloud-init.
    Version {
        label: "L1 master-node/main.tf (find_string id 3733160253)",
        files: &["ee/candi/cloud-providers/zvirt/terraform-modules/master-node/main.tf (index id 3733160253, commit not known)"],
        ..L1_EARLY
    },
    // The same with cloud-init: `initialization_custom_script` and, only here,
    // `initialization_hostname`.
    Version {
        label: "L1 master-node/main.tf@0505833c",
        files: &[
            "ee/candi/cloud-providers/zvirt/terraform-modules/master-node/main.tf@0505833c",
            "ee/candi/cloud-providers/zvirt/terraform-modules/master-node/variables.tf@0505833c",
        ],
        custom_script: true,
        hostname: true,
        ..L1_EARLY
    },
    // The boot disk grown (`rootDiskSizeGb`, default 20), the etcd disk from
    // `etcdDiskSizeGb` (default 10); the hostname in cloud-init only.
    Version {
        label: "L1 master-node/main.tf@9c57ceed",
        files: &[
            "ee/candi/cloud-providers/zvirt/terraform-modules/master-node/main.tf@9c57ceed",
            "ee/candi/cloud-providers/zvirt/terraform-modules/master-node/variables.tf@e4999ceb",
        ],
        custom_script: true,
        root_default_gb: Some(20),
        etcd_gb: 10,
        os_type: false,
        ..L1_EARLY
    },
    // A merge left twice over: `variable "nodeIndex"`, `variable "cloudConfig"` and the
    // `locals` declared twice in one file.
    Version {
        label: "L1 master-node/variables.tf@03c90e59",
        files: &["ee/candi/cloud-providers/zvirt/terraform-modules/master-node/variables.tf@03c90e59"],
        refused_by_terraform: Some((
            "variable \"nodeIndex\" {\n  type = number\n}\nvariable \"nodeIndex\" {\n  type = number\n}\n",
            "Duplicate variable declaration",
        )),
        root_default_gb: Some(20),
        etcd_gb: 10,
        ..L1_EARLY
    },
    // One socket of `numCPUs` cores, `vm_type = "high_performance"`.
    Version {
        label: "L1 master-node/main.tf@753bcd08",
        files: &["ee/candi/cloud-providers/zvirt/terraform-modules/master-node/main.tf@753bcd08"],
        cpu: cores,
        custom_script: true,
        root_default_gb: Some(20),
        etcd_gb: 10,
        os_type: false,
        ..L1_EARLY
    },
    // se-plus: the root disk's default 50.
    Version {
        label: "L2 master-node/main.tf@04ede460",
        files: &[
            "ee/se-plus/candi/cloud-providers/zvirt/terraform-modules/master-node/main.tf@04ede460",
            "ee/se-plus/candi/cloud-providers/zvirt/terraform-modules/master-node/variables.tf@5d470dc1",
            "ee/se-plus/candi/cloud-providers/zvirt/terraform-modules/master-node/variables.tf@021d5de9",
        ],
        tool: OPENTOFU_2_1_5,
        cpu: cores,
        custom_script: true,
        root_default_gb: Some(50),
        etcd_gb: 10,
        os_type: false,
        old_keys: false,
        ..L1_EARLY
    },
    // The etcd disk attached as `virtio`.
    Version {
        label: "L2 master-node/main.tf@5a4f0155",
        files: &["ee/se-plus/candi/cloud-providers/zvirt/terraform-modules/master-node/main.tf@5a4f0155"],
        tool: OPENTOFU_2_1_5,
        cpu: cores,
        custom_script: true,
        root_default_gb: Some(50),
        etcd_gb: 10,
        etcd_interface: "virtio",
        os_type: false,
        old_keys: false,
        ..L1_EARLY
    },
    // The module: a static address from flat keys of the class.
    Version {
        label: "L3 master-node/main.tf@1f212e50",
        files: &[
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/main.tf@1f212e50",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/variables.tf@7fb38659",
        ],
        tool: OPENTOFU_2_2_0,
        cpu: cores,
        custom_script: true,
        root_default_gb: Some(50),
        etcd_gb: 10,
        etcd_interface: "virtio",
        os_type: false,
        network: Network::Flag,
        old_keys: false,
        ..L1_EARLY
    },
    // The class's `customNetworkConfig` object; no DNS written.
    Version {
        label: "L3 master-node/main.tf@2f58f9c5",
        files: &[
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/main.tf@2f58f9c5",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/variables.tf@d2cd3d10",
        ],
        tool: OPENTOFU_2_2_0,
        cpu: cores,
        custom_script: true,
        root_default_gb: Some(50),
        etcd_gb: 10,
        etcd_interface: "virtio",
        os_type: false,
        network: Network::Object { dns: false },
        old_keys: false,
        ..L1_EARLY
    },
    // `initialization_dns = custom_network_dns` without `local.`: Terraform refuses it.
    Version {
        label: "L3 master-node/main.tf@d34dde5a",
        files: &["ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/main.tf@d34dde5a"],
        tool: OPENTOFU_2_2_0,
        refused_by_terraform: Some((DNS_WITHOUT_LOCAL, "Invalid reference")),
        cpu: cores,
        custom_script: true,
        root_default_gb: Some(50),
        etcd_gb: 10,
        etcd_interface: "virtio",
        os_type: false,
        network: Network::Object { dns: true },
        old_keys: false,
        ..L1_EARLY
    },
    // DNS written; the resize replaced with the VM (`replace_triggered_by`), `stop`;
    // inputs from the ModuleConfig's objects too, the network from its
    // `customNetworkConfigs` (id 67107484922 is the same file but for alignment).
    Version {
        label: "L3 master-node/main.tf@89d82879",
        files: &[
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/main.tf@89d82879",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/main.tf (index id 67107484922)",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/variables.tf@89d82879",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/migration/locals.tf@b548e6aa",
        ],
        tool: OPENTOFU_1_12,
        cpu: cores,
        custom_script: true,
        root_default_gb: Some(50),
        etcd_gb: 10,
        etcd_interface: "virtio",
        stop_behavior: Some("stop"),
        os_type: false,
        network: Network::Object { dns: true },
        objects: Objects::ModuleConfigNetwork,
        old_keys: false,
        ..L1_EARLY
    },
    // The same module reading the network from the ZvirtInstanceClass.
    Version {
        label: "L3 master-node/variables.tf@cf4bf011",
        files: &[
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/variables.tf@cf4bf011",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/migration/locals.tf@cf4bf011",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/master-node/outputs.tf@cf4bf011",
        ],
        tool: OPENTOFU_1_12,
        cpu: cores,
        custom_script: true,
        root_default_gb: Some(50),
        etcd_gb: 10,
        etcd_interface: "virtio",
        stop_behavior: Some("stop"),
        os_type: false,
        network: Network::Object { dns: true },
        objects: Objects::ClassNetwork,
        old_keys: false,
        ..L1_EARLY
    },
];

const STATIC: Version = Version {
    kind: Kind::Static,
    vm_name: "tf-worker-0",
    cpu: cores,
    os_type: false,
    custom_script: true,
    etcd_gb: 0,
    ..L1_EARLY
};

/// Deckhouse's zVirt static-node modules, oldest first.
pub const STATICS: &[Version] = &[
    // The root disk's default 20 (the variables of 753bcd08 and 34181f5e agree there).
    Version {
        label: "L1 static-node/main.tf@753bcd08",
        files: &[
            "ee/candi/cloud-providers/zvirt/terraform-modules/static-node/main.tf@753bcd08",
            "ee/candi/cloud-providers/zvirt/terraform-modules/static-node/variables.tf@753bcd08",
            "ee/candi/cloud-providers/zvirt/terraform-modules/static-node/variables.tf@34181f5e",
        ],
        root_default_gb: Some(20),
        ..STATIC
    },
    Version {
        label: "L2 static-node/main.tf@3ab100bf",
        files: &[
            "ee/se-plus/candi/cloud-providers/zvirt/terraform-modules/static-node/main.tf@3ab100bf",
            "ee/se-plus/candi/cloud-providers/zvirt/terraform-modules/static-node/variables.tf@5d470dc1",
        ],
        tool: OPENTOFU_2_1_5,
        root_default_gb: Some(50),
        old_keys: false,
        ..STATIC
    },
    Version {
        label: "L3 static-node/main.tf@2f58f9c5",
        files: &[
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/static-node/main.tf@2f58f9c5",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/static-node/variables.tf@5eec83a8",
        ],
        tool: OPENTOFU_2_2_0,
        root_default_gb: Some(50),
        network: Network::Object { dns: false },
        old_keys: false,
        ..STATIC
    },
    Version {
        label: "L3 static-node/main.tf@d34dde5a",
        files: &["ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/static-node/main.tf@d34dde5a"],
        tool: OPENTOFU_2_2_0,
        refused_by_terraform: Some((DNS_WITHOUT_LOCAL, "Invalid reference")),
        root_default_gb: Some(50),
        network: Network::Object { dns: true },
        old_keys: false,
        ..STATIC
    },
    Version {
        label: "L3 static-node/main.tf@89d82879",
        files: &[
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/static-node/main.tf@89d82879",
            "ee/se-plus/modules/030-cloud-provider-zvirt/candi/terraform-modules/static-node/variables.tf@cf4bf011",
        ],
        tool: OPENTOFU_1_12,
        root_default_gb: Some(50),
        stop_behavior: Some("stop"),
        network: Network::Object { dns: true },
        objects: Objects::ClassNetwork,
        old_keys: false,
        ..STATIC
    },
];

/// What a version's base-infrastructure outputs as `cloud_discovery_data`.
pub struct Base {
    pub label: &'static str,
    pub output: fn() -> serde_json::Value,
}

/// Deckhouse's zVirt base-infrastructure outputs, oldest first (it makes nothing).
pub const BASES: &[Base] = &[
    // `ee/candi/cloud-providers/zvirt/layouts/standard/base-infrastructure/outputs.tf`
    // @fc44f39f: the kind alone.
    Base {
        label: "L1 base-infrastructure/outputs.tf@fc44f39f",
        output: || serde_json::json!({"apiVersion": "deckhouse.io/v1", "kind": "ZvirtCloudProviderDiscoveryData"}),
    },
    // @440fd4df, and the module's `layouts/standard/base-infrastructure/outputs.tf`
    // @b548e6aa: `storageDomains = []`, `zones = ["default"]`.
    Base {
        label: "L1 base-infrastructure/outputs.tf@440fd4df, L3 @b548e6aa",
        output: || {
            serde_json::json!({"apiVersion": "deckhouse.io/v1", "kind": "ZvirtCloudProviderDiscoveryData",
                "storageDomains": [], "zones": ["default"]})
        },
    },
];

/// docs/migrate/machines.md's table has a row for every version here (its first cell the
/// version's label), so no row is without its test and no version without its row.
#[test]
fn every_version_has_its_row_in_the_docs() {
    let doc = std::fs::read_to_string(
        overcast_integration::package_dir().join("../docs/migrate/machines.md"),
    )
    .unwrap();
    let labels = MASTERS
        .iter()
        .chain(STATICS)
        .map(|v| v.label)
        .chain(BASES.iter().map(|b| b.label));
    for label in labels {
        assert!(
            doc.contains(&format!("| `{label}` |")),
            "docs/migrate/machines.md has no row for {label}"
        );
    }
}
