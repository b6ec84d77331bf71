//! The real `rbac-proxy` over TLS in front of an upstream, with the faithful fake API
//! answering TokenReviews and SubjectAccessReviews: 401 / 403 / 200, the caller's token
//! never forwarded, decisions cached for the TTL, certificates reloaded when replaced,
//! and resource-attribute authorization.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use overcast_integration::fake_api::FakeApi;
use overcast_integration::*;

use overcast_integration::KillOnDrop as Proc;

fn curl(port: u16, ca: &Path, token: Option<&str>) -> (u16, String) {
    curl_metrics(port, ca, token)
}

fn start_proxy(dir: &Path, kubeconfig: &Path, up: u16, extra: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let child = Command::new(binary("rbac-proxy"))
        .arg(format!("--secure-listen-address=127.0.0.1:{port}"))
        .arg(format!("--upstream=http://127.0.0.1:{up}/"))
        .arg(format!("--tls-cert-file={}", dir.join("tls.crt").display()))
        .arg(format!(
            "--tls-private-key-file={}",
            dir.join("tls.key").display()
        ))
        .arg("--tls-reload-interval-ms=200")
        .arg("--auth-cache-ttl=2")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Proc(child), port)
}

fn reviews(api: &FakeApi, kind: &str) -> usize {
    api.seen()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with(kind))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_authenticates_authorizes_caches_and_never_forwards_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    self_signed_cert(d, "a");
    self_signed_cert(d, "b");
    std::fs::copy(d.join("a.crt"), d.join("tls.crt")).unwrap();
    std::fs::copy(d.join("a.key"), d.join("tls.key")).unwrap();
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = d.join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    api.token("alice-token", "alice", &["monitoring"]);
    api.token("bob-token", "bob", &[]);
    api.allow("alice", "get", "/metrics");
    let heads = Arc::new(Mutex::new(Vec::new()));
    let up = recording_upstream(Arc::clone(&heads)).await;
    let (_proxy, port) = start_proxy(d, &kubeconfig, up, &[]);
    let ca = d.join("a.crt");
    assert!(
        eventually(Duration::from_secs(20), || curl(port, &ca, None).0 != 0).await,
        "the proxy serves TLS"
    );

    assert_eq!(curl(port, &ca, None).0, 401, "no token");
    assert_eq!(curl(port, &ca, Some("forged")).0, 401, "an invalid token");
    let (code, body) = curl(port, &ca, Some("bob-token"));
    assert_eq!(code, 403);
    assert!(body.contains("bob"), "{body}");
    assert!(
        heads.lock().unwrap().is_empty(),
        "nothing unauthorized reached the upstream"
    );
    let (code, body) = curl(port, &ca, Some("alice-token"));
    assert_eq!((code, body.as_str()), (200, "metrics-body"));
    let head = heads.lock().unwrap()[0].to_lowercase();
    assert!(head.starts_with("get /metrics "), "{head}");
    assert!(
        !head.contains("authorization") && !head.contains("alice-token"),
        "the token is never forwarded: {head}"
    );

    // Cached for the TTL, asked again after it.
    let (tr, sar) = (
        reviews(&api, "tokenreviews"),
        reviews(&api, "subjectaccessreviews"),
    );
    for _ in 0..3 {
        assert_eq!(curl(port, &ca, Some("alice-token")).0, 200);
    }
    assert_eq!(
        (
            reviews(&api, "tokenreviews"),
            reviews(&api, "subjectaccessreviews")
        ),
        (tr, sar),
        "answered from the cache"
    );
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(curl(port, &ca, Some("alice-token")).0, 200);
    assert_eq!(
        (
            reviews(&api, "tokenreviews"),
            reviews(&api, "subjectaccessreviews")
        ),
        (tr + 1, sar + 1),
        "reviewed again after the TTL"
    );

    // A rotated certificate is picked up without a restart.
    std::fs::copy(d.join("b.key"), d.join("tls.key")).unwrap();
    std::fs::copy(d.join("b.crt"), d.join("tls.crt")).unwrap();
    let new_ca = d.join("b.crt");
    assert!(
        eventually(Duration::from_secs(5), || curl(
            port,
            &new_ca,
            Some("alice-token")
        )
        .0 == 200)
        .await,
        "the new certificate serves"
    );
    assert_eq!(
        curl(port, &ca, Some("alice-token")).0,
        0,
        "the old one is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_attributes_decide_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    self_signed_cert(d, "tls");
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = d.join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    api.token("alice-token", "alice", &[]);
    api.token("bob-token", "bob", &[]);
    // Allowed on the path is not enough: the resource decides.
    api.allow("bob", "get", "/metrics");
    api.allow("alice", "get", "kube-system/services/proxy/discoverer");
    let up = recording_upstream(Arc::default()).await;
    let extra = [
        "--resource=services",
        "--resource-namespace=kube-system",
        "--resource-subresource=proxy",
        "--resource-name=discoverer",
    ];
    let (_proxy, port) = start_proxy(d, &kubeconfig, up, &extra);
    let ca = d.join("tls.crt");
    assert!(eventually(Duration::from_secs(20), || curl(port, &ca, None).0 != 0).await);
    assert_eq!(curl(port, &ca, Some("alice-token")).0, 200);
    assert_eq!(curl(port, &ca, Some("bob-token")).0, 403);
    let sar = api
        .seen()
        .into_iter()
        .rfind(|r| r.path.ends_with("subjectaccessreviews"))
        .unwrap();
    assert_eq!(
        sar.body["spec"]["resourceAttributes"]["resource"],
        "services"
    );
    assert!(sar.body["spec"]["nonResourceAttributes"].is_null());
    let checked =
        api.assert_calls_within("rbac-proxy", overcast_rbac_proxy::api_calls::API_CALLS, &[]);
    assert!(checked >= 2, "{checked} requests");
}

/// `curl` without a CA: (exit status, http code) for `path`, verifying or not.
fn curl_plain(port: u16, path: &str, verify: bool) -> (i32, u16) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-m", "5", "-w", "%{http_code}"]);
    if !verify {
        cmd.arg("-k");
    }
    let out = cmd
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (out.status.code().unwrap_or(-1), code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_certificate_files_it_serves_a_self_signed_one_and_ignored_paths_skip_auth() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = d.join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    let heads = Arc::new(Mutex::new(Vec::new()));
    let up = recording_upstream(Arc::clone(&heads)).await;
    let port = free_port();
    let _proxy = Proc(
        Command::new(binary("rbac-proxy"))
            .arg(format!("--secure-listen-address=127.0.0.1:{port}"))
            .arg(format!("--upstream=http://127.0.0.1:{up}/"))
            .arg("--ignore-paths=/healthz")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        eventually(Duration::from_secs(20), || curl_plain(
            port, "/healthz", false
        )
        .1 == 200)
        .await,
        "the ignored path answers without a token"
    );
    // 60: curl could not verify the peer — the certificate is self-signed, not trusted.
    assert_eq!(curl_plain(port, "/healthz", true).0, 60);
    assert_eq!(curl_plain(port, "/metrics", false).1, 401);
    assert_eq!(reviews(&api, "tokenreviews"), 0, "no review for /healthz");
    assert!(heads
        .lock()
        .unwrap()
        .iter()
        .all(|h| h.starts_with("GET /healthz ")));
}
