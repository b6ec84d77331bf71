# Terraform >= 1.0 and OpenTofu alike: no optional() attributes, no terraform_data,
# no replace_triggered_by (1.2+).
# The provider's address is the one Deckhouse's layouts give it, so that a state dhctl
# wrote (`registry.terraform.io/terraform-provider-ovirt/ovirt` under Terraform,
# `registry.opentofu.org/…` under OpenTofu, each resolving this same short address) is
# this provider's state.
terraform {
  required_version = ">= 1.0"
  required_providers {
    ovirt = {
      source = "terraform-provider-ovirt/ovirt"
    }
  }
}
