//! Issue 13 §1 and §3 replayed with a real API server answering the rbac-proxy's
//! TokenReviews and SubjectAccessReviews, the proxy running as its shipped ServiceAccount
//! (a TokenRequest token, through a recorder that counts its reviews). Runs only when
//! `OVERCAST_TEST_KUBECONFIG` names a disposable cluster's admin kubeconfig; otherwise it
//! says clearly that it was skipped.
//!
//! - With `nonResourceURLs: ["/metrics", "/metrics/*"]` granted, `/metrics/../admin`,
//!   `/metrics/%2e%2e/admin` and `/metrics/x/../../admin` are `/admin` — which the real
//!   server does not allow — and nothing reaches the upstream; `/metrics/x` is allowed and
//!   forwarded as exactly that.
//! - A lower-case `bearer` is a bearer token; a client's own `X-Remote-User` and
//!   `X-Forwarded-For` never reach the upstream.
//! - Thousands of garbage tokens cost a bounded number of TokenReviews (20/s per client,
//!   bursts of 40), the rest are answered 429, and a valid token is served meanwhile.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::Api;
use overcast_integration::attacks::{self, ATTACKER};
use overcast_integration::real::{self, anonymous, apply_rbac, recorder, token, wait_for, NS};
use overcast_integration::{recording_upstream, self_signed_cert};
use serde_json::json;

const PROXY: &str = "overcast-rbac-proxy";
const SCRAPER: &str = "overcast-it-rp-scraper";
const ROLE: &str = "overcast-it-rp-metrics-subpaths";

