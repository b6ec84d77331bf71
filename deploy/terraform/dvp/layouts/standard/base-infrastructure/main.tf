# The Standard layout makes nothing before the nodes; it tells Deckhouse what the parent
# offers.
output "cloud_discovery_data" {
  value = {
    "apiVersion"     = "deckhouse.io/v1"
    "kind"           = "DVPCloudDiscoveryData"
    "layout"         = var.providerClusterConfiguration.layout
    "zones"          = lookup(var.providerClusterConfiguration, "zones", ["default"])
    "storageClasses" = []
  }
}
