# What a node's VM is made of: its instance class as any Deckhouse release's configuration
# spells it, and — where the class says nothing — what a VM of the node's name already
# has. Each layout names the node (`local.name`), its class (`local.instance_class`) and
# the alias of its data disk (`local.data_disk_alias`, null for none).
#
# Why keep what exists: Deckhouse's releases made nodes differently where the class is
# silent, and the oVirt provider replaces or grows what changes. Its 2024 master spread
# `numCPUs` as sockets (since: one socket of `numCPUs` cores); its 2024 static nodes grew
# the boot disk to 20 GiB when `rootDiskSizeGb` was left out (since: 50), its earliest
# masters not at all, with a fixed 15 GiB etcd disk (since: `etcdDiskSizeGb`, 10). A layout
# imposing today's defaults would replace a master or grow every node a release made on
# the first plan after a switch. A new VM gets Deckhouse's current defaults; a class that
# says a size or a CPU count is followed.

data "ovirt_existing_vm" "node" {
  name            = local.name
  data_disk_alias = local.data_disk_alias
}

locals {
  existing = data.ovirt_existing_vm.node
  gib      = 1024 * 1024 * 1024

  # The class's keys as Deckhouse's earliest zVirt releases spelled them too
  # (`vnicProfileId`, `storageDomainId`, the cluster in the class as `clusterId`:
  # `ee/candi/cloud-providers/zvirt/terraform-modules/master-node/variables.tf` @0505833c).
  vnic_profile_id   = try(local.instance_class.vnicProfileID, local.instance_class.vnicProfileId)
  storage_domain_id = try(local.instance_class.storageDomainID, local.instance_class.storageDomainId, null)
  cluster_id        = try(local.configuration.clusterID, local.instance_class.clusterId, local.configuration.clusterId)
  nic_name          = lookup(local.instance_class, "nicName", "nic1")
  vm_type           = lookup(local.instance_class, "vmType", "high_performance")
  ram_bytes         = local.instance_class.memory * 1024 * 1024

  # The CPU topology: one socket of numCPUs cores, unless the VM exists with numCPUs CPUs
  # spread otherwise (zeros when there is no VM: never the numCPUs asked for).
  keep_cpu_topology = local.existing.cpu_sockets * local.existing.cpu_cores * local.existing.cpu_threads == local.instance_class.numCPUs
  cpu_sockets       = local.keep_cpu_topology ? local.existing.cpu_sockets : 1
  cpu_cores         = local.keep_cpu_topology ? local.existing.cpu_cores : local.instance_class.numCPUs
  cpu_threads       = local.keep_cpu_topology ? local.existing.cpu_threads : 1

  # Disk sizes: the class's, else what the node has, else Deckhouse's current defaults.
  root_disk_size = (
    lookup(local.instance_class, "rootDiskSizeGb", null) != null ? local.instance_class.rootDiskSizeGb * local.gib
    : local.existing.boot_disk_size > 0 ? local.existing.boot_disk_size : 50 * local.gib
  )
  data_disk_size = (
    lookup(local.instance_class, "etcdDiskSizeGb", null) != null ? local.instance_class.etcdDiskSizeGb * local.gib
    : local.existing.data_disk_size > 0 ? local.existing.data_disk_size : 10 * local.gib
  )

  # A static address (cloud-init through the engine's `initialization`), as Deckhouse's
  # layouts give it: the class's `customNetworkConfig` object (`networkInterfaceAddress[i]`,
  # a netmask, a gateway, `dnsServers` — a string in the ZvirtClusterConfiguration, a list
  # in the ZvirtInstanceClass; the ModuleConfig's `customNetworkConfigs[<group>]` is moved
  # into the class by variables.tf), or the earliest module's flat keys beside
  # `customNetworkConfig: true` (one netmask per node, no DNS: `…/master-node/main.tf`
  # @1f212e50). The address reaches a new VM only: cloud-init reads it once, at first
  # boot, so the VM keeps the one it was made with (`ignore_changes`).
  _network_flag = try(local.instance_class.customNetworkConfig == true, false)
  _network      = local._network_flag ? null : try(local.instance_class.customNetworkConfig, null)
  network = local._network_flag ? {
    name    = try(tostring(local.instance_class.networkInterfaceName), "")
    address = try(tostring(local.instance_class.networkInterfaceAddress[var.nodeIndex]), "")
    netmask = try(tostring(local.instance_class.networkInterfaceNetmask[var.nodeIndex]), tostring(local.instance_class.networkInterfaceNetmask), "")
    gateway = try(tostring(local.instance_class.networkInterfaceGateway), "")
    dns     = ""
    } : local._network == null ? null : {
    name    = try(tostring(local._network.networkInterfaceName), "")
    address = try(tostring(local._network.networkInterfaceAddress[var.nodeIndex]), tostring(local._network.networkInterfaceAddresses[var.nodeIndex]), "")
    netmask = try(tostring(local._network.networkInterfaceNetmask), "")
    gateway = try(tostring(local._network.networkInterfaceGateway), "")
    dns     = try(join(" ", local._network.dnsServers), tostring(local._network.dnsServers), "")
  }
  network_nics = local.network == null ? [] : [local.network]
  network_dns  = try(local.network.dns, "") == "" ? null : try(local.network.dns, null)
}
