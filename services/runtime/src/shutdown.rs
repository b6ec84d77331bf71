//! The signal that ends a service: SIGTERM (what kubelet and the container runtime
//! send) or SIGINT (a person at a terminal).

use tokio::signal::unix::{signal, SignalKind};

/// Resolves on the first SIGTERM or SIGINT.
pub async fn signal_received() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers we can only run until killed.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
}
