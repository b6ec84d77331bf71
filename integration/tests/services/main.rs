//! The other services and what ships them, without a cluster: the ccm on scripted clouds, the discoverer, the RBAC proxy, the manifests, the alerts, the reference page.
//!
//! One test binary for the area (a module per former test file): a build links it once.

mod ccm;
mod deploy;
mod discoverer;
mod docs_names;
mod monitoring;
mod rbac_proxy;
mod rbac_proxy_hardening;
mod reference;
mod release;
