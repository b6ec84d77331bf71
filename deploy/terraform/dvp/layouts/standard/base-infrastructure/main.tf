# The Standard layout makes nothing before the nodes; it tells Deckhouse what the parent
# offers — exactly Deckhouse's output (the cloud data discoverer fills in the rest), so a
# state its layout wrote plans no change here. Its NetworkPolicy `isolated-<prefix>` and its
# checks of the parent (a class and an image that exist) are not made here: `migrate-state`
# leaves the policy in the parent.
output "cloud_discovery_data" {
  value = {
    "apiVersion" = "deckhouse.io/v1"
    "kind"       = "DVPCloudDiscoveryData"
    "zones"      = ["default"]
  }
}
