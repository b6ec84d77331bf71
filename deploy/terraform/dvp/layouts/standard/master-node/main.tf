# A master: `<prefix>-master-<nodeIndex>` booting `<name>-root` (from the image), with its
# etcd disk `<name>-kubernetes-data`, its address (`ipAddresses[nodeIndex]`, else Auto)
# and its cloud-init Secret.

locals {
  prefix         = var.clusterConfiguration.cloud.prefix
  instance_class = var.providerClusterConfiguration.masterNodeGroup.instanceClass
  vm             = local.instance_class.virtualMachine
  name           = "${local.prefix}-master-${var.nodeIndex}"
  addresses      = lookup(local.vm, "ipAddresses", [])
  address        = length(local.addresses) > var.nodeIndex ? local.addresses[var.nodeIndex] : "Auto"
}

resource "dvp_cloud_init_secret" "node" {
  name      = "${local.name}-cloud-init"
  user_data = local.user_data
  labels    = local.labels

  lifecycle {
    # The bootstrap is read once, at first boot: a new one must not change a node.
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

resource "dvp_virtual_disk" "kubernetes_data" {
  name          = "${local.name}-kubernetes-data"
  size          = local.instance_class.etcdDisk.size
  storage_class = lookup(local.instance_class.etcdDisk, "storageClass", null)
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
  disks                 = [dvp_virtual_disk.root.name, dvp_virtual_disk.kubernetes_data.name]
  ip_address_name       = dvp_virtual_machine_ip_address.node.name
  cloud_init_secret     = dvp_cloud_init_secret.node.name
  labels                = local.labels
}

output "master_ip_address_for_ssh" {
  value = dvp_virtual_machine.node.ip_address
}

output "node_internal_ip_address" {
  value = dvp_virtual_machine.node.ip_address
}

output "kubernetes_data_device_path" {
  value = "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_vd-${dvp_virtual_disk.kubernetes_data.name}"
}
