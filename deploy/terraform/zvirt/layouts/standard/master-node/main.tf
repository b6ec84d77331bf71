# A master: `<prefix>-master-<nodeIndex>`, with its etcd disk (`/dev/sdb`: the VM's
# second SCSI disk, after the template's).

locals {
  prefix         = var.clusterConfiguration.cloud.prefix
  instance_class = var.providerClusterConfiguration.masterNodeGroup.instanceClass
  name           = "${local.prefix}-master-${var.nodeIndex}"
}

module "master" {
  source = "../../../terraform-modules/node"

  name              = local.name
  cluster_id        = var.providerClusterConfiguration.clusterID
  template          = local.instance_class.template
  cpus              = local.instance_class.numCPUs
  memory_mib        = local.instance_class.memory
  vm_type           = lookup(local.instance_class, "vmType", "high_performance")
  root_disk_gib     = lookup(local.instance_class, "rootDiskSizeGb", 50)
  nic_name          = lookup(local.instance_class, "nicName", "nic1")
  vnic_profile_id   = local.instance_class.vnicProfileID
  user_data         = local.user_data
  data_disk_gib     = lookup(local.instance_class, "etcdDiskSizeGb", 10)
  storage_domain_id = local.instance_class.storageDomainID
}

output "master_ip_address_for_ssh" {
  value = module.master.ip
}

output "node_internal_ip_address" {
  value = module.master.ip
}

output "kubernetes_data_device_path" {
  value = "/dev/sdb"
}
