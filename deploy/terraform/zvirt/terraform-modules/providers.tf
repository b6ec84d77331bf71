# The engine the ZvirtClusterConfiguration names: its API URL, user and password; its CA
# (base64 PEM) when given, else the engine's certificate is checked against the system's
# CAs unless `insecure`.
provider "ovirt" {
  url           = var.providerClusterConfiguration.provider.server
  username      = var.providerClusterConfiguration.provider.username
  password      = var.providerClusterConfiguration.provider.password
  tls_insecure  = lookup(var.providerClusterConfiguration.provider, "insecure", false)
  tls_ca_bundle = base64decode(lookup(var.providerClusterConfiguration.provider, "caBundle", ""))
}
