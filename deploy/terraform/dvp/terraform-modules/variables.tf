# What dhctl passes in its -var-file (JSON). Not every module reads every variable.

variable "clusterConfiguration" {
  type = any
}

# The DVPClusterConfiguration: what dhctl passes up to Deckhouse 1.76, and after while a
# cluster has not moved to the module's ModuleConfig version 2 (null once it has).
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

# From Deckhouse 1.77 (#20236) on, the same configuration as Kubernetes objects: the
# cloud-provider-dvp ModuleConfig (`settings`), the NodeGroups and DVPInstanceClasses by
# name, and the credential Secrets by name.
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

# Which shape decides is Deckhouse's rule (`modules/030-cloud-provider-dvp/candi/
# terraform-modules/migration/locals.tf` @1cd21b95 for the nodes, `providers.tf` of the
# same module for the parent's kubeconfig): the DVPClusterConfiguration while the new
# objects are incomplete. The new shape is turned into the configuration's here, so every
# module reads one: `local.configuration` (its `provider.kubeconfigDataBase64` aside —
# that is `local.kubeconfig_base64`, kept out of values names and counts are made from).
locals {
  _credentials  = try([for _, s in var.secrets : s if try(s.type, "") == "cloud-provider.deckhouse.io/credentials"], [])
  _master_class = try(var.nodeGroups["master"].spec.cloudInstances.classReference.name, "")
  _objects_complete = (
    try(var.settings.spec.version, 0) >= 2
    && try(var.nodeGroups["master"], null) != null
    && local._master_class != ""
    && try(var.instanceClasses[local._master_class], null) != null
    && length(local._credentials) > 0
  )
  use_cluster_configuration = var.providerClusterConfiguration != null && !local._objects_complete

  _objects_given = try(length(var.secrets) > 0 && length(var.nodeGroups) > 0 && length(var.instanceClasses) > 0, false)
  kubeconfig_base64 = (
    var.providerClusterConfiguration != null && !local._objects_given
    ? try(var.providerClusterConfiguration.provider.kubeconfigDataBase64, "")
    : try([for s in local._credentials : s.stringData.secret if try(s.stringData.secret, null) != null][0], "")
  )

  _nodes = try(var.settings.spec.settings.nodes.parameters, {})
  # A NodeGroup with its DVPInstanceClass's spec, as the configuration lists a group; its
  # addresses are the module's `nodes.parameters.ipAddresses[<group>]`.
  _groups = [
    for name, g in var.nodeGroups : {
      name     = name
      replicas = try(g.spec.cloudInstances.minPerZone, 1)
      zones    = try(g.spec.cloudInstances.zones, null)
      instanceClass = merge(
        try(var.instanceClasses[g.spec.cloudInstances.classReference.name].spec, {}),
        {
          virtualMachine = merge(
            try(var.instanceClasses[g.spec.cloudInstances.classReference.name].spec.virtualMachine, {}),
            { ipAddresses = try(local._nodes.ipAddresses[name], null) },
          )
        },
      )
    }
  ]
  _from_objects = {
    provider = { namespace = try(var.settings.spec.settings.provider.parameters.namespace, "") }
    # Labels for every VM of the cluster, where the module's validator reads them
    # (`ModuleConfig.spec.settings.nodes.parameters.additionalVMLabels`).
    additionalVMLabels = try(local._nodes.additionalVMLabels, {})
    sshPublicKey       = try(local._nodes.sshPublicKey, "")
    region             = try(local._nodes.region, "")
    zones              = try(local._nodes.zones, [])
    masterNodeGroup    = try([for g in local._groups : g if g.name == "master"][0], null)
    nodeGroups         = [for g in local._groups : g if g.name != "master"]
  }
  # Through JSON, as Deckhouse's module does: the two shapes are objects of other types.
  configuration = jsondecode(local.use_cluster_configuration ? jsonencode(var.providerClusterConfiguration) : jsonencode(local._from_objects))
}
