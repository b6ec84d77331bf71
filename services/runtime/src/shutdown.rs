//! The signal that ends a service: SIGTERM (what kubelet and the container runtime
//! send) or SIGINT (a person at a terminal).

use std::future::Future;

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
    // Failing, these leave the signals' default action: the process as it was before.
    mask(libc::SIG_BLOCK);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    runtime.block_on(async move {
        let signals = Signals::install();
        mask(libc::SIG_UNBLOCK);
        body(signals).await
    })
}

/// Blocks or unblocks SIGTERM and SIGINT on the calling thread (`how`: `SIG_BLOCK` or
/// `SIG_UNBLOCK`). Through libc, as tokio does: the provider crates that build on this
/// one carry no system-call crate of the local cloud's (`cloud-local/tests/seam.rs`).
fn mask(how: libc::c_int) {
    // SAFETY: `set` is initialised by sigemptyset before use; pthread_sigmask only reads
    // it, and changes nothing but this thread's mask.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}
