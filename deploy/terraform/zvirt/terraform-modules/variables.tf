# What dhctl passes in its -var-file (JSON). Not every module reads every variable.

variable "clusterConfiguration" {
  type = any
}

# The ZvirtClusterConfiguration: what dhctl passes up to Deckhouse's move of the module to
# a ModuleConfig, and after while a cluster has not moved (null once it has).
variable "providerClusterConfiguration" {
  type    = any
  default = null
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

# After that move, the same configuration as Kubernetes objects: the cloud-provider-zvirt
# ModuleConfig (`settings`), the NodeGroups and ZvirtInstanceClasses by name, and the
# credential Secrets.
variable "settings" {
  type    = any
  default = null
}

variable "nodeGroups" {
  type    = any
  default = {}
}

variable "instanceClasses" {
  type    = any
  default = {}
}

variable "secrets" {
  type    = any
  default = {}
}

# Which shape decides is Deckhouse's rule (`ee/se-plus/modules/030-cloud-provider-zvirt/
# candi/terraform-modules/migration/locals.tf` @cf4bf01): the ZvirtClusterConfiguration
# until the ModuleConfig is version 2, enabled, with settings, the Secret `d8-credentials`
# exists and every node group of the configuration has its NodeGroup and instance class.
# The objects are turned into the configuration's shape here, so every module reads one:
# `local.configuration` (the user and password aside, in `local.credentials`).
locals {
  _pcc     = var.providerClusterConfiguration
  _has_pcc = local._pcc != null && length(try(keys(local._pcc), [])) > 0
  _pcc_groups = concat(
    try(local._pcc.masterNodeGroup.replicas, 0) > 0 ? ["master"] : [],
    [for g in try(local._pcc.nodeGroups, []) : try(g.name, "")],
  )
  # go_lib/cloud-provider/api.BuildInstanceClassName, as the migration names a group's class.
  _class_names = { for n in local._pcc_groups : n => format("%s-%s", replace(substr(n, 0, 50), "/-+$/", ""), substr(sha256(n), 0, 12)) }
  _credentials = try({
    for k, s in var.secrets : try(s.metadata.name, k) => s
    if try(s.type, "") == "cloud-provider.deckhouse.io/credentials"
  }, {})
  _objects_complete = (
    try(var.settings.spec.version, 0) >= 2
    && try(var.settings.spec.enabled, false) == true
    && length(try(keys(var.settings.spec.settings), [])) > 0
    && contains(keys(local._credentials), "d8-credentials")
    && alltrue([
      for n in local._pcc_groups : n != "" && try(var.nodeGroups[n], null) != null && try(var.instanceClasses[
        try(var.nodeGroups[n].spec.cloudInstances.classReference.name, local._class_names[n])
      ], null) != null
    ])
  )
  use_cluster_configuration = local._has_pcc && !local._objects_complete

  _provider = try(var.settings.spec.settings.provider.parameters, {})
  _nodes    = try(var.settings.spec.settings.nodes.parameters, {})
  # A group's class, with the static address the ModuleConfig gave the group where the
  # class has none (`nodes.parameters.customNetworkConfigs[<group>]`: Deckhouse's module
  # read it there before the ZvirtInstanceClass had the field, `master-node/variables.tf`
  # @89d82879; node.tf reads either).
  _groups = [
    for name, g in var.nodeGroups : {
      name     = name
      replicas = try(g.spec.cloudInstances.minPerZone, 1)
      instanceClass = merge(
        try(var.instanceClasses[g.spec.cloudInstances.classReference.name].spec, {}),
        try(var.instanceClasses[g.spec.cloudInstances.classReference.name].spec.customNetworkConfig, null) != null ? {} : {
          customNetworkConfig = try(local._nodes.customNetworkConfigs[name], null)
        },
      )
    }
  ]
  _from_objects = {
    clusterID    = try(local._provider.clusterID, "")
    sshPublicKey = try(local._nodes.sshPublicKey, "")
    provider = {
      server   = try(local._provider.server, "")
      insecure = try(local._provider.insecure, false)
      caBundle = try(local._provider.caBundle, "")
    }
    masterNodeGroup = try([for g in local._groups : g if g.name == "master"][0], null)
    nodeGroups      = [for g in local._groups : g if g.name != "master"]
  }
  # Through JSON, as Deckhouse's module does: the two shapes are objects of other types.
  configuration = jsondecode(local.use_cluster_configuration ? jsonencode(local._pcc) : jsonencode(local._from_objects))

  _secret = try(local._credentials["d8-credentials"], {})
  credentials = local.use_cluster_configuration ? {
    username = try(local._pcc.provider.username, "")
    password = try(local._pcc.provider.password, "")
    } : {
    username = try(local._secret.stringData.identity, base64decode(local._secret.data.identity), "")
    password = try(local._secret.stringData.secret, base64decode(local._secret.data.secret), "")
  }
}
