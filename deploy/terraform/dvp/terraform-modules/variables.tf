# What dhctl passes in its -var-file (JSON). Not every module reads every variable.

variable "clusterConfiguration" {
  type = any
}

variable "providerClusterConfiguration" {
  type = any
}

variable "clusterUUID" {
  type    = string
  default = ""
}

variable "nodeIndex" {
  type    = number
  default = 0
}

# A base64 cloud-config dhctl renders for the node (its bootstrap).
variable "cloudConfig" {
  type    = string
  default = ""
}

variable "nodeGroupName" {
  type    = string
  default = ""
}
