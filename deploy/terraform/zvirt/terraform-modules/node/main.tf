# One node VM: cloned from its template, the boot disk grown, a NIC on the vNIC profile,
# for a master an etcd disk attached, then started; done when its guest reports an
# address.

data "ovirt_templates" "template" {
  name          = var.template
  fail_on_empty = true
}

resource "ovirt_vm" "vm" {
  name        = var.name
  cluster_id  = var.cluster_id
  template_id = tolist(data.ovirt_templates.template.templates)[0].id
  clone       = true

  cpu_sockets = var.cpus
  cpu_cores   = 1
  cpu_threads = 1

  memory            = var.memory_mib * 1024 * 1024
  maximum_memory    = var.memory_mib * 1024 * 1024
  memory_ballooning = false
  vm_type           = var.vm_type

  initialization_custom_script = var.user_data

  lifecycle {
    # The bootstrap is read once, at first boot: a new one must not replace a node.
    ignore_changes = [initialization_custom_script]
  }
}

# Read right after the clone, when the template's disk is the VM's only one.
data "ovirt_disk_attachments" "boot" {
  vm_id = ovirt_vm.vm.id
}

resource "ovirt_disk_resize" "boot" {
  disk_id = tolist(data.ovirt_disk_attachments.boot.attachments)[0].disk_id
  size    = var.root_disk_gib * 1024 * 1024 * 1024

  lifecycle {
    # Once chosen the boot disk is kept: a disk attached later must not take its place.
    ignore_changes = [disk_id]
  }
}

resource "ovirt_nic" "nic" {
  name            = var.nic_name
  vm_id           = ovirt_vm.vm.id
  vnic_profile_id = var.vnic_profile_id
}

resource "ovirt_disk" "kubernetes_data" {
  count             = var.data_disk_gib > 0 ? 1 : 0
  format            = "raw"
  sparse            = false
  size              = var.data_disk_gib * 1024 * 1024 * 1024
  storage_domain_id = var.storage_domain_id
  alias             = "${var.name}-kubernetes-data"
}

resource "ovirt_disk_attachment" "kubernetes_data" {
  count          = var.data_disk_gib > 0 ? 1 : 0
  vm_id          = ovirt_vm.vm.id
  disk_id        = ovirt_disk.kubernetes_data[0].id
  disk_interface = "virtio_scsi"
  bootable       = false
  active         = true

  # After the boot disk was chosen (above): it must be the VM's only disk then.
  depends_on = [ovirt_disk_resize.boot]
}

resource "ovirt_vm_start" "vm" {
  vm_id = ovirt_vm.vm.id
  # Powered off at destroy: a node's guest may not act on an ACPI request.
  stop_behavior = "stop"
  force_stop    = true

  depends_on = [
    ovirt_nic.nic,
    ovirt_disk_resize.boot,
    ovirt_disk_attachment.kubernetes_data,
  ]
}

data "ovirt_wait_for_ip" "vm" {
  vm_id = ovirt_vm_start.vm.vm_id
}
