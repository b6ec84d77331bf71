//! The vSphere provider against vcsim (govmomi's simulator: SOAP `/sdk`, CNS
//! `/vsanHealth`, REST tagging), one vcsim per test. Runs when `OVERCAST_TEST_VCSIM`
//! names the vcsim binary (`.ci/run` builds it and sets it); says it was skipped
//! otherwise.

use std::sync::Arc;
use std::time::Duration;

use overcast_cloud_http::{ApiMetrics, HttpSettings};
use overcast_cloud_vsphere::credentials::Credential;
use overcast_cloud_vsphere::session::{Login, Target, Vcenter};
use overcast_integration::vcsim::Vcsim;

/// A client of `sim`'s vCenter, its calls counted in `metrics`.
fn vcenter(sim: &Vcsim, metrics: &Arc<ApiMetrics>) -> Arc<Vcenter> {
    vcenter_at(sim, sim.port, metrics)
}

/// A client of `sim`'s vCenter through `port` (a front before it).
fn vcenter_at(sim: &Vcsim, port: u16, metrics: &Arc<ApiMetrics>) -> Arc<Vcenter> {
    sim.admin(port, Some(Arc::clone(metrics)))
}

/// Waits up to `limit` seconds for `f` to give a value.
async fn wait<T>(what: &str, limit: u64, f: impl AsyncFnMut() -> Option<T>) -> T {
    overcast_integration::real::wait_for(what, Duration::from_secs(limit), f).await
}

/// Whether the Node carries a taint `key`.
fn tainted(n: &k8s_openapi::api::core::v1::Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

/// The real ccm with the kit's API server.
mod ccm;
/// The real ccm keeps the Node of an inaccessible VM.
mod ccm_inaccessible;
/// The real ccm's credentials from the Secret its vsphere.conf names.
mod ccm_secret;
/// A class's parameters on a repeated create and a validation, through the socket.
mod class_parameters;
/// The CNS calls.
mod cns;
/// The CNS snapshot front before vcsim, by raw CNS calls.
mod cns_snapshots;
/// What the csi binary's RPCs cost the vCenter at 10 and 500 VMs.
mod costs;
/// A create retried while its task runs.
mod creates;
/// The real csi binary through a volume's life.
mod csi;
/// Deckhouse's discovery data.
mod discovery;
/// CNS volumes as the CSI controller's disks: the conformance suite.
mod disks;
/// A create whose task failed: not replayed, one volume once there is space.
mod failed_creates;
/// An attach CNS finds in use: done, under way, or held by the VM it names.
mod in_use;
/// The CPI's instances: identity, addresses, tag zones, sessions, outages.
mod instances;
/// Instances: the inventory in one call, sessions.
mod inventory;
/// `overcast-sim vsphere` as the quickstart runs it.
mod program;
/// Shaping vcsim's inventory.
mod sim;
/// CNS snapshots through the csi binary's socket, and a switched cluster's.
mod snapshots;
/// Volume topology: zones from tags, datastores every host of a zone mounts.
mod topology;
/// A volume vsphere-csi-driver's node staged, after the switch to ours.
mod upstream;
/// vsphere-csi-driver's volumes made as it makes them, listed and served by its cluster id.
mod upstream_cluster;
