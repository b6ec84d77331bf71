# The engine the configuration names (variables.tf): its API URL, user and password; its
# CA (base64 PEM) when given, else the engine's certificate is checked against the
# system's CAs unless `insecure`.
provider "ovirt" {
  url           = local.configuration.provider.server
  username      = local.credentials.username
  password      = local.credentials.password
  tls_insecure  = lookup(local.configuration.provider, "insecure", false)
  tls_ca_bundle = base64decode(lookup(local.configuration.provider, "caBundle", ""))
}