/// GET `path` with these headers; the status.
async fn get(
    send: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    path: &str,
    headers: &[(&str, &str)],
) -> u16 {
    let mut req = hyper::Request::get(path).header("host", "localhost");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send.ready().await.unwrap();
    let resp = send
        .send_request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_authorizes_what_it_forwards_and_holds_under_a_token_spray() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(admin_path) = real::kubeconfig("the rbac-proxy real-cluster test") else {
        return;
    };
    let admin = real::client(&admin_path).await;
    let admin_config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&admin_path).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    apply_rbac(&admin).await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    let _ = sas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": SCRAPER}})).unwrap(),
        )
        .await;
    let ssa = PatchParams::apply("overcast-rbac-proxy-test").force();
    let roles: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
        )),
    );
    let bindings: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
        )),
    );
    roles
        .patch(ROLE, &ssa, &Patch::Apply(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE},
            "rules": [{"nonResourceURLs": ["/metrics", "/metrics/*", "/rbac-proxy/metrics"], "verbs": ["get"]}],
        })))
        .await
        .unwrap();
    bindings
        .patch(ROLE, &ssa, &Patch::Apply(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": NS}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        })))
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    self_signed_cert(d, "tls");
    let (api_port, heard) = recorder(anonymous(&admin_config)).await;
    let proxy_token = token(&admin, PROXY).await;
    let heads = Arc::new(Mutex::new(Vec::new()));
    let up = recording_upstream(Arc::clone(&heads)).await;
    let (proxy, port) = real::rbac_proxy_as(d, up, api_port, &proxy_token);
    let scraper = token(&admin, SCRAPER).await;
    let bearer = format!("Bearer {scraper}");
    let tls = attacks::tls_config(&d.join("tls.crt"));
    let mut client = wait_for("the proxy", Duration::from_secs(20), async || {
        attacks::https(port, Arc::clone(&tls), "127.0.0.1".parse().unwrap())
            .await
            .ok()
    })
    .await;

    // §3: authorized as what it reaches, forwarded as authorized.
    assert_eq!(
        get(&mut client, "/metrics/x", &[("authorization", &bearer)]).await,
        200
    );
    for sneaky in [
        "/metrics/../admin",
        "/metrics/%2e%2e/admin",
        "/metrics/x/../../admin",
        "/metrics/%2E%2E/admin",
    ] {
        assert_eq!(
            get(&mut client, sneaky, &[("authorization", &bearer)]).await,
            403,
            "{sneaky}"
        );
    }
    assert_eq!(
        get(
            &mut client,
            "/metrics",
            &[
                ("authorization", &format!("bearer {scraper}")),
                ("x-remote-user", "system:admin"),
                ("x-forwarded-for", "10.0.0.1")
            ]
        )
        .await,
        200,
        "a lower-case bearer scheme"
    );
    {
        let heads = heads.lock().unwrap();
        assert_eq!(heads.len(), 2, "{heads:?}");
        assert!(heads[0].starts_with("GET /metrics/x "), "{}", heads[0]);
        assert!(heads.iter().all(|h| !h.contains("admin")), "{heads:?}");
        let last = heads[1].to_ascii_lowercase();
        assert!(!last.contains("x-remote-user"), "{last}");
        assert!(!last.contains("10.0.0.1"), "{last}");
        assert!(!last.contains("authorization"), "{last}");
    }

    // §1: a spray of garbage tokens from another address, a valid client served meanwhile.
    let reviews = || {
        heard
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.method == "POST" && h.path.ends_with("/tokenreviews"))
            .count()
    };
    let before = reviews();
    let started = Instant::now();
    let spray = tokio::spawn(attacks::token_spray(
        port,
        Arc::clone(&tls),
        ATTACKER.into(),
        3000,
        8,
        "real",
    ));
    let mut valid = Vec::new();
    while !spray.is_finished() {
        let t = Instant::now();
        valid.push((
            get(&mut client, "/metrics", &[("authorization", &bearer)]).await,
            t.elapsed(),
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let statuses = spray.await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    let spent = reviews() - before;
    let bound = 40.0 + 20.0 * secs + 2.0;
    assert!(
        (spent as f64) <= bound,
        "{spent} TokenReviews for 3000 garbage tokens in {secs:.1} s (bound {bound:.0})"
    );
    assert!(statuses.get(&429).copied().unwrap_or(0) > 0, "{statuses:?}");
    assert_eq!(statuses.get(&200), None, "{statuses:?}");
    assert!(!valid.is_empty());
    let failed: Vec<_> = valid.iter().filter(|(s, _)| *s != 200).collect();
    assert!(
        failed.is_empty(),
        "valid requests failed during the spray: {failed:?}"
    );
    let slowest = valid.iter().map(|(_, t)| *t).max().unwrap();
    assert!(
        slowest < Duration::from_secs(2),
        "a valid request took {slowest:?}"
    );
    // The proxy's own account of it, read through itself (authorized like any path).
    let own = {
        let mut send = attacks::https(port, Arc::clone(&tls), "127.0.0.1".parse().unwrap())
            .await
            .unwrap();
        let req = hyper::Request::get("/rbac-proxy/metrics")
            .header("host", "localhost")
            .header("authorization", &bearer)
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        String::from_utf8(
            resp.into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap()
    };
    let value = |series: &str| real::metric(&own, series).unwrap_or(0.0) as usize;
    let limited = statuses.get(&429).copied().unwrap_or(0);
    assert_eq!(
        value("rbac_proxy_reviews_rate_limited_total"),
        limited,
        "{own}"
    );
    assert_eq!(
        value("rbac_proxy_requests_total{code=\"429\"}"),
        limited,
        "{own}"
    );
    assert_eq!(
        value("rbac_proxy_review_duration_seconds_count{review=\"token\",outcome=\"unauthenticated\"}"),
        spent,
        "every TokenReview sent for a garbage token is counted: {own}"
    );
    assert!(
        value("rbac_proxy_cache_lookups_total{cache=\"decision\",result=\"hit\"}") > 0,
        "{own}"
    );
    let refused: Vec<_> = heard
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.status == 401 || h.status == 403)
        .cloned()
        .collect();
    assert!(
        refused.is_empty(),
        "the proxy's own requests were refused: {refused:?}"
    );
    drop(proxy);

    let _ = bindings.delete(ROLE, &DeleteParams::default()).await;
    let _ = roles.delete(ROLE, &DeleteParams::default()).await;
    let _ = sas.delete(SCRAPER, &DeleteParams::default()).await;
}
