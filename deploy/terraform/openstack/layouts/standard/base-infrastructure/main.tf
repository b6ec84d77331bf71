# Standard: the cluster's internal network and subnet (the gateway at .1, addresses from
# .2 to .254, the configured DNS servers), routed to the external network; the layout's
# security group; the SSH key; the masters' anti-affinity group; a bastion when
# `standard.bastion` is given.

module "network_security" {
  source         = "../../../terraform-modules/network-security"
  prefix         = local.prefix
  ssh_allow_list = local.ssh_allow_list
  enabled        = local.network_security
}

module "keypair" {
  source         = "../../../terraform-modules/keypair"
  prefix         = local.prefix
  ssh_public_key = var.providerClusterConfiguration.sshPublicKey
}

data "openstack_networking_network_v2" "external" {
  name = local.external_network_name
}

resource "openstack_networking_network_v2" "internal" {
  name           = local.prefix
  admin_state_up = "true"
}

resource "openstack_networking_subnet_v2" "internal" {
  name            = local.prefix
  network_id      = openstack_networking_network_v2.internal.id
  cidr            = local.internal_network_cidr
  ip_version      = 4
  gateway_ip      = cidrhost(local.internal_network_cidr, 1)
  enable_dhcp     = "true"
  dns_nameservers = local.standard.internalNetworkDNSServers
  allocation_pool {
    start = cidrhost(local.internal_network_cidr, 2)
    end   = cidrhost(local.internal_network_cidr, 254)
  }
}

resource "openstack_networking_router_v2" "router" {
  name                = local.prefix
  admin_state_up      = "true"
  external_network_id = data.openstack_networking_network_v2.external.id
}

resource "openstack_networking_router_interface_v2" "router" {
  router_id = openstack_networking_router_v2.router.id
  subnet_id = openstack_networking_subnet_v2.internal.id
}

resource "openstack_compute_servergroup_v2" "server_group" {
  count    = local.server_group_policy == "AntiAffinity" ? 1 : 0
  name     = local.prefix
  policies = ["anti-affinity"]
}
