//! Helpers for tests against a real API server (`OVERCAST_TEST_KUBECONFIG`, the kit's in CI).

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::{pinned_kind, Scope};
use kube::{Api, Client, Config};
use serde_json::json;

use crate::manifests::{kustomizations, Manifests};

/// The namespace our ServiceAccounts live in.
pub const NS: &str = "kube-system";

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

/// A turn with what the services own cluster-wide on the API server [`ENV`] names, held by
/// each test that runs a ccm, the discoverer or capi against it, or writes Nodes there: a
/// ccm initializes, taints and deletes whatever Nodes it finds, another test's among them,
/// and the discoverer, capi and dhctl's records are Secrets and ConfigMaps of fixed names
/// in kube-system (`d8-cloud-provider-discovery-data`, `d8-node-manager-cloud-provider`,
/// `d8-provider-cluster-configuration`, …). A lock on a file (`flock`), so turns are taken
/// across the test binaries a CI run starts side by side as well as within one; the
/// kernel drops it with the process, however the test ends. Take it after any lock of the
/// test's own area (`dvp_sim::PARENT`, the OpenStack tests' `CLOUD`), never before.
///
/// Whoever holds no turn writes no Nodes or Services there, so the `overcast-it-` ones
/// found when a turn begins are an earlier test's that failed before it cleaned up (CI18:
/// one load-balancer test left its Service and Ready Nodes, and six ccm and DVP tests
/// after it in the turn failed on them). They are removed, and named on stderr, before the
/// turn is given.
pub async fn cluster_turn() -> ClusterTurn {
    tokio::task::spawn_blocking(cluster_turn_blocking)
        .await
        .unwrap()
}

/// [`cluster_turn`] for a test that is not async.
pub fn cluster_turn_blocking() -> ClusterTurn {
    let turn = lock_the_cluster();
    if let Ok(kubeconfig) = std::env::var(ENV) {
        // Its own thread and runtime: this may run on a runtime's blocking thread, where
        // another runtime cannot be entered.
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(sweep_leftovers(&kubeconfig))
        })
        .join()
        .expect("the sweep of leftovers panicked");
    }
    turn
}

/// The prefix of every Node and Service a test writes on the shared API server.
pub const LEFTOVER_PREFIX: &str = "overcast-it-";

/// Removes the [`LEFTOVER_PREFIX`] Nodes and Services (their finalizers first: a ccm that
/// is gone cannot release its own) and waits until they are gone.
async fn sweep_leftovers(kubeconfig: &str) {
    use k8s_openapi::api::core::v1::{Node, Service};
    use kube::api::{DeleteParams, ListParams};
    use kube::ResourceExt;
    let c = client(kubeconfig).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let services: Api<Service> = Api::all(c.clone());
    let mut left = Vec::new();
    // The API server may be coming back (an outage test before this turn restarts its
    // etcd and waits for it, but a list can still meet it settling): retried for 30 s.
    async fn listed<K>(api: &Api<K>, what: &str) -> Vec<K>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let mut tries = 0;
        loop {
            match api.list(&ListParams::default()).await {
                Ok(list) => return list.items,
                Err(e) if tries < 30 => {
                    tries += 1;
                    eprintln!("cluster turn: listing {what} failed ({e}); again in 1 s");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Err(e) => panic!("cluster turn: listing {what} failed for 30 s: {e}"),
            }
        }
    }
    for n in listed(&nodes, "Nodes").await {
        if n.name_any().starts_with(LEFTOVER_PREFIX) {
            left.push(format!("Node/{}", n.name_any()));
            let _ = nodes.delete(&n.name_any(), &DeleteParams::default()).await;
        }
    }
    for s in listed(&services, "Services").await {
        if !s.name_any().starts_with(LEFTOVER_PREFIX) {
            continue;
        }
        let ns = s.namespace().unwrap_or_default();
        left.push(format!("Service/{ns}/{}", s.name_any()));
        let api: Api<Service> = Api::namespaced(c.clone(), &ns);
        let released = json!({"metadata": {"finalizers": null}});
        let _ = api
            .patch(
                &s.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&released),
            )
            .await;
        let _ = api.delete(&s.name_any(), &DeleteParams::default()).await;
    }
    if left.is_empty() {
        return;
    }
    eprintln!(
        "cluster turn: removing what an earlier test left on the API server: {}",
        left.join(", ")
    );
    let gone = async || {
        let n = nodes.list(&ListParams::default()).await.ok()?;
        let s = services.list(&ListParams::default()).await.ok()?;
        let mut names = n
            .iter()
            .map(|o| o.name_any())
            .chain(s.iter().map(|o| o.name_any()));
        names
            .all(|name| !name.starts_with(LEFTOVER_PREFIX))
            .then_some(())
    };
    wait_for("the leftovers removed", Duration::from_secs(30), gone).await;
}

