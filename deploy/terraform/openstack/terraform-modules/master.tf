# A master's placement, whatever the layout: the zones of masterNodeGroup.volumeTypeMap
# that the cluster has, sorted, taken in turn by index (wrapping round); the volume type
# that zone maps to; the class's root disk ("" boots from the flavor's own disk), etcd
# volume, tags; the anti-affinity server group (masterNodeGroup.serverGroup).

locals {
  master_group        = var.providerClusterConfiguration.masterNodeGroup
  master_class        = local.master_group.instanceClass
  zone                = element(tolist(setintersection(keys(local.master_group.volumeTypeMap), local.cluster_zones)), var.nodeIndex)
  volume_type         = local.master_group.volumeTypeMap[local.zone]
  volume_zone         = contains(data.openstack_blockstorage_availability_zones_v3.cinder.names, local.zone) ? local.zone : null
  root_disk_size      = lookup(local.master_class, "rootDiskSize", "")
  etcd_disk_size      = local.master_class.etcdDiskSizeGb
  master_tags         = merge(local.tags, lookup(local.master_class, "additionalTags", {}))
  master_server_group = lookup(local.master_group, "serverGroup", {})
  class_group_names   = lookup(local.master_class, "additionalSecurityGroups", [])
  server_group_id = (
    lookup(local.master_server_group, "policy", "") == "AntiAffinity" ? data.openstack_compute_servergroup_v2.masters[0].id :
    lookup(local.master_server_group, "policy", "") == "ManuallyManaged" ? local.master_server_group.manuallyManaged.id : ""
  )
}

# The masters' anti-affinity group, made by base-infrastructure (Standard).
data "openstack_compute_servergroup_v2" "masters" {
  count = lookup(local.master_server_group, "policy", "") == "AntiAffinity" ? 1 : 0
  name  = local.prefix
}

# The security groups a master's ports carry, by name.
data "openstack_networking_secgroup_v2" "master" {
  count = length(local.master_group_names)
  name  = local.master_group_names[count.index]
}

module "kubernetes_data" {
  source      = "../../../terraform-modules/kubernetes-data"
  prefix      = local.prefix
  node_index  = var.nodeIndex
  master_id   = local.master_id
  volume_size = local.etcd_disk_size
  volume_type = local.volume_type
  volume_zone = local.volume_zone
  tags        = local.tags
}

output "kubernetes_data_device_path" {
  value = module.kubernetes_data.device_path
}
