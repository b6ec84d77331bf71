# Keystone as the OpenStackClusterConfiguration's `provider` names it: a user and password
# in a project (by name or id) of a domain, or an application credential; its CA (the
# PEM itself) when given; its region.
provider "openstack" {
  auth_url                      = var.providerClusterConfiguration.provider.authURL
  domain_name                   = lookup(var.providerClusterConfiguration.provider, "domainName", "")
  cacert_file                   = lookup(var.providerClusterConfiguration.provider, "caCert", "")
  tenant_name                   = lookup(var.providerClusterConfiguration.provider, "tenantName", "")
  tenant_id                     = lookup(var.providerClusterConfiguration.provider, "tenantID", "")
  user_name                     = lookup(var.providerClusterConfiguration.provider, "username", "")
  password                      = lookup(var.providerClusterConfiguration.provider, "password", "")
  region                        = var.providerClusterConfiguration.provider.region
  application_credential_id     = lookup(var.providerClusterConfiguration.provider, "applicationCredentialId", "")
  application_credential_name   = lookup(var.providerClusterConfiguration.provider, "applicationCredentialName", "")
  application_credential_secret = lookup(var.providerClusterConfiguration.provider, "applicationCredentialSecret", "")
}
