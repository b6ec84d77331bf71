//! The real `rbac-proxy` under attack and with tricky requests (issue 13 §1, §3), the
//! fake API answering its reviews. Attackers connect from 127.0.0.2, the well-behaved
//! client from 127.0.0.1:
//! - connections that never speak are closed (handshake and header deadlines, a cap per
//!   client), and a valid request is served meanwhile, with memory flat;
//! - out of descriptors, the accept loop backs off and logs instead of spinning, and
//!   serves again once descriptors come back;
//! - a spray of garbage tokens costs a bounded number of TokenReviews and no memory
//!   growth, and a valid token is served meanwhile;
//! - a path is authorized as what it reaches (`..`, `%2e%2e`) and forwarded as
//!   authorized; hop-by-hop and made-up identity headers stay behind; the bearer scheme
//!   is case-insensitive; decisions are not shared between users of one name with other
//!   groups; HTTP/2 and HTTP/1.0 clients are served.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use overcast_integration::attacks::{self, ATTACKER};
use overcast_integration::fake_api::FakeApi;
use overcast_integration::*;

struct Setup {
    _dir: tempfile::TempDir,
    api: FakeApi,
    heads: Arc<Mutex<Vec<String>>>,
    proxy: KillOnDrop,
    port: u16,
    ca: std::path::PathBuf,
    log: std::path::PathBuf,
}

async fn setup(extra: &[&str], nofile: Option<u64>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    self_signed_cert(d, "tls");
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = d.join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    api.token("alice-token", "alice", &[]);
    api.allow("alice", "get", "/metrics");
    api.allow("alice", "get", "/metrics/*");
    let heads = Arc::new(Mutex::new(Vec::new()));
    let up = recording_upstream(Arc::clone(&heads)).await;
    let port = free_port();
    let log = d.join("proxy.log");
    let mut cmd = Command::new(binary("rbac-proxy"));
    cmd.arg(format!("--secure-listen-address=127.0.0.1:{port}"))
        .arg(format!("--upstream=http://127.0.0.1:{up}/"))
        .arg(format!("--tls-cert-file={}", d.join("tls.crt").display()))
        .arg(format!(
            "--tls-private-key-file={}",
            d.join("tls.key").display()
        ))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(extra)
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    }
    let proxy = KillOnDrop(cmd.spawn().unwrap());
    let ca = d.join("tls.crt");
    let s = Setup {
        _dir: dir,
        api,
        heads,
        proxy,
        port,
        ca,
        log,
    };
    assert!(
        eventually(Duration::from_secs(20), || curl(&s, "/metrics", &[]).0
            == 401)
        .await,
        "the proxy did not come up"
    );
    s
}

/// curl with the given extra arguments: (status, http version).
fn curl(s: &Setup, path: &str, args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-m",
            "5",
            "-w",
            "%{http_code} %{http_version}",
        ])
        .arg("--cacert")
        .arg(&s.ca)
        .args(args)
        .arg(format!("https://localhost:{}{path}", s.port))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, version) = text.split_once(' ').unwrap_or(("0", ""));
    (code.parse().unwrap_or(0), version.to_owned())
}

