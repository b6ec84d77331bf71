//! The `rbac-proxy`: what kube-rbac-proxy does, in front of the discoverer's metrics.
//! The binary (`main.rs`) only wires these together.

pub mod api_calls;
pub mod authz;
mod cache;
mod idle;
pub mod limit;
pub mod metrics;
pub mod path;
pub mod proxy;
pub mod server;
pub mod tls;
