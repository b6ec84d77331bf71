# A node of a static NodeGroup: `<prefix>-<nodeGroupName>-<nodeIndex>`, its instance
# class from the configuration's `nodeGroups`, started. Addresses and values are those of
# Deckhouse's zVirt layout (see master-node).

locals {
  prefix         = var.clusterConfiguration.cloud.prefix
  group          = [for g in lookup(local.configuration, "nodeGroups", []) : g if g.name == var.nodeGroupName][0]
  instance_class = local.group.instanceClass
  name           = "${local.prefix}-${var.nodeGroupName}-${var.nodeIndex}"
  # No data disk.
  data_disk_alias = null
}

data "ovirt_templates" "node_template" {
  name          = local.instance_class.template
  fail_on_empty = true
}

resource "ovirt_vm" "node_vm" {
  name        = local.name
  cluster_id  = local.cluster_id
  template_id = tolist(data.ovirt_templates.node_template.templates)[0].id
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
    # As the master's (master-node/main.tf).
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

data "ovirt_disk_attachments" "node-vm-boot-disk-attachment" {
  vm_id = ovirt_vm.node_vm.id
}

resource "ovirt_disk_resize" "node_boot_disk_resize" {
  disk_id = tolist(data.ovirt_disk_attachments.node-vm-boot-disk-attachment.attachments)[0].disk_id
  # The class's, or the disk's own, or 50 GiB for a new VM (node.tf).
  size = local.root_disk_size

  lifecycle {
    ignore_changes = [disk_id]
  }
}

resource "ovirt_nic" "node_vm_nic" {
  name            = local.nic_name
  vm_id           = ovirt_vm.node_vm.id
  vnic_profile_id = local.vnic_profile_id
}

resource "ovirt_vm_start" "node_vm" {
  vm_id      = ovirt_vm.node_vm.id
  force_stop = true

  depends_on = [ovirt_nic.node_vm_nic, ovirt_disk_resize.node_boot_disk_resize]
}

# No outputs, and no wait for an address: Deckhouse's static-node step has neither (dhctl
# reads nothing of it), and an output its state lacks would be a change to plan.