fn alice(extra: &[&'static str]) -> Vec<&'static str> {
    let mut a = vec!["-H", "Authorization: Bearer alice-token"];
    a.extend_from_slice(extra);
    a
}

fn reviews(api: &FakeApi, kind: &str) -> usize {
    api.seen()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with(kind))
        .count()
}

fn log_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_headers_schemes_and_protocols() {
    let s = setup(&[], None).await;
    s.api.token("carol-a", "carol", &["monitoring"]);
    s.api.token("carol-b", "carol", &[]);
    s.api.allow("group:monitoring", "get", "/federate");
    let forwarded = |s: &Setup| s.heads.lock().unwrap().clone();

    assert_eq!(curl(&s, "/metrics/x", &alice(&[])).0, 200);
    assert!(forwarded(&s)
        .last()
        .unwrap()
        .starts_with("GET /metrics/x HTTP/1.1"));
    let before = forwarded(&s).len();
    // Each of these reaches /admin, which alice may not get: refused, never forwarded.
    for path in [
        "/metrics/../admin",
        "/metrics/%2e%2e/admin",
        "/metrics/%2E%2e/admin",
        "/metrics/x/../../admin",
    ] {
        assert_eq!(curl(&s, path, &alice(&["--path-as-is"])).0, 403, "{path}");
    }
    for path in [
        "/metrics%2f..%2fadmin",
        "/metrics/..%5cadmin",
        "/../metrics",
    ] {
        assert_eq!(curl(&s, path, &alice(&["--path-as-is"])).0, 400, "{path}");
    }
    assert_eq!(forwarded(&s).len(), before, "nothing forwarded");
    // A path that stays inside is forwarded exactly as authorized.
    assert_eq!(
        curl(&s, "/metrics/x/../y?a=1", &alice(&["--path-as-is"])).0,
        200
    );
    assert!(
        forwarded(&s)
            .last()
            .unwrap()
            .starts_with("GET /metrics/y?a=1 HTTP/1.1"),
        "{:?}",
        forwarded(&s).last()
    );

    // Headers: what Connection names, credentials and made-up identities stay behind.
    assert_eq!(
        curl(
            &s,
            "/metrics",
            // HTTP/1.1: HTTP/2 has no Connection header (curl drops it there).
            &alice(&[
                "--http1.1",
                "-H",
                "Connection: X-Hop",
                "-H",
                "X-Hop: 1",
                "-H",
                "X-Remote-User: system:admin",
                "-H",
                "X-Remote-Group: system:masters",
                "-H",
                "X-Forwarded-For: 10.9.9.9",
            ])
        )
        .0,
        200
    );
    let head = forwarded(&s).last().unwrap().to_ascii_lowercase();
    for absent in [
        "x-hop",
        "x-remote-user",
        "x-remote-group",
        "authorization",
        "10.9.9.9",
    ] {
        assert!(!head.contains(absent), "{absent} forwarded: {head}");
    }
    assert!(head.contains("x-forwarded-for: 127.0.0.1"), "{head}");

    // The scheme is case-insensitive.
    assert_eq!(
        curl(&s, "/metrics", &["-H", "Authorization: bearer alice-token"]).0,
        200
    );
    // One name, other groups: the decision is not shared.
    assert_eq!(
        curl(&s, "/federate", &["-H", "Authorization: Bearer carol-a"]).0,
        200
    );
    assert_eq!(
        curl(&s, "/federate", &["-H", "Authorization: Bearer carol-b"]).0,
        403
    );
    // HTTP/2 (by ALPN) and HTTP/1.0 clients.
    assert_eq!(
        curl(&s, "/metrics", &alice(&["--http2"])),
        (200, "2".to_owned())
    );
    assert_eq!(curl(&s, "/metrics", &alice(&["--http1.0"])).0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_and_a_valid_client_is_served() {
    let s = setup(
        &[
            "--tls-handshake-timeout=2",
            "--header-timeout=2",
            "--max-connections-per-client=64",
        ],
        None,
    )
    .await;
    let pid = s.proxy.0.id();
    let rss_before = rss_kib(pid);
    let mut idle = attacks::idle_connections(s.port, ATTACKER.into(), 600).await;
    assert_eq!(idle.len(), 600, "the kernel accepted them all");
    // Past the cap the proxy closes them at once; the rest at the handshake deadline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(attacks::closed_by_peer(&mut idle).await >= 500);
    let t = Instant::now();
    assert_eq!(curl(&s, "/metrics", &alice(&[])).0, 200);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(attacks::closed_by_peer(&mut idle).await, 600, "all closed");
    let grown = rss_kib(pid).saturating_sub(rss_before);
    assert!(grown < 8 * 1024, "RSS grew {grown} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_accept_loop_backs_off_and_recovers() {
    let s = setup(
        &[
            "--tls-handshake-timeout=2",
            "--max-connections-per-client=10000",
        ],
        Some(64),
    )
    .await;
    let pid = s.proxy.0.id();
    let _idle = attacks::idle_connections(s.port, ATTACKER.into(), 80).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cpu = attacks::cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = attacks::cpu_seconds(pid) - cpu;
    assert!(used < 0.3, "{used} CPU seconds in one second: spinning");
    assert!(
        log_text(&s.log).contains("accept failed"),
        "{}",
        log_text(&s.log)
    );
    // The silent ones are dropped at the handshake deadline; the valid client gets in.
    assert!(
        eventually(Duration::from_secs(10), || curl(
            &s,
            "/metrics",
            &alice(&[])
        )
        .0 == 200)
        .await,
        "never served again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spray_of_garbage_tokens_costs_bounded_reviews_and_memory() {
    let s = setup(&["--token-review-rate=20"], None).await;
    let pid = s.proxy.0.id();
    let config = attacks::tls_config(&s.ca);
    // Warm: the valid client's token is known before the spray.
    let mut valid = attacks::https(s.port, Arc::clone(&config), [127, 0, 0, 1].into())
        .await
        .unwrap();
    assert_eq!(
        attacks::get(&mut valid, "/metrics", "alice-token").await,
        200
    );
    let rss_before = rss_kib(pid);
    let reviews_before = reviews(&s.api, "tokenreviews");
    let started = Instant::now();
    let spray = tokio::spawn(attacks::token_spray(
        s.port,
        Arc::clone(&config),
        ATTACKER.into(),
        6000,
        4,
        "test",
    ));
    let mut served = 0;
    while !spray.is_finished() {
        assert_eq!(
            attacks::get(&mut valid, "/metrics", "alice-token").await,
            200
        );
        served += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = spray.await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    let made = reviews(&s.api, "tokenreviews") - reviews_before;
    // The burst (40) and 20 a second, with a second of slack.
    let bound = 40.0 + 20.0 * (secs + 1.0);
    assert!(
        (made as f64) <= bound,
        "{made} TokenReviews in {secs:.1} s (bound {bound:.0}); statuses {seen:?}"
    );
    assert!(seen.get(&429).copied().unwrap_or(0) > 4000, "{seen:?}");
    assert!(served > 0);
    let grown = rss_kib(pid).saturating_sub(rss_before);
    assert!(grown < 8 * 1024, "RSS grew {grown} KiB");
}
