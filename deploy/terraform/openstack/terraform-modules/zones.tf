# Where nodes and their volumes go: Nova's zones (those the configuration's `zones` names,
# when it names some; a set as a list is sorted), and Cinder's, since a cloud's volume
# zones need not be its compute zones — a volume takes its node's zone only where Cinder
# has it.

data "openstack_compute_availability_zones_v2" "nova" {}

data "openstack_blockstorage_availability_zones_v3" "cinder" {
  region = var.providerClusterConfiguration.provider.region
}

locals {
  cluster_zones = (
    lookup(var.providerClusterConfiguration, "zones", null) == null
    ? data.openstack_compute_availability_zones_v2.nova.names
    : tolist(setintersection(data.openstack_compute_availability_zones_v2.nova.names, var.providerClusterConfiguration.zones))
  )
}
