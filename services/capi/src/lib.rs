//! The Cluster API infrastructure providers: capz's kinds on zVirt (the engine's VMs,
//! through `overcast_cloud_zvirt`), and the kinds' CRDs for DVP too. The DVP controllers
//! are not built yet.

pub mod api_calls;
pub mod conditions;
pub mod core;
pub mod crd;
pub mod dvp;
pub mod registration;
pub mod retry;
pub mod zvirt;

use overcast_cloud::CloudError;

/// What a reconcile can fail with; every one is retried with backoff, and none drops a
/// finalizer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("cloud: {0}")]
    Cloud(#[from] CloudError),
    #[error("{0}")]
    Invalid(String),
    #[error("finalizer: {0}")]
    Finalizer(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
