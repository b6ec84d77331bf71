# Terraform >= 1.0 and OpenTofu alike. The provider's address is the one Deckhouse's
# OpenStack layouts give terraform-provider-openstack, so a state dhctl wrote with it
# (`registry.terraform.io/terraform-provider-openstack/openstack`, or
# `registry.opentofu.org/…` under OpenTofu) is this provider's state.
terraform {
  required_version = ">= 1.0"
  required_providers {
    openstack = {
      source = "terraform-provider-openstack/openstack"
    }
  }
}
