# A master: `<prefix>-master-<nodeIndex>`, with its etcd disk (`/dev/sdb`). The resources
# keep the addresses and values of Deckhouse's zVirt layout (root module, its names), so
# a state dhctl wrote with terraform-provider-ovirt plans no change here.

locals {
  prefix          = var.clusterConfiguration.cloud.prefix
  instance_class  = local.configuration.masterNodeGroup.instanceClass
  name            = "${local.prefix}-master-${var.nodeIndex}"
  data_disk_alias = "${local.name}-kubernetes-data"
}

data "ovirt_templates" "master_template" {
  name          = local.instance_class.template
  fail_on_empty = true
}

resource "ovirt_vm" "master_vm" {
  name        = local.name
  cluster_id  = local.cluster_id
  template_id = tolist(data.ovirt_templates.master_template.templates)[0].id
  clone       = true

  # Deckhouse's topology, or the existing VM's own (node.tf).
  cpu_sockets = local.cpu_sockets
  cpu_cores   = local.cpu_cores
  cpu_threads = local.cpu_threads

  memory            = local.ram_bytes
  maximum_memory    = local.ram_bytes
  memory_ballooning = false
  vm_type           = local.vm_type

  initialization_custom_script = local.user_data
  # A static address, as Deckhouse's layouts give it (node.tf).
  initialization_dns = local.network_dns
  dynamic "initialization_nic" {
    for_each = local.network_nics
    content {
      name = initialization_nic.value.name
      ipv4 {
        address = initialization_nic.value.address
        netmask = initialization_nic.value.netmask
        gateway = initialization_nic.value.gateway
      }
    }
  }

  lifecycle {
    # Cloud-init (the bootstrap, a static address, DNS, a host name) is read once, at
    # first boot: a VM keeps what it was made with, whichever release of Deckhouse's wrote
    # it. The engine reports an OS type and a placement policy nobody set.
    ignore_changes = [
      os_type,
      initialization_custom_script,
      initialization_hostname,
      initialization_dns,
      initialization_nic,
      placement_policy_affinity,
      placement_policy_host_ids,
    ]
  }
}

# Read right after the clone, when the template's disk is the VM's only one.
data "ovirt_disk_attachments" "master-vm-boot-disk-attachment" {
  vm_id = ovirt_vm.master_vm.id
}

resource "ovirt_disk_resize" "master_boot_disk_resize" {
  disk_id = tolist(data.ovirt_disk_attachments.master-vm-boot-disk-attachment.attachments)[0].disk_id
  # The class's, or the disk's own, or 50 GiB for a new VM (node.tf).
  size = local.root_disk_size

  lifecycle {
    ignore_changes = [disk_id]
  }
}

resource "ovirt_nic" "master_vm_nic" {
  name            = local.nic_name
  vm_id           = ovirt_vm.master_vm.id
  vnic_profile_id = local.vnic_profile_id
}

resource "ovirt_disk" "master-kubernetes-data" {
  format = "raw"
  sparse = false
  # The class's, or the disk's own (Deckhouse's earliest masters: 15 GiB, fixed), or
  # 10 GiB for a new one (node.tf).
  size              = local.data_disk_size
  storage_domain_id = local.storage_domain_id
  alias             = local.data_disk_alias
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
