# A master, `<prefix>-master-<i>`, and what is its alone: its root volume (when the class
# sets rootDiskSize; else it boots from the flavor's own disk), its floating IP (when
# the layout gives one). Its ports, security groups and etcd volume are the layout's.
# cloud-init is read at first boot only: a later one changes nothing here.

data "openstack_images_image_v2" "master" {
  name = var.image_name
}

resource "openstack_blockstorage_volume_v3" "master" {
  count                = var.root_disk_size == "" ? 0 : 1
  name                 = "${var.prefix}-master-root-volume-${var.node_index}"
  size                 = var.root_disk_size
  image_id             = data.openstack_images_image_v2.master.id
  metadata             = var.tags
  volume_type          = var.volume_type
  availability_zone    = var.volume_zone
  enable_online_resize = true

  # Set once: the volume keeps what it was made with.
  lifecycle {
    ignore_changes = [metadata, availability_zone]
  }

  timeouts {
    create = var.resourceManagementTimeout
    delete = var.resourceManagementTimeout
  }
}

resource "openstack_compute_instance_v2" "master" {
  name              = "${var.prefix}-master-${var.node_index}"
  image_name        = data.openstack_images_image_v2.master.name
  flavor_name       = var.flavor_name
  key_pair          = var.keypair_ssh_name
  config_drive      = var.config_drive
  user_data         = var.cloud_config == "" ? null : base64decode(var.cloud_config)
  availability_zone = var.zone
  metadata          = length(var.tags) > 0 ? var.tags : null

  dynamic "network" {
    for_each = var.network_port_ids
    content {
      port = network.value
    }
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

  dynamic "scheduler_hints" {
    for_each = var.server_group_id == "" ? [] : [var.server_group_id]
    content {
      group = scheduler_hints.value
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

resource "openstack_compute_floatingip_v2" "master" {
  count = var.floating_ip_network == "" ? 0 : 1
  pool  = var.floating_ip_network
}

resource "openstack_compute_floatingip_associate_v2" "master" {
  count                 = var.floating_ip_network == "" ? 0 : 1
  floating_ip           = openstack_compute_floatingip_v2.master[0].address
  instance_id           = openstack_compute_instance_v2.master.id
  wait_until_associated = true

  lifecycle {
    ignore_changes = [wait_until_associated]
  }
}
