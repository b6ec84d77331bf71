//! Server plumbing every Overcast service shares: logging set-up, Unix-socket
//! endpoints, shutdown on signals, the gRPC logging/metrics layer and a small HTTP
//! server for `/metrics` and `/healthz`.

pub mod authority;
pub mod backoff;
pub mod client;
pub mod grpc_log;
pub mod host;
pub mod http;
pub mod logging;
pub mod shutdown;
pub mod socket;

pub use grpc_log::{GrpcLogLayer, GrpcMetrics};
pub use logging::LogFormat;
