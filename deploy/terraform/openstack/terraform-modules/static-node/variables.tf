# What dhctl passes a CloudPermanent node (NodeGroupConfig): the two configurations, the
# group's name, the node's index and its cloud-init; and what the node takes from them,
# by layout.

variable "clusterConfiguration" {
  type = any
}

variable "providerClusterConfiguration" {
  type = any
}

variable "nodeGroupName" {
  type = string
}

variable "nodeIndex" {
  type = string
}

variable "cloudConfig" {
  type    = string
  default = ""
}

variable "clusterUUID" {
  type    = string
  default = ""
}

variable "resourceManagementTimeout" {
  type    = string
  default = "10m"
}

# SimpleWithInternalNetwork: the network of its subnet.
data "openstack_networking_subnet_v2" "internal" {
  count = local.layout == "simpleWithInternalNetwork" ? 1 : 0
  name  = var.providerClusterConfiguration.simpleWithInternalNetwork.internalSubnetName
}

data "openstack_networking_network_v2" "internal" {
  count      = local.layout == "simpleWithInternalNetwork" ? 1 : 0
  network_id = data.openstack_networking_subnet_v2.internal[0].network_id
}

locals {
  prefix          = var.clusterConfiguration.cloud.prefix
  pod_subnet_cidr = var.clusterConfiguration.podSubnetCIDR
  tags            = lookup(var.providerClusterConfiguration, "tags", {})
  # The layout's name as its section is spelled (Standard → standard, …).
  layout         = "${lower(substr(var.providerClusterConfiguration.layout, 0, 1))}${substr(var.providerClusterConfiguration.layout, 1, -1)}"
  section        = lookup(var.providerClusterConfiguration, local.layout, {})
  group          = one([for g in var.providerClusterConfiguration.nodeGroups : g if g.name == var.nodeGroupName])
  class          = local.group.instanceClass
  root_disk_size = lookup(local.class, "rootDiskSize", "")
  node_tags      = merge(local.tags, lookup(local.class, "additionalTags", {}))
  # StandardWithNoRouter's nodes are always on the internal network too (second).
  networks = concat(
    [local.class.mainNetwork],
    local.layout == "standardWithNoRouter" ? [local.prefix] : [],
    lookup(local.class, "additionalNetworks", []),
  )
  networks_without_security = lookup(local.class, "networksWithSecurityDisabled", [])
  floating_ip_pools         = lookup(local.class, "floatingIPPools", [])
  # The layout's group, under internalNetworkSecurity (the Standard layouts).
  layout_group = contains(["standard", "standardWithNoRouter"], local.layout) ? lookup(local.section, "internalNetworkSecurity", true) : false
  # Pods are routed with port security: the pod network is allowed on this network.
  pod_network_mode = contains(["simple", "simpleWithInternalNetwork"], local.layout) ? lookup(local.section, "podNetworkMode", local.layout == "simple" ? "VXLAN" : "DirectRoutingWithPortSecurityEnabled") : ""
  port_security    = local.layout_group || local.pod_network_mode == "DirectRoutingWithPortSecurityEnabled"
  pod_network = (
    local.layout == "simpleWithInternalNetwork" ? data.openstack_networking_network_v2.internal[0].name :
    local.layout == "simple" ? local.section.externalNetworkName :
    local.prefix
  )
  security_group_names = concat(local.layout_group ? [local.prefix] : [], lookup(local.class, "additionalSecurityGroups", []))
}
