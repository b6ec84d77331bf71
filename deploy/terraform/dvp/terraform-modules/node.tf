# A node as Deckhouse's DVP layouts make it (release 1.76, terraform-modules/), with their
# names: a disk's, the VM's and its cloud-init Secret's end in six hex digits of a hash of
# their "destructive parameters", computed here exactly as there (the same values, the
# same jsonencode and sha256). A cluster those layouts made is then taken over object for
# object (`terraform-provider-dvp migrate-state`, docs/migrate/dvp.md), and one made here
# has the names and labels Deckhouse's tools look for.
#
# Names: a new object gets the name Deckhouse's 1.75/1.76 modules give it; an existing
# one keeps the name it has (`ignore_changes = [name]`), because Deckhouse's releases
# computed them differently (1.77 and after leave the storage class out of the disks'
# hashes, so the VM's hash differs too; ≤ 1.72 left the additional disks out of the VM's)
# and a state taken over must not rename — replace — a node. What a hash stood for still
# replaces an object through that object's own attributes (its image, size class, cores,
# memory, placement, address); only a new SSH key, which Deckhouse's hash also covers,
# does not make a new VM here (the key is read once, at first boot).
#
# Labels: Deckhouse's identity labels (`deckhouse.io/managed-by`, `dvp.deckhouse.io/*`)
# are written when an object is made and kept as they are after (`ignore_changes` on each
# key): ≤ 1.74 labelled the VM without `managed-by` and the disks and address not at all,
# and a takeover changes nothing. The instance class's `additionalLabels` still reach an
# existing VM, in place.
#
# The layout sets `node_group`, `group` (the node group's settings), `instance_class`,
# `data_disk_hashes` (the etcd disk's, on a master) and `data_disks`.

locals {
  prefix   = var.clusterConfiguration.cloud.prefix
  vm       = local.instance_class.virtualMachine
  hostname = join("-", [local.prefix, local.node_group, var.nodeIndex])

  ip_addresses = lookup(local.vm, "ipAddresses", null)
  address      = local.ip_addresses == null ? "Auto" : var.nodeIndex + 1 > length(local.ip_addresses) ? "Auto" : local.ip_addresses[var.nodeIndex]

  root_disk_storage_class = lookup(local.instance_class.rootDisk, "storageClass", null)
  root_disk_params = jsonencode({
    "rootDisk" = {
      "storageClass" = local.root_disk_storage_class
      "image" = {
        "type" = local.instance_class.rootDisk.image.kind
        "name" = local.instance_class.rootDisk.image.name
      }
    }
  })
  # Encoded twice, as Deckhouse's modules do.
  root_disk_hash = substr(sha256(jsonencode(local.root_disk_params)), 0, 6)

  additional_disks = {
    for i, d in try(local.instance_class.additionalDisks, []) : tostring(i) => {
      size          = d.size
      storage_class = try(d.storageClass, null)
      hash          = substr(sha256(jsonencode(jsonencode({ "additionalDisk" = { "storageClass" = try(d.storageClass, null) } }))), 0, 6)
    }
  }
  # In Deckhouse's order: the keys sorted as strings.
  additional_disk_keys = sort(keys(local.additional_disks))

  region       = lookup(local.configuration, "region", "")
  actual_zones = lookup(local.configuration, "zones", [])
  zones        = lookup(local.group, "zones", null) != null ? tolist(setintersection(local.actual_zones, local.group["zones"])) : local.actual_zones
  zone         = length(local.actual_zones) > 0 ? element(local.zones, var.nodeIndex) : ""
  # Deckhouse's module variables are map(string) and list(map(string)): the values as text.
  node_selector = merge(
    { for k, v in { "topology.kubernetes.io/zone" = local.zone, "topology.kubernetes.io/region" = local.region } : k => v if v != "" },
    { for k, v in lookup(local.vm, "nodeSelector", {}) : k => tostring(v) },
  )
  tolerations         = lookup(local.vm, "tolerations", null) == null ? null : [for t in local.vm.tolerations : { for k, v in t : k => tostring(v) }]
  priority_class_name = lookup(local.vm, "priorityClassName", null)
  core_fraction       = lookup(local.vm.cpu, "coreFraction", "100%")

  vm_params = merge(
    {
      "virtualMachine" = {
        "cpu"               = { "cores" = local.vm.cpu.cores, "coreFraction" = local.core_fraction }
        "memory"            = { "size" = local.vm.memory.size }
        "nodeSelector"      = local.node_selector
        "tolerations"       = local.tolerations
        "priorityClassName" = local.priority_class_name
        "ipAddress"         = dvp_virtual_machine_ip_address.node.address
        "sshPublicKeyHash"  = sha256(jsonencode(local.ssh_key))
      }
    },
    local.data_disk_hashes,
    {
      "rootDiskHash"        = local.root_disk_hash
      "additionalDisksHash" = [for k in local.additional_disk_keys : local.additional_disks[k].hash]
    },
  )
  vm_hash = substr(sha256(jsonencode(local.vm_params)), 0, 6)

  # The VM's own labels beyond Deckhouse's identity ones: the instance class's
  # `additionalLabels`, then the cluster's `additionalVMLabels` (Deckhouse's master-node
  # and static-node variables @b2e479d3 and @0907b049: `merge(<class's>,
  # lookup(providerClusterConfiguration, "additionalVMLabels", {}))`, the configuration's
  # top level; its schema @0907b049 declares them under `provider`, and its validator
  # reads the ModuleConfig's `nodes.parameters` — variables.tf brings either here).
  additional_labels = merge(
    { for k, v in lookup(local.vm, "additionalLabels", {}) : k => tostring(v) },
    { for k, v in try(local.configuration.provider.additionalVMLabels, {}) : k => tostring(v) },
    { for k, v in try(local.configuration.additionalVMLabels, {}) : k => tostring(v) },
  )

  # What Deckhouse labels a node's disks, address and Secret with.
  labels = {
    "deckhouse.io/managed-by"       = "deckhouse"
    "dvp.deckhouse.io/cluster-uuid" = var.clusterUUID
    "dvp.deckhouse.io/hostname"     = local.hostname
  }
}

