//! A TCP endpoint in front of a cloud's API that a test turns hung or refusing: what a
//! cloud whose API process froze (a stopped VM, a full disk, a deadlocked engine) or went
//! away looks like from a service calling it. Below HTTP and TLS, so any cloud's endpoint
//! can sit behind it as it is.
//!
//! - [`Mode::Pass`]: each connection is joined to the upstream's.
//! - [`Mode::Hang`]: connections are accepted and held, nothing read or answered, until
//!   the mode changes (then they are dropped, as a frozen server's would be reset when it
//!   comes back).
//! - [`Mode::Refuse`]: nothing listens at the address (connections are refused) until the
//!   mode changes; the same address is listened on again then.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How the front behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Hang,
    Refuse,
}

pub struct StallFront {
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    /// The mode the front is in: its listener bound or dropped for it.
    applied: watch::Receiver<Mode>,
    task: JoinHandle<()>,
    /// Connections accepted while hung, for tests.
    held: Arc<Mutex<usize>>,
}

impl StallFront {
    /// Listens on a free loopback port, in front of `upstream`, passing.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (mode, mut rx) = watch::channel(Mode::Pass);
        let (applied_tx, applied) = watch::channel(Mode::Pass);
        let held = Arc::new(Mutex::new(0));
        let counted = Arc::clone(&held);
        let task = tokio::spawn(async move {
            let mut listener = Some(listener);
            loop {
                let now = *rx.borrow_and_update();
                match (now, &listener) {
                    (Mode::Refuse, Some(_)) => listener = None,
                    (Mode::Pass | Mode::Hang, None) => {
                        // The same address again: a service keeps the one it was given.
                        listener = Some(bind_again(addr).await);
                    }
                    _ => {}
                }
                applied_tx.send_replace(now);
                let Some(l) = &listener else {
                    if rx.changed().await.is_err() {
                        return;
                    }
                    continue;
                };
                tokio::select! {
                    accepted = l.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let mut until = rx.clone();
                        match now {
                            Mode::Pass => {
                                tokio::spawn(async move {
                                    let Ok(mut up) = TcpStream::connect(upstream).await else {
                                        return;
                                    };
                                    let mut stream = stream;
                                    // Joined until either side ends or the mode changes.
                                    tokio::select! {
                                        _ = tokio::io::copy_bidirectional(&mut stream, &mut up) => {}
                                        _ = until.changed() => {}
                                    }
                                });
                            }
                            Mode::Hang => {
                                *counted.lock().unwrap() += 1;
                                tokio::spawn(async move {
                                    // Held, unread, until the mode changes.
                                    let _stream = stream;
                                    let _ = until.changed().await;
                                });
                            }
                            Mode::Refuse => {}
                        }
                    }
                    changed = rx.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Self {
            addr,
            mode,
            applied,
            task,
            held,
        }
    }

    /// Switches to `mode`, returning once the front is in it: a call made after a switch
    /// back to passing finds the address listening again (the listener is bound anew
    /// after a refusal, which a caller racing it met as a refused connection — CI, the
    /// DVP stalls test).
    pub async fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
        let mut applied = self.applied.clone();
        let _ = applied.wait_for(|m| *m == mode).await;
    }

    /// Connections accepted and held while hung.
    pub fn held(&self) -> usize {
        *self.held.lock().unwrap()
    }
}

async fn bind_again(addr: SocketAddr) -> TcpListener {
    // The port was ours a moment ago; another process taking it in between would be a
    // test machine's accident, said plainly.
    for _ in 0..50 {
        if let Ok(l) = TcpListener::bind(addr).await {
            return l;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{addr}: could not listen again")
}

impl Drop for StallFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a service logs when an endpoint does not answer, and when it answers again
/// (cloud-http's and the DVP parent's lines).
pub const SILENT: &str = "the cloud endpoint does not answer";
pub const BACK: &str = "the cloud endpoint answers again";

/// The time of `endpoint`'s last answer, from the `/metrics` of a service on
/// `metrics_port` (`<prefix>_api_last_success_timestamp_seconds`).
pub fn last_success(prefix: &str, metrics_port: u16, endpoint: &str) -> Option<f64> {
    let (_, page) = crate::http_get(metrics_port, "/metrics");
    let key = format!("{prefix}_api_last_success_timestamp_seconds{{endpoint=\"{endpoint}\"}}");
    page.lines()
        .find_map(|l| l.strip_prefix(&key).map(|v| v.trim().parse().ok()))?
}

/// Lines of `log` that say `what` about `endpoint`.
pub fn said(log: &std::path::Path, what: &str, endpoint: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(what) && l.contains(endpoint))
        .count()
}

/// Waits until `log` has said `what` about `endpoint` `n` times; how long it took.
/// Panics with the log after `limit`.
pub async fn until_said(
    log: &std::path::Path,
    what: &str,
    endpoint: &str,
    n: usize,
    limit: std::time::Duration,
) -> std::time::Duration {
    let t = std::time::Instant::now();
    while said(log, what, endpoint) < n {
        assert!(
            t.elapsed() < limit,
            "{what:?} about {endpoint} said {} times in {limit:?}, not {n}:\n{}",
            said(log, what, endpoint),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    t.elapsed()
}
