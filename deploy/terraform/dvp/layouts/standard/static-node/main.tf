# A node of a static NodeGroup: `<prefix>-<nodeGroupName>-<nodeIndex>` (its hostname) in a
# VM `<hostname>-<hash>`, its instance class from the configuration's `nodeGroups`,
# booting its root disk — what Deckhouse's static-node layout makes, named as it names
# them (node.tf). Like Deckhouse's, the module has no outputs.

locals {
  group          = [for g in lookup(local.configuration, "nodeGroups", []) : g if g.name == var.nodeGroupName][0]
  node_group     = local.group.name
  instance_class = local.group.instanceClass

  data_disk_hashes = {}
  data_disks       = []
}