fn lock_the_cluster() -> ClusterTurn {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::env::var(ENV).unwrap_or_default().hash(&mut h);
    let path = std::env::temp_dir().join(format!("overcast-kit-cluster-{:016x}.lock", h.finish()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("flock {}: {e}", path.display()));
    ClusterTurn(lock)
}

/// See [`cluster_turn`]: the turn ends when this is dropped.
pub struct ClusterTurn(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

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

/// One request a program made, and the server's answer.
#[derive(Debug, Clone)]
pub struct Heard {
    pub method: String,
    pub path: String,
    pub watch: bool,
    pub status: u16,
}

/// A plain-HTTP listener on loopback that forwards every request to the API server as it
/// came (the caller's own bearer token included) and records it with the answer's status.
pub async fn recorder(upstream: Client) -> (u16, Arc<Mutex<Vec<Heard>>>) {
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let heard: Arc<Mutex<Vec<Heard>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("helper");
    let port = listener.local_addr().expect("helper").port();
    let log = Arc::clone(&heard);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (upstream, log) = (upstream.clone(), Arc::clone(&log));
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (upstream, log) = (upstream.clone(), Arc::clone(&log));
                    async move {
                        use http_body_util::BodyExt;
                        let (parts, body) = req.into_parts();
                        let bytes = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let query = parts.uri.query().unwrap_or_default().to_owned();
                        let path = parts.uri.path().to_owned();
                        let method = parts.method.to_string();
                        let req = hyper::Request::from_parts(
                            parts,
                            kube::client::Body::from(bytes.to_vec()),
                        );
                        let response = match upstream.send(req).await {
                            Ok(r) => r,
                            Err(e) => hyper::Response::builder()
                                .status(502)
                                .body(kube::client::Body::from(e.to_string().into_bytes()))
                                .expect("helper"),
                        };
                        log.lock().expect("helper").push(Heard {
                            method,
                            path,
                            watch: query
                                .split('&')
                                .any(|kv| kv == "watch=true" || kv == "watch=1"),
                            status: response.status().as_u16(),
                        });
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (port, heard)
}

/// A kubeconfig that reaches the API server through the recorder, as `token`.
pub fn token_kubeconfig(dir: &Path, who: &str, port: u16, token: &str) -> String {
    let path = dir.join(format!("{who}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://127.0.0.1:{port}\"}}}}]\n\
             users: [{{name: u, user: {{token: \"{token}\"}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u, namespace: {NS}}}}}]\ncurrent-context: c\n"
        ),
    )
    .expect("helper");
    path.display().to_string()
}

pub async fn token(c: &Client, account: &str) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), NS);
    let req: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}
    }))
    .expect("helper");
    api.create_token_request(account, &PostParams::default(), &req)
        .await
        .unwrap_or_else(|e| panic!("a token for {account}: {e}"))
        .status
        .expect("helper")
        .token
}

/// A client with no credentials: the recorder's, which passes on the caller's own.
pub fn anonymous(admin: &Config) -> Client {
    let mut config = admin.clone();
    config.auth_info = kube::config::AuthInfo::default();
    Client::try_from(config).expect("helper")
}

/// A client that talks as `token` (for SelfSubjectRulesReview).
pub async fn as_account(admin: &Config, token: &str) -> Client {
    let mut config = admin.clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    Client::try_from(config).expect("helper")
}

/// Applies the local overlay's accounts, roles, bindings and CRD, as a cluster admin would.
pub async fn apply_rbac(c: &Client) {
    apply_rbac_of(c, "local").await
}

