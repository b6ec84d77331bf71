# The parent DVP cluster the DVPClusterConfiguration names, and the namespace of this
# cluster's machines there.
provider "dvp" {
  kubeconfig_base64 = var.providerClusterConfiguration.provider.kubeconfigDataBase64
  namespace         = var.providerClusterConfiguration.provider.namespace
}
