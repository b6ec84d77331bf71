# StandardWithNoRouter: an internal network and subnet without a gateway (nodes reach out
# through their port on the external network), the layout's security group, the SSH key.

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
  name       = local.prefix
  network_id = openstack_networking_network_v2.internal.id
  cidr       = local.internal_network_cidr
  ip_version = 4
  no_gateway = "true"
}
