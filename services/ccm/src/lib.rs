//! The Overcast cloud-controller-manager: node initialization and address sync, node
//! lifecycle, load balancers, leader election — over the cloud traits, so one binary
//! serves every cloud that has the capabilities.

pub mod addresses;
pub mod api_calls;
#[doc(hidden)]
pub mod fixtures;
pub mod metrics;
pub mod nodes;
pub mod retry;
pub mod routes;
pub mod services;
#[cfg(test)]
use overcast_kube::testing;

pub use api_calls::API_CALLS;

/// Everything a controller can fail with; the error policy counts it by kind.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cloud: {0}")]
    Cloud(#[from] overcast_cloud::CloudError),
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// The API refused a write guarded by a resourceVersion that is no longer current.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube(kube::Error::Api(s)) if s.code == 409)
    }

    /// A short, stable name for metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Kube(kube::Error::Api(_)) => "api",
            Self::Kube(_) => "kube",
            Self::Cloud(_) => "cloud",
            Self::Invalid(_) => "invalid",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The field manager and event reporter name.
pub const MANAGER: &str = "overcast-ccm";
