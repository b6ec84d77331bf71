variable "name" {
  type = string
}

variable "cluster_id" {
  type = string
}

variable "template" {
  type        = string
  description = "The name of the template the VM is cloned from."
}

variable "cpus" {
  type = number
}

variable "memory_mib" {
  type = number
}

variable "vm_type" {
  type = string
}

variable "root_disk_gib" {
  type = number
}

variable "nic_name" {
  type = string
}

variable "vnic_profile_id" {
  type = string
}

variable "user_data" {
  type      = string
  sensitive = true
}

# The master's etcd disk (raw, not sparse, on `storage_domain_id`); 0: none.
variable "data_disk_gib" {
  type    = number
  default = 0
}

variable "storage_domain_id" {
  type    = string
  default = ""
}
