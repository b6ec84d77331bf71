# The bastion (`standard.bastion`): `<prefix>-bastion` on the internal network, booted
# from its own volume (rootDiskSize, 30 GiB when the class says none), in its zone (else
# the cluster's first), with the cluster's key and a floating IP from the external
# network — the way in when the masters have none.

locals {
  bastion        = lookup(local.standard, "bastion", {})
  bastions       = local.bastion == {} ? 0 : 1
  bastion_class  = lookup(local.bastion, "instanceClass", {})
  bastion_name   = "${local.prefix}-bastion"
  bastion_image  = coalesce(lookup(local.bastion_class, "imageName", null), local.image_name)
  bastion_zone   = coalesce(lookup(local.bastion, "zone", null), local.cluster_zones[0])
  bastion_tags   = merge(local.tags, lookup(local.bastion_class, "additionalTags", {}))
  bastion_cinder = contains(data.openstack_blockstorage_availability_zones_v3.cinder.names, local.bastion_zone) ? local.bastion_zone : null
}

data "openstack_images_image_v2" "image" {
  count = local.bastions
  name  = local.bastion_image
}

resource "openstack_networking_port_v2" "bastion" {
  count          = local.bastions
  name           = local.bastion_name
  network_id     = openstack_networking_network_v2.internal.id
  admin_state_up = "true"
  fixed_ip {
    subnet_id = openstack_networking_subnet_v2.internal.id
  }
}

resource "openstack_blockstorage_volume_v3" "root" {
  count                = local.bastions
  name                 = "${local.bastion_name}-root-volume"
  size                 = lookup(local.bastion_class, "rootDiskSize", "30")
  image_id             = data.openstack_images_image_v2.image[0].id
  metadata             = local.bastion_tags
  volume_type          = lookup(local.bastion, "volumeType", null)
  availability_zone    = local.bastion_cinder
  enable_online_resize = true

  lifecycle {
    ignore_changes = [metadata, availability_zone]
  }

  timeouts {
    create = var.resourceManagementTimeout
    delete = var.resourceManagementTimeout
  }
}

resource "openstack_compute_instance_v2" "bastion" {
  count             = local.bastions
  name              = local.bastion_name
  image_name        = local.bastion_image
  flavor_name       = lookup(local.bastion_class, "flavorName", null)
  key_pair          = local.prefix
  config_drive      = false
  availability_zone = local.bastion_zone
  metadata          = length(local.bastion_tags) > 0 ? local.bastion_tags : null

  network {
    port = openstack_networking_port_v2.bastion[0].id
  }

  block_device {
    uuid                  = openstack_blockstorage_volume_v3.root[0].id
    boot_index            = 0
    source_type           = "volume"
    destination_type      = "volume"
    delete_on_termination = true
  }

  timeouts {
    create = var.resourceManagementTimeout
    delete = var.resourceManagementTimeout
    update = var.resourceManagementTimeout
  }
}

resource "openstack_compute_floatingip_v2" "bastion" {
  count = local.bastions
  pool  = local.external_network_name
}

resource "openstack_compute_floatingip_associate_v2" "bastion" {
  count                 = local.bastions
  floating_ip           = openstack_compute_floatingip_v2.bastion[0].address
  instance_id           = openstack_compute_instance_v2.bastion[0].id
  wait_until_associated = true

  lifecycle {
    ignore_changes = [wait_until_associated]
  }
}

output "bastion_ip_address_for_ssh" {
  value = local.bastions == 1 ? openstack_compute_floatingip_v2.bastion[0].address : ""
}
