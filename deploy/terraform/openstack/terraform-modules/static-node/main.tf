# A CloudPermanent node, `<prefix>-<nodeGroupName>-<i>`: a port on each of its class's
# networks, main one first (all named after the node; the layout's and the class's
# security groups, unless the network is in networksWithSecurityDisabled; the pod network
# as an allowed address pair on the network pods are routed over with port security), its
# root volume (rootDiskSize, else the flavor's own disk), its zone (the group's zones in
# turn), a floating IP from each of its floatingIPPools. One root module for every layout.

locals {
  node_name  = "${local.prefix}-${var.nodeGroupName}-${var.nodeIndex}"
  node_zones = lookup(local.group, "zones", null) == null ? local.cluster_zones : tolist(setintersection(local.cluster_zones, local.group.zones))
  node_zone  = element(local.node_zones, var.nodeIndex)
  # The volume type: the one volumeTypeMap gives the index's zone among those it names
  # (which can differ from the server's zone when the map names other zones, as
  # Deckhouse's layout picks it).
  type_map    = lookup(local.group, "volumeTypeMap", {})
  type_zone   = local.type_map == {} ? null : element(tolist(setintersection(keys(local.type_map), local.node_zones)), var.nodeIndex)
  volume_type = local.type_map == {} ? null : local.type_map[local.type_zone]
  volume_zone = contains(data.openstack_blockstorage_availability_zones_v3.cinder.names, local.node_zone) ? local.node_zone : null
}

data "openstack_images_image_v2" "image" {
  name = local.class.imageName
}

data "openstack_networking_network_v2" "network" {
  count = length(local.networks)
  name  = local.networks[count.index]
}

data "openstack_networking_secgroup_v2" "group" {
  count = length(local.security_group_names)
  name  = local.security_group_names[count.index]
}

resource "openstack_networking_port_v2" "port" {
  count              = length(local.networks)
  name               = local.node_name
  network_id         = data.openstack_networking_network_v2.network[count.index].id
  admin_state_up     = "true"
  security_group_ids = contains(local.networks_without_security, local.networks[count.index]) ? [] : distinct(data.openstack_networking_secgroup_v2.group[*].id)

  dynamic "allowed_address_pairs" {
    for_each = local.port_security && local.networks[count.index] == local.pod_network ? [local.pod_subnet_cidr] : []
    content {
      ip_address = allowed_address_pairs.value
    }
  }
}

resource "openstack_blockstorage_volume_v3" "volume" {
  count                = local.root_disk_size == "" ? 0 : 1
  name                 = local.node_name
  size                 = local.root_disk_size
  image_id             = data.openstack_images_image_v2.image.id
  metadata             = local.node_tags
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

resource "openstack_compute_instance_v2" "node" {
  name              = local.node_name
  image_name        = data.openstack_images_image_v2.image.name
  flavor_name       = local.class.flavorName
  key_pair          = local.prefix
  config_drive      = lookup(local.class, "configDrive", false)
  user_data         = var.cloudConfig == "" ? "" : base64decode(var.cloudConfig)
  availability_zone = local.node_zone
  metadata          = local.node_tags

  dynamic "network" {
    for_each = openstack_networking_port_v2.port
    content {
      port = network.value.id
    }
  }

  dynamic "block_device" {
    for_each = openstack_blockstorage_volume_v3.volume
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

resource "openstack_compute_floatingip_v2" "floating_ip" {
  count = length(local.floating_ip_pools)
  pool  = local.floating_ip_pools[count.index]
}

resource "openstack_compute_floatingip_associate_v2" "node" {
  count                 = length(local.floating_ip_pools)
  floating_ip           = openstack_compute_floatingip_v2.floating_ip[count.index].address
  instance_id           = openstack_compute_instance_v2.node.id
  wait_until_associated = true

  lifecycle {
    ignore_changes = [wait_until_associated]
  }
}
