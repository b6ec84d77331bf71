# OpenStackCloudDiscoveryData (deckhouse.io/v1): the external network is the nodes' only.
output "cloud_discovery_data" {
  value = {
    "apiVersion"           = "deckhouse.io/v1"
    "kind"                 = "OpenStackCloudDiscoveryData"
    "layout"               = var.providerClusterConfiguration.layout
    "internalNetworkNames" = [data.openstack_networking_network_v2.external.name]
    "podNetworkMode"       = local.pod_network_mode
    "instances" = {
      "sshKeyPairName" = module.keypair.ssh_name
      "imageName"      = local.image_name
      "mainNetwork"    = data.openstack_networking_network_v2.external.name
    }
    "zones" = local.cluster_zones
  }
}
