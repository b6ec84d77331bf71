# The cluster's SSH key, `<prefix>`: every node is made with it.
resource "openstack_compute_keypair_v2" "ssh" {
  name       = var.prefix
  public_key = var.ssh_public_key
}

variable "prefix" {
  type = string
}

variable "ssh_public_key" {
  type = string
}

output "ssh_name" {
  value = openstack_compute_keypair_v2.ssh.name
}
