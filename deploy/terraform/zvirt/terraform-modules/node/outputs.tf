output "ip" {
  value = tolist(tolist(data.ovirt_wait_for_ip.vm.interfaces)[0].ipv4_addresses)[0]
}

output "vm_id" {
  value = ovirt_vm.vm.id
}
