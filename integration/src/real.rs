//! Helpers for tests against a real API server (`OVERCAST_TEST_KUBECONFIG`, the kit's in CI).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::{Client, Config};

/// The variable naming the disposable cluster's admin kubeconfig.
pub const ENV: &str = "OVERCAST_TEST_KUBECONFIG";

/// The admin kubeconfig, or `None` after saying clearly that `what` was skipped.
pub fn kubeconfig(what: &str) -> Option<String> {
    match std::env::var(ENV) {
        Ok(path) => Some(path),
        Err(_) => {
            crate::say_skipped(&format!(
                "set {ENV} to a disposable cluster's kubeconfig to run {what} against a real API server"
            ));
            None
        }
    }
}

pub async fn client(path: &str) -> Client {
    let kc = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// Polls `f` every 200 ms until it gives a value; panics after `limit`.
pub async fn wait_for<T>(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The kit's state directory (`kube-up.sh DIR`): where its `pids` file is.
pub fn kit_dir(kubeconfig: &str) -> PathBuf {
    Path::new(kubeconfig)
        .parent()
        .expect("kubeconfig in the kit's directory")
        .to_path_buf()
}

/// The kit's etcd, by the pid `kube-up.sh` recorded (its command name checked), if this
/// cluster is the kit's.
pub fn kit_etcd(kubeconfig: &str) -> Option<i32> {
    let pids = std::fs::read_to_string(kit_dir(kubeconfig).join("pids")).ok()?;
    pids.lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "etcd")
        })
}

/// etcd stopped (SIGSTOP) for as long as this lives: the API server accepts requests and
/// cannot answer them, as in a storage outage. Resumed on drop, also when a test fails.
pub struct EtcdStopped(i32);

impl EtcdStopped {
    pub fn new(pid: i32) -> Self {
        // SAFETY: kill(2) with a pid the kit recorded and checked to be etcd.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP etcd");
        Self(pid)
    }
}

impl Drop for EtcdStopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// One sample of a Prometheus text exposition: the value of the line starting `series `.
pub fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
