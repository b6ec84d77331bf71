# A node of a static NodeGroup: `<prefix>-<nodeGroupName>-<nodeIndex>`, its instance
# class from the configuration's `nodeGroups`, booting `<name>-root`.

locals {
  prefix         = var.clusterConfiguration.cloud.prefix
  group          = [for g in lookup(var.providerClusterConfiguration, "nodeGroups", []) : g if g.name == var.nodeGroupName][0]
  instance_class = local.group.instanceClass
  vm             = local.instance_class.virtualMachine
  name           = "${local.prefix}-${var.nodeGroupName}-${var.nodeIndex}"
  addresses      = lookup(local.vm, "ipAddresses", [])
  address        = length(local.addresses) > var.nodeIndex ? local.addresses[var.nodeIndex] : "Auto"
}

resource "dvp_cloud_init_secret" "node" {
  name      = "${local.name}-cloud-init"
  user_data = local.user_data
  labels    = local.labels

  lifecycle {
    ignore_changes = [user_data]
  }
}

resource "dvp_virtual_disk" "root" {
  name          = "${local.name}-root"
  size          = local.instance_class.rootDisk.size
  storage_class = lookup(local.instance_class.rootDisk, "storageClass", null)
  image_kind    = local.instance_class.rootDisk.image.kind
  image_name    = local.instance_class.rootDisk.image.name
  labels        = local.labels
}

resource "dvp_virtual_machine_ip_address" "node" {
  name      = local.name
  type      = local.address == "Auto" ? "Auto" : "Static"
  static_ip = local.address == "Auto" ? null : local.address
  labels    = local.labels
}

resource "dvp_virtual_machine" "node" {
  name                  = local.name
  class_name            = lookup(local.vm, "virtualMachineClassName", "generic")
  cores                 = local.vm.cpu.cores
  core_fraction         = lookup(local.vm.cpu, "coreFraction", "100%")
  memory                = local.vm.memory.size
  bootloader            = lookup(local.vm, "bootloader", "EFI")
  run_policy            = lookup(local.vm, "runPolicy", "AlwaysOnUnlessStoppedManually")
  live_migration_policy = lookup(local.vm, "liveMigrationPolicy", "PreferForced")
  disks                 = [dvp_virtual_disk.root.name]
  ip_address_name       = dvp_virtual_machine_ip_address.node.name
  cloud_init_secret     = dvp_cloud_init_secret.node.name
  labels                = local.labels
}

output "node_internal_ip_address" {
  value = dvp_virtual_machine.node.ip_address
}
