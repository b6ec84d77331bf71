# A Simple master: on the external network by name (Nova makes its port), with the
# class's security groups by name. Unlike the other layouts' its server and root volume
# are the state's own (no master module), as Deckhouse's layout keeps them.

locals {
  master_group_names = []
  master_id          = openstack_compute_instance_v2.master.id
}

data "openstack_images_image_v2" "master" {
  name = local.image_name
}

resource "openstack_blockstorage_volume_v3" "master" {
  count                = local.root_disk_size == "" ? 0 : 1
  name                 = "${local.prefix}-master-root-volume-${var.nodeIndex}"
  size                 = local.root_disk_size
  image_id             = data.openstack_images_image_v2.master.id
  metadata             = length(local.master_tags) > 0 ? local.master_tags : null
  volume_type          = local.volume_type
  availability_zone    = local.volume_zone
  enable_online_resize = true

  lifecycle {
    ignore_changes = [metadata, availability_zone]
  }

  timeouts {
    create = var.resourceManagementTimeout
    delete = var.resourceManagementTimeout
  }
}

resource "openstack_compute_instance_v2" "master" {
  name              = "${local.prefix}-master-${var.nodeIndex}"
  image_name        = data.openstack_images_image_v2.master.name
  flavor_name       = local.master_class.flavorName
  key_pair          = local.prefix
  config_drive      = !local.external_network_dhcp
  user_data         = var.cloudConfig == "" ? null : base64decode(var.cloudConfig)
  availability_zone = local.zone
  # None given is Nova's default group: null, as the provider Deckhouse ran read an empty
  # list (its state holds the groups Nova then reports).
  security_groups = length(local.class_group_names) > 0 ? local.class_group_names : null
  metadata        = length(local.master_tags) > 0 ? local.master_tags : null

  network {
    name = local.external_network_name
  }

  dynamic "block_device" {
    for_each = openstack_blockstorage_volume_v3.master
    content {
      uuid                  = block_device.value.id
      boot_index            = 0
      source_type           = "volume"
      destination_type      = "volume"
      delete_on_termination = true
    }
  }

  lifecycle {
    ignore_changes = [user_data]
  }

  timeouts {
    create = var.resourceManagementTimeout
    delete = var.resourceManagementTimeout
    update = var.resourceManagementTimeout
  }
}

# Its one address, on the external network.
output "master_ip_address_for_ssh" {
  value = openstack_compute_instance_v2.master.network[0].fixed_ip_v4
}

output "node_internal_ip_address" {
  value = openstack_compute_instance_v2.master.network[0].fixed_ip_v4
}