/// [`apply_rbac`] with the overlay `overlay`'s.
pub async fn apply_rbac_of(c: &Client, overlay: &str) {
    let dir = kustomizations("overlays")
        .into_iter()
        .find(|d| d.ends_with(overlay))
        .expect("helper");
    let m = Manifests::load(&dir).expect("helper");
    let params = PatchParams::apply("overcast-identity-test").force();
    for r in &m.all {
        if !matches!(
            r.kind(),
            "ServiceAccount"
                | "Role"
                | "ClusterRole"
                | "RoleBinding"
                | "ClusterRoleBinding"
                | "CustomResourceDefinition"
        ) {
            continue;
        }
        let api_version = r.object["apiVersion"].as_str().expect("helper");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let (resource, caps) = pinned_kind(c, &GroupVersionKind::gvk(group, version, r.kind()))
            .await
            .expect("helper");
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => {
                Api::namespaced_with(c.clone(), r.namespace().expect("helper"), &resource)
            }
            Scope::Cluster => Api::all_with(c.clone(), &resource),
        };
        api.patch(r.name(), &params, &Patch::Apply(&r.object))
            .await
            .unwrap_or_else(|e| panic!("{} {}: {e}", r.kind(), r.name()));
    }
}

/// The real `rbac-proxy` on a free loopback port in front of `upstream_port`, serving
/// `dir`'s `tls.crt`/`tls.key`, reaching the API server through the recorder on `api_port`
/// as `token`: (the process, its port).
pub fn rbac_proxy_as(
    dir: &Path,
    upstream_port: u16,
    api_port: u16,
    token: &str,
) -> (crate::KillOnDrop, u16) {
    let port = crate::free_port();
    let child = std::process::Command::new(crate::binary("rbac-proxy"))
        .arg(format!("--secure-listen-address=127.0.0.1:{port}"))
        .arg(format!("--upstream=http://127.0.0.1:{upstream_port}/"))
        .arg(format!("--tls-cert-file={}", dir.join("tls.crt").display()))
        .arg(format!(
            "--tls-private-key-file={}",
            dir.join("tls.key").display()
        ))
        .arg(format!(
            "--kubeconfig={}",
            token_kubeconfig(dir, "rbac-proxy", api_port, token)
        ))
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn rbac-proxy");
    (crate::KillOnDrop(child), port)
}

/// The kit's scripts (`kube-up.sh`, …): `OVERCAST_KIT_DIR`, else `../shared/kit` beside the
/// project (as in CI); `None` when they are not there.
pub fn kit_scripts() -> Option<PathBuf> {
    let dir = std::env::var_os("OVERCAST_KIT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::package_dir().join("../../shared/kit"));
    dir.join("kube-up.sh").is_file().then_some(dir)
}

/// A fresh API server of the kit's (`kube-up.sh` in a directory of its own): nothing of
/// another test's is on it. Stopped (`kube-down.sh`) when dropped.
pub struct FreshApiServer {
    kit: PathBuf,
    dir: tempfile::TempDir,
}

impl FreshApiServer {
    /// Started twice at most: a start that fails (CI34: not ready within the kit's 120 s,
    /// a build running beside the tests) is stopped — what it started is ended by
    /// `kube-down.sh` — its logs kept for the message, and tried once more.
    pub fn up(kit: &Path) -> Self {
        let mut failed = Vec::new();
        for _ in 0..2 {
            let server = Self {
                kit: kit.to_owned(),
                dir: tempfile::tempdir().expect("tempdir"),
            };
            let out = std::process::Command::new(kit.join("kube-up.sh"))
                .arg(server.dir.path())
                .output()
                .expect("kube-up.sh");
            if out.status.success() {
                return server;
            }
            failed.push(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                server.log_tails()
            ));
        }
        panic!("kube-up.sh failed twice:\n{}", failed.join("\n---\n"));
    }

    /// The last lines of the API server's and etcd's logs (the kit's own message cannot
    /// show them: its `tail -5` of two files is refused by GNU tail).
    fn log_tails(&self) -> String {
        ["apiserver.log", "etcd.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!(
                    "{f}:\n{}\n",
                    lines[lines.len().saturating_sub(10)..].join("\n")
                )
            })
            .collect()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// `kubectl <args>` as its admin.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("kubectl")
            .env("KUBECONFIG", self.kubeconfig())
            .args(args)
            .output()
            .expect("kubectl")
    }
}

impl Drop for FreshApiServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new(self.kit.join("kube-down.sh"))
            .arg(self.dir.path())
            .output();
    }
}
