# A node of a static NodeGroup: `<prefix>-<nodeGroupName>-<nodeIndex>`, its instance
# class from the configuration's `nodeGroups`.

locals {
  prefix         = var.clusterConfiguration.cloud.prefix
  group          = [for g in lookup(var.providerClusterConfiguration, "nodeGroups", []) : g if g.name == var.nodeGroupName][0]
  instance_class = local.group.instanceClass
  name           = "${local.prefix}-${var.nodeGroupName}-${var.nodeIndex}"
}

module "node" {
  source = "../../../terraform-modules/node"

  name            = local.name
  cluster_id      = var.providerClusterConfiguration.clusterID
  template        = local.instance_class.template
  cpus            = local.instance_class.numCPUs
  memory_mib      = local.instance_class.memory
  vm_type         = lookup(local.instance_class, "vmType", "high_performance")
  root_disk_gib   = lookup(local.instance_class, "rootDiskSizeGb", 50)
  nic_name        = lookup(local.instance_class, "nicName", "nic1")
  vnic_profile_id = local.instance_class.vnicProfileID
  user_data       = local.user_data
}

output "node_internal_ip_address" {
  value = module.node.ip
}
