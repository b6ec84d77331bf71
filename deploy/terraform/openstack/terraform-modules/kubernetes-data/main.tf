# A master's etcd and certificates volume, `<prefix>-kubernetes-data-<i>`, attached to it;
# grown in place (online) when etcdDiskSizeGb grows.
resource "openstack_blockstorage_volume_v3" "kubernetes_data" {
  name                 = join("-", [var.prefix, "kubernetes-data", var.node_index])
  description          = "volume for etcd and kubernetes certs"
  size                 = var.volume_size
  volume_type          = var.volume_type
  availability_zone    = var.volume_zone
  enable_online_resize = true
  metadata             = var.tags

  lifecycle {
    ignore_changes = [
      metadata,
      availability_zone,
    ]
  }

  timeouts {
    create = var.resourceManagementTimeout
    delete = var.resourceManagementTimeout
  }
}

resource "openstack_compute_volume_attach_v2" "kubernetes_data" {
  instance_id = var.master_id
  volume_id   = openstack_blockstorage_volume_v3.kubernetes_data.id
}

variable "prefix" {
  type = string
}

variable "node_index" {
  type = string
}

variable "master_id" {
  type = string
}

variable "volume_size" {
  type = number
}

variable "volume_type" {
  type = string
}

variable "volume_zone" {
  type = string
}

variable "tags" {
  type = map(string)
}

variable "resourceManagementTimeout" {
  type    = string
  default = "10m"
}

output "device_path" {
  value = openstack_compute_volume_attach_v2.kubernetes_data.device
}
