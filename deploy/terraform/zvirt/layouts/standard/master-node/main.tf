# A master: `<prefix>-master-<nodeIndex>`, with its etcd disk (`/dev/sdb`). The resources
# keep the addresses and values of Deckhouse's zVirt layout (root module, its names), so
# a state dhctl wrote with terraform-provider-ovirt plans no change here.

locals {
  prefix         = var.clusterConfiguration.cloud.prefix
  instance_class = local.configuration.masterNodeGroup.instanceClass
  name           = "${local.prefix}-master-${var.nodeIndex}"
  ram_bytes      = local.instance_class.memory * 1024 * 1024
}

data "ovirt_templates" "master_template" {
  name          = local.instance_class.template
  fail_on_empty = true
}

resource "ovirt_vm" "master_vm" {
  name        = local.name
  cluster_id  = local.configuration.clusterID
  template_id = tolist(data.ovirt_templates.master_template.templates)[0].id
  clone       = true

  # Deckhouse's topology, or the existing VM's own (cpu.tf).
  cpu_sockets = local.cpu_sockets
  cpu_cores   = local.cpu_cores
  cpu_threads = local.cpu_threads

  memory            = local.ram_bytes
  maximum_memory    = local.ram_bytes
  memory_ballooning = false
  vm_type           = lookup(local.instance_class, "vmType", "high_performance")

  initialization_custom_script = local.user_data

  lifecycle {
    # The bootstrap is read once, at first boot; the engine reports an OS type and a
    # placement policy nobody set.
    ignore_changes = [os_type, initialization_custom_script, placement_policy_affinity, placement_policy_host_ids]
  }
}

# Read right after the clone, when the template's disk is the VM's only one.
data "ovirt_disk_attachments" "master-vm-boot-disk-attachment" {
  vm_id = ovirt_vm.master_vm.id
}

resource "ovirt_disk_resize" "master_boot_disk_resize" {
  disk_id = tolist(data.ovirt_disk_attachments.master-vm-boot-disk-attachment.attachments)[0].disk_id
  size    = lookup(local.instance_class, "rootDiskSizeGb", 50) * 1024 * 1024 * 1024

  lifecycle {
    ignore_changes = [disk_id]
  }
}

resource "ovirt_nic" "master_vm_nic" {
  name            = lookup(local.instance_class, "nicName", "nic1")
  vm_id           = ovirt_vm.master_vm.id
  vnic_profile_id = local.instance_class.vnicProfileID
}

resource "ovirt_disk" "master-kubernetes-data" {
  format            = "raw"
  sparse            = false
  size              = lookup(local.instance_class, "etcdDiskSizeGb", 10) * 1024 * 1024 * 1024
  storage_domain_id = local.instance_class.storageDomainID
  alias             = "${local.name}-kubernetes-data"
}

resource "ovirt_disk_attachment" "master-kubernetes-data-attachment" {
  vm_id          = ovirt_vm.master_vm.id
  disk_id        = ovirt_disk.master-kubernetes-data.id
  disk_interface = "virtio_scsi"
  bootable       = false
  active         = true

  lifecycle {
    # ForceNew, and states differ: Deckhouse attached it as virtio_scsi before 1.72 and
    # virtio since; virtio_scsi makes it `/dev/sdb`, the device this layout outputs.
    ignore_changes = [disk_interface]
  }
  depends_on = [ovirt_disk_resize.master_boot_disk_resize]
}

resource "ovirt_vm_start" "master_vm" {
  vm_id      = ovirt_vm.master_vm.id
  force_stop = true
  # stop_behavior left out: Deckhouse's newest layout writes "stop", its earlier ones left
  # the provider's "shutdown"; unset, the provider keeps what a state holds ("shutdown"
  # for a VM made here).

  depends_on = [
    ovirt_nic.master_vm_nic,
    ovirt_disk.master-kubernetes-data,
    ovirt_disk_attachment.master-kubernetes-data-attachment,
    ovirt_disk_resize.master_boot_disk_resize,
  ]
}

data "ovirt_wait_for_ip" "master_vm" {
  vm_id = ovirt_vm_start.master_vm.vm_id
}

output "master_ip_address_for_ssh" {
  value = tolist(tolist(data.ovirt_wait_for_ip.master_vm.interfaces)[0].ipv4_addresses)[0]
}

output "node_internal_ip_address" {
  value = tolist(tolist(data.ovirt_wait_for_ip.master_vm.interfaces)[0].ipv4_addresses)[0]
}

output "kubernetes_data_device_path" {
  value = "/dev/sdb"
}
