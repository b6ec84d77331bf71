# Terraform >= 1.0 and OpenTofu alike: no optional() attributes, no terraform_data,
# no replace_triggered_by (1.2+).
terraform {
  required_version = ">= 1.0"
  required_providers {
    dvp = {
      source = "overcast/dvp"
    }
  }
}
