# A StandardWithNoRouter master: its port on the external network first (its default
# route; a config drive gives it its address where that network has no DHCP), then its
# port on the internal one; both with the security groups, or both without.

locals {
  master_group_names = local.network_security ? distinct(concat([local.prefix], local.class_group_names)) : []
  master_id          = module.master.id
}

data "openstack_networking_network_v2" "external" {
  name = local.external_network_name
}

data "openstack_networking_network_v2" "internal" {
  name = local.prefix
}

data "openstack_networking_subnet_v2" "internal" {
  name = local.prefix
}

resource "openstack_networking_port_v2" "master_external_with_security" {
  count              = local.network_security ? 1 : 0
  network_id         = data.openstack_networking_network_v2.external.id
  admin_state_up     = "true"
  security_group_ids = data.openstack_networking_secgroup_v2.master[*].id
}

resource "openstack_networking_port_v2" "master_internal_with_security" {
  count              = local.network_security ? 1 : 0
  network_id         = data.openstack_networking_network_v2.internal.id
  admin_state_up     = "true"
  security_group_ids = data.openstack_networking_secgroup_v2.master[*].id
  fixed_ip {
    subnet_id = data.openstack_networking_subnet_v2.internal.id
  }
  allowed_address_pairs {
    ip_address = local.pod_subnet_cidr
  }
}

resource "openstack_networking_port_v2" "master_external_without_security" {
  count          = local.network_security ? 0 : 1
  network_id     = data.openstack_networking_network_v2.external.id
  admin_state_up = "true"
}

resource "openstack_networking_port_v2" "master_internal_without_security" {
  count          = local.network_security ? 0 : 1
  network_id     = data.openstack_networking_network_v2.internal.id
  admin_state_up = "true"
  fixed_ip {
    subnet_id = data.openstack_networking_subnet_v2.internal.id
  }
}

module "master" {
  source           = "../../../terraform-modules/master"
  prefix           = local.prefix
  node_index       = var.nodeIndex
  cloud_config     = var.cloudConfig
  image_name       = local.image_name
  flavor_name      = local.master_class.flavorName
  root_disk_size   = local.root_disk_size
  tags             = local.master_tags
  keypair_ssh_name = local.prefix
  network_port_ids = concat(
    openstack_networking_port_v2.master_external_with_security[*].id,
    openstack_networking_port_v2.master_internal_with_security[*].id,
    openstack_networking_port_v2.master_external_without_security[*].id,
    openstack_networking_port_v2.master_internal_without_security[*].id,
  )
  internal_network_cidr = local.internal_network_cidr
  config_drive          = !local.external_network_dhcp
  zone                  = local.zone
  volume_type           = local.volume_type
  volume_zone           = local.volume_zone
  server_group_id       = local.server_group_id
}

output "master_ip_address_for_ssh" {
  value = module.master.master_ip_address_for_ssh
}

output "node_internal_ip_address" {
  value = module.master.node_internal_ip_address
}
