# A node of a static NodeGroup: `<prefix>-<nodeGroupName>-<nodeIndex>`, its instance
# class from the configuration's `nodeGroups`, started. Addresses and values are those of
# Deckhouse's zVirt layout (see master-node).

locals {
  prefix         = var.clusterConfiguration.cloud.prefix
  group          = [for g in lookup(local.configuration, "nodeGroups", []) : g if g.name == var.nodeGroupName][0]
  instance_class = local.group.instanceClass
  name           = "${local.prefix}-${var.nodeGroupName}-${var.nodeIndex}"
  ram_bytes      = local.instance_class.memory * 1024 * 1024
}

data "ovirt_templates" "node_template" {
  name          = local.instance_class.template
  fail_on_empty = true
}

resource "ovirt_vm" "node_vm" {
  name        = local.name
  cluster_id  = local.configuration.clusterID
  template_id = tolist(data.ovirt_templates.node_template.templates)[0].id
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
    ignore_changes = [os_type, initialization_custom_script, placement_policy_affinity, placement_policy_host_ids]
  }
}

data "ovirt_disk_attachments" "node-vm-boot-disk-attachment" {
  vm_id = ovirt_vm.node_vm.id
}

resource "ovirt_disk_resize" "node_boot_disk_resize" {
  disk_id = tolist(data.ovirt_disk_attachments.node-vm-boot-disk-attachment.attachments)[0].disk_id
  size    = lookup(local.instance_class, "rootDiskSizeGb", 50) * 1024 * 1024 * 1024

  lifecycle {
    ignore_changes = [disk_id]
  }
}

resource "ovirt_nic" "node_vm_nic" {
  name            = lookup(local.instance_class, "nicName", "nic1")
  vm_id           = ovirt_vm.node_vm.id
  vnic_profile_id = local.instance_class.vnicProfileID
}

resource "ovirt_vm_start" "node_vm" {
  vm_id      = ovirt_vm.node_vm.id
  force_stop = true

  depends_on = [ovirt_nic.node_vm_nic, ovirt_disk_resize.node_boot_disk_resize]
}

# No outputs, and no wait for an address: Deckhouse's static-node step has neither (dhctl
# reads nothing of it), and an output its state lacks would be a change to plan.
