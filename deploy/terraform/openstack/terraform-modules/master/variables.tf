variable "prefix" {
  type = string
}

variable "node_index" {
  type = string
}

variable "image_name" {
  type = string
}

variable "flavor_name" {
  type = string
}

# GiB, or "" to boot from the flavor's disk.
variable "root_disk_size" {
  type = string
}

# The configuration's tags and the class's additionalTags: the server's and its root
# volume's metadata.
variable "tags" {
  type = map(string)
}

variable "keypair_ssh_name" {
  type = string
}

variable "network_port_ids" {
  type = list(string)
}

# The network whose address is the master's internal one (node_internal_ip_address).
variable "internal_network_cidr" {
  type = string
}

# A pool to take a floating IP from, or "" for none.
variable "floating_ip_network" {
  type    = string
  default = ""
}

variable "config_drive" {
  type    = bool
  default = false
}

variable "cloud_config" {
  type = string
}

variable "zone" {
  type = string
}

variable "volume_type" {
  type = string
}

variable "volume_zone" {
  type = string
}

# The server group of the masters' anti-affinity, or "".
variable "server_group_id" {
  type    = string
  default = ""
}

variable "resourceManagementTimeout" {
  type    = string
  default = "10m"
}
