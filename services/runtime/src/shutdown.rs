//! The signal that ends a service: SIGTERM (what kubelet and the container runtime
//! send) or SIGINT (a person at a terminal).

use std::future::Future;

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal as Number};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// SIGTERM and SIGINT, caught from the moment this is made: a signal that arrives while
/// the service is still starting is kept for [`Signals::received`], not the default
/// action that ends the process where it stands (a socket already bound left behind).
pub struct Signals {
    /// `None` when the handlers could not be installed: then only a kill ends it.
    handlers: Option<(Signal, Signal)>,
    received: bool,
}

impl Signals {
    /// Installs the handlers (inside a tokio runtime).
    pub fn install() -> Self {
        let handlers = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some((term, int)),
            _ => None,
        };
        Self {
            handlers,
            received: false,
        }
    }

    /// Resolves on the first SIGTERM or SIGINT since [`Signals::install`] — at once on
    /// every later call once one came.
    pub async fn received(&mut self) {
        if self.received {
            return;
        }
        let Some((term, int)) = &mut self.handlers else {
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
        }
        self.received = true;
    }
}

/// Resolves on the first SIGTERM or SIGINT after the call.
pub async fn signal_received() {
    Signals::install().received().await
}

/// Runs `body` on a multi-threaded runtime (as `#[tokio::main]` does) with SIGTERM and
/// SIGINT caught from `main`'s first instruction: they are blocked before the runtime
/// starts and unblocked once the handlers are installed, so one sent in between is
/// delivered to the handler then. The runtime's threads keep them blocked and the main
/// thread takes them; a child process starts with its mask cleared (the standard
/// library's spawn resets it).
pub fn run<F, Fut, T>(body: F) -> T
where
    F: FnOnce(Signals) -> Fut,
    Fut: Future<Output = T>,
{
    let mut ending = SigSet::empty();
    ending.add(Number::SIGTERM);
    ending.add(Number::SIGINT);
    // Failing, these leave the signals' default action: the process as it was before.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ending), None);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    runtime.block_on(async move {
        let signals = Signals::install();
        let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&ending), None);
        body(signals).await
    })
}
