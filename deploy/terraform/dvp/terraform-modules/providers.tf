# The parent DVP cluster the configuration names (variables.tf), and the namespace of this
# cluster's machines there.
provider "dvp" {
  kubeconfig_base64 = local.kubeconfig_base64
  namespace         = local.configuration.provider.namespace
}
