//! Everything against the kit's real API server (OVERCAST_TEST_KUBECONFIG): the ccm, capi, the RBAC proxy, the manifests, the identities, the DVP provider on the simulated parent.
//!
//! One test binary for the area (a module per former test file): a build links it once.

mod capi_adopt_real_cluster;
mod capi_crds_real_cluster;
mod capi_dvp_real_cluster;
mod capi_registration_real_cluster;
mod capi_stalls;
mod capi_upgrade;
mod capi_zvirt_real_cluster;
mod ccm_outage_real_cluster;
mod ccm_real_cluster;
mod ccm_services_real_cluster;
mod deploy_real_cluster;
mod dvp_program;
mod dvp_real_cluster;
mod dvp_snapshots;
mod dvp_stalls;
mod dvp_zones;
mod identity_real_cluster;
mod node_deletion_real_cluster;
mod rbac_proxy_real_cluster;
mod switch_real_cluster;
