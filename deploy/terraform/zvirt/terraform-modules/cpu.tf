# The VM's CPU topology: one socket of numCPUs cores (Deckhouse's layouts since 2024),
# unless the VM already exists with numCPUs CPUs spread otherwise — Deckhouse's 2024
# master layout made numCPUs sockets of one core — in which case it keeps its own. The
# oVirt provider replaces a VM whose topology changes, so imposing ours would replace a
# master on the first plan after a switch. Each node module names the VM (`local.name`)
# and its instance class (`local.instance_class`).

data "ovirt_vm_cpu_topology" "existing" {
  name = local.name
}

locals {
  existing_cpu = data.ovirt_vm_cpu_topology.existing
  # Zeros when there is no VM: never the numCPUs asked for.
  keep_cpu_topology = local.existing_cpu.cpu_sockets * local.existing_cpu.cpu_cores * local.existing_cpu.cpu_threads == local.instance_class.numCPUs
  cpu_sockets       = local.keep_cpu_topology ? local.existing_cpu.cpu_sockets : 1
  cpu_cores         = local.keep_cpu_topology ? local.existing_cpu.cpu_cores : local.instance_class.numCPUs
  cpu_threads       = local.keep_cpu_topology ? local.existing_cpu.cpu_threads : 1
}
