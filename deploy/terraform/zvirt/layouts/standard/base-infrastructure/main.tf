# The Standard layout makes nothing before the nodes (the network, the template and the
# storage domain are the user's); it tells Deckhouse what the cloud is.
output "cloud_discovery_data" {
  value = {
    "apiVersion"     = "deckhouse.io/v1"
    "kind"           = "ZvirtCloudProviderDiscoveryData"
    "storageDomains" = []
    "zones"          = ["default"]
  }
}
