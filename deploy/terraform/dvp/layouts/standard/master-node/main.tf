# A master: `<prefix>-master-<nodeIndex>` (its hostname) in a VM `<hostname>-<hash>`,
# booting its root disk, with its etcd disk, its address (`ipAddresses[nodeIndex]`, else
# Auto) and its cloud-init Secret — what Deckhouse's master-node layout makes, named as it
# names them (node.tf).

locals {
  node_group     = "master"
  group          = local.configuration.masterNodeGroup
  instance_class = local.group.instanceClass

  etcd_disk_storage_class = lookup(local.instance_class.etcdDisk, "storageClass", null)
  # The key's spelling is Deckhouse's.
  etcd_disk_hash = substr(sha256(jsonencode(jsonencode({ "kbernetesDataDisk" = { "storageClass" = local.etcd_disk_storage_class } }))), 0, 6)

  data_disk_hashes = { "etcDiskHash" = local.etcd_disk_hash }
  data_disks       = [dvp_virtual_disk.kubernetes_data.name]
}

resource "dvp_virtual_disk" "kubernetes_data" {
  name          = join("-", [local.prefix, local.node_group, "kubernetes-data", var.nodeIndex, local.etcd_disk_hash])
  size          = local.instance_class.etcdDisk.size
  storage_class = local.etcd_disk_storage_class
  labels        = local.labels

  lifecycle {
    # Its name and identity labels are the ones it has (node.tf's notes).
    ignore_changes = [
      storage_class,
      name,
      labels["deckhouse.io/managed-by"],
      labels["dvp.deckhouse.io/cluster-uuid"],
      labels["dvp.deckhouse.io/hostname"],
    ]
  }
}

output "master_ip_address_for_ssh" {
  value = dvp_virtual_machine.node.ip_address
}

output "node_internal_ip_address" {
  value = dvp_virtual_machine.node.ip_address
}

# DVP gives a disk the serial md5(its uid).
output "kubernetes_data_device_path" {
  value = "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_${md5(dvp_virtual_disk.kubernetes_data.uid)}"
}