resource "dvp_cloud_init_secret" "node" {
  name      = join("-", [local.hostname, "cloudinit", local.vm_hash])
  user_data = local.user_data
  labels    = local.labels

  lifecycle {
    # The bootstrap is read once, at first boot: a new one must not change a node. Its
    # labels are kept as they were made: Deckhouse labelled this Secret from 1.76 on
    # (#20436), and a takeover of an earlier node changes nothing.
    ignore_changes = [user_data, labels, name]
  }
}

resource "dvp_virtual_disk" "root" {
  name          = join("-", [local.prefix, local.node_group, var.nodeIndex, local.root_disk_hash])
  size          = local.instance_class.rootDisk.size
  storage_class = local.root_disk_storage_class
  image_kind    = local.instance_class.rootDisk.image.kind
  image_name    = local.instance_class.rootDisk.image.name
  labels        = local.labels

  lifecycle {
    # As Deckhouse's: the class a disk was made in is not a reason to make it again.
    # Its name and identity labels are the ones it has (see the notes above).
    ignore_changes = [
      storage_class,
      name,
      labels["deckhouse.io/managed-by"],
      labels["dvp.deckhouse.io/cluster-uuid"],
      labels["dvp.deckhouse.io/hostname"],
    ]
  }
}

resource "dvp_virtual_disk" "additional" {
  for_each      = local.additional_disks
  name          = join("-", [local.prefix, local.node_group, "additional-disk", each.key, var.nodeIndex, each.value.hash])
  size          = each.value.size
  storage_class = each.value.storage_class
  labels        = local.labels

  lifecycle {
    ignore_changes = [
      storage_class,
      name,
      labels["deckhouse.io/managed-by"],
      labels["dvp.deckhouse.io/cluster-uuid"],
      labels["dvp.deckhouse.io/hostname"],
    ]
  }
}

resource "dvp_virtual_machine_ip_address" "node" {
  name      = lower(join("-", [local.hostname, replace(local.address, ".", "-")]))
  type      = local.address == "Auto" ? "Auto" : "Static"
  static_ip = local.address == "Auto" ? null : local.address
  labels    = local.labels

  lifecycle {
    # The name it has, as the disks and the VM keep theirs: our layouts of 688adc9 named
    # it `<hostname>`, and a new name replaces the address and the VM that takes it.
    ignore_changes = [
      name,
      labels["deckhouse.io/managed-by"],
      labels["dvp.deckhouse.io/cluster-uuid"],
      labels["dvp.deckhouse.io/hostname"],
    ]
  }
}

resource "dvp_virtual_machine" "node" {
  name          = join("-", [local.hostname, local.vm_hash])
  class_name    = local.vm.virtualMachineClassName
  cores         = local.vm.cpu.cores
  core_fraction = local.core_fraction
  memory        = local.vm.memory.size
  bootloader    = lookup(local.vm, "bootloader", null)
  # Only what the instance class says: left out, a VM taken over keeps its own (Deckhouse
  # ≤ 1.74 made AlwaysOn with DVP's default migration policy, ≥ 1.75 the two below) and
  # a new one gets Deckhouse's current defaults (AlwaysOnUnlessStoppedManually,
  # PreferForced) from the provider. A change is made in place.
  run_policy            = lookup(local.vm, "runPolicy", null)
  live_migration_policy = lookup(local.vm, "liveMigrationPolicy", null)
  disks = concat(
    [dvp_virtual_disk.root.name],
    local.data_disks,
    [for k in local.additional_disk_keys : dvp_virtual_disk.additional[k].name],
  )
  ip_address_name     = dvp_virtual_machine_ip_address.node.name
  cloud_init_secret   = dvp_cloud_init_secret.node.name
  node_selector       = local.node_selector
  tolerations         = local.tolerations
  priority_class_name = local.priority_class_name
  # Deckhouse's identity labels, then the class's and the cluster's own (which win on a
  # key, as in Deckhouse's `merge(additionalLabels, additionalVMLabels)`).
  labels = merge(
    {
      "deckhouse.io/managed-by"         = "deckhouse"
      "dvp.deckhouse.io/cluster-prefix" = local.prefix
      "dvp.deckhouse.io/cluster-uuid"   = var.clusterUUID
      "dvp.deckhouse.io/node-group"     = local.node_group
      "dvp.deckhouse.io/hostname"       = local.hostname
    },
    local.additional_labels,
  )
  annotations = { for k, v in lookup(local.vm, "additionalAnnotations", {}) : k => tostring(v) }

  lifecycle {
    # The name and identity labels it has (see the notes above); what it is made of
    # replaces it through its own attributes. Deckhouse's own annotations (the
    # parameters its VM's name was hashed from) stay as Deckhouse wrote them.
    ignore_changes = [
      name,
      labels["deckhouse.io/managed-by"],
      labels["dvp.deckhouse.io/cluster-prefix"],
      labels["dvp.deckhouse.io/cluster-uuid"],
      labels["dvp.deckhouse.io/node-group"],
      labels["dvp.deckhouse.io/hostname"],
      annotations["last_applied_destructive_vm_parameters"],
      annotations["last_applied_destructive_vm_parameters_hash"],
    ]
  }
}
