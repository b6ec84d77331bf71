# dhctl's bootstrap (a base64 cloud-config) with the node's hostname and key; each node
# module names the node (`local.name`).
locals {
  ssh_key = lookup(local.configuration, "sshPublicKey", "")
  user_data = join("\n", ["#cloud-config", yamlencode(merge(
    {
      "hostname"             = local.name
      "create_hostname_file" = true
      "ssh_authorized_keys"  = local.ssh_key == "" ? [] : [local.ssh_key]
    },
    var.cloudConfig == "" ? {} : yamldecode(base64decode(var.cloudConfig)),
  ))])
}
