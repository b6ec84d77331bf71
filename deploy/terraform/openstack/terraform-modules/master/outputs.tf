output "id" {
  value = openstack_compute_instance_v2.master.id
}

# Its address on the internal network, whichever of its ports that is.
output "node_internal_ip_address" {
  value = one([
    for nic in openstack_compute_instance_v2.master.network : nic.fixed_ip_v4
    if cidrhost("${nic.fixed_ip_v4}/${split("/", var.internal_network_cidr)[1]}", 0) == cidrhost(var.internal_network_cidr, 0)
  ])
}

# Its floating IP, else its first port's address.
output "master_ip_address_for_ssh" {
  value = var.floating_ip_network == "" ? openstack_compute_instance_v2.master.network[0].fixed_ip_v4 : openstack_compute_floatingip_v2.master[0].address
}
