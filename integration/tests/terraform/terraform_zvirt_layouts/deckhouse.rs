//! What Deckhouse's zVirt layouts of two releases write, read from their files in
//! `deckhouse/deckhouse` (the commits below) and kept here apart from our layouts: the
//! values a takeover test builds Deckhouse's engine objects and Terraform state from.
//! Nothing here comes from `deploy/terraform/zvirt`; where a value agrees with ours, it
//! is because Deckhouse's file says so. (The files themselves are not copied in: they
//! are Deckhouse's EE-licensed code; each value names the line it was read from.)
//!
//! Common to both (every released master-node `main.tf`): root-module addresses
//! (`layouts/standard/master-node` is a symlink to `terraform-modules/master-node`,
//! `ee/se-plus/candi/cloud-providers/zvirt/layouts/standard/master-node~HEAD` @0a277bb),
//! `<prefix>-master-<nodeIndex>` cloned (`clone = true`), `memory = maximum_memory =
//! memory·1024²`, `memory_ballooning = false`, `vm_type = "high_performance"`, NIC
//! `nic1`, etcd disk `raw`, `sparse = false`, alias `<name>-kubernetes-data`, attached
//! `bootable = false, active = true`, `ovirt_vm_start` with `force_stop = true`; outputs
//! the first IPv4 address and `/dev/sdb`.

/// One release of Deckhouse's zVirt layouts.
pub struct Release {
    /// How the test names it.
    pub label: &'static str,
    /// The provider address its state records (`provider["…"]`).
    pub provider: &'static str,
    /// The tool and version that wrote its state (`terraform_version`).
    pub terraform_version: &'static str,
    /// The master's `cpu_sockets`, `cpu_cores`, `cpu_threads` for `numCPUs`.
    pub master_cpu: fn(i64) -> (i64, i64, i64),
    /// A static node's.
    pub node_cpu: fn(i64) -> (i64, i64, i64),
    /// `ovirt_vm_start.stop_behavior` as written; `None`: left unset (the provider's
    /// default, "shutdown", is what its state holds).
    pub stop_behavior: Option<&'static str>,
    /// The etcd disk's `disk_interface`.
    pub etcd_interface: &'static str,
    /// The oVirt provider 2.2.0 of Deckhouse's build: `ovirt_vm` has
    /// `initialization_nic` (upstream 2.2.0) and `initialization_dns` (Deckhouse's patch
    /// 004), which its layouts set to `""` without a custom network.
    pub provider_2_2: bool,
    /// dhctl may pass the module's objects instead of the ZvirtClusterConfiguration
    /// (`terraform-modules/master-node/variables.tf` @89d8287 reads them through
    /// `module "migration"`, `migration/locals.tf` @cf4bf01).
    pub module_config: bool,
}

/// Deckhouse 2024 (`ee/candi/cloud-providers/zvirt`):
/// - `terraform-modules/master-node/main.tf` @9c57cee: `cpu_sockets = local.master_cpus`,
///   `cpu_cores = 1`, `cpu_threads = 1`; `#stop_behavior = "stop"` (commented out);
///   `disk_interface = "virtio_scsi"`; no `lifecycle` on the VM.
/// - `terraform-modules/static-node/main.tf` @753bcd0: `cpu_sockets = 1`,
///   `cpu_cores = local.cpus`, `cpu_threads = 1`; no `stop_behavior`.
/// - `terraform-modules/versions.tf` @edb6cb4: `ovirt = { source = "oVirt/ovirt",
///   version = "2.1.5" }` (Terraform stores the namespace lower-cased).
/// - `candi/terraform_versions.yml` @9c7dc75: Terraform 0.14.8, ovirt 2.1.5 (upstream
///   v2.1.5 with two patches: no schema change).
pub const RELEASE_2024: Release = Release {
    label: "Deckhouse 2024 (9c57cee, provider oVirt/ovirt 2.1.5, Terraform 0.14.8)",
    provider: "registry.terraform.io/ovirt/ovirt",
    terraform_version: "0.14.8",
    master_cpu: |n| (n, 1, 1),
    node_cpu: |n| (1, n, 1),
    stop_behavior: None,
    etcd_interface: "virtio_scsi",
    provider_2_2: false,
    module_config: false,
};

/// Deckhouse's newest (`ee/se-plus/modules/030-cloud-provider-zvirt/candi`):
/// - `terraform-modules/master-node/main.tf` @89d8287: `cpu_sockets = 1`,
///   `cpu_cores = local.master_cpus`, `cpu_threads = 1`; `initialization_dns =
///   local.custom_network_dns` (`join(" ", [])` = `""` without a custom network,
///   `variables.tf` @89d8287 line 88) and no `initialization_nic` block then;
///   `disk_interface = "virtio"` with `ignore_changes = [disk_interface]`;
///   `ovirt_vm_start` `stop_behavior = "stop"`.
/// - `terraform-modules/static-node/main.tf` @89d8287: the same topology, `stop_behavior = "stop"`.
/// - `terraform_versions.yml` @88f286a: OpenTofu 1.12.0, ovirt 2.2.0 (`namespace:
///   terraform-provider-ovirt`, `useOpentofu: true`); dhctl installs it under
///   `registry.opentofu.org/terraform-provider-ovirt/ovirt`.
pub const RELEASE_NEWEST: Release = Release {
    label: "Deckhouse newest (89d8287, provider 2.2.0, OpenTofu 1.12.0)",
    provider: "registry.opentofu.org/terraform-provider-ovirt/ovirt",
    terraform_version: "1.12.0",
    master_cpu: |n| (1, n, 1),
    node_cpu: |n| (1, n, 1),
    stop_behavior: Some("stop"),
    etcd_interface: "virtio",
    provider_2_2: true,
    module_config: true,
};
