# Simple: every node sits on the external network itself; the layout makes the SSH key
# alone.

module "keypair" {
  source         = "../../../terraform-modules/keypair"
  prefix         = local.prefix
  ssh_public_key = var.providerClusterConfiguration.sshPublicKey
}

data "openstack_networking_network_v2" "external" {
  name = local.external_network_name
}
