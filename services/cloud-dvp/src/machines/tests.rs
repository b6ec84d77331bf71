//! The part race against a scripted API server: the part is missing at the look, then
//! the create answers AlreadyExists (someone made it between the two). And the names the
//! parent would refuse.
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use overcast_cloud_http::ApiMetrics;

use super::*;

/// A client answering each request with the next of `answers` (status, body), and
/// recording the method of each request.
fn scripted(answers: Vec<(u16, serde_json::Value)>) -> (kube::Client, Arc<Mutex<Vec<String>>>) {
    let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        log.lock().expect("log").push(req.method().to_string());
        let (status, body) = answers
            .lock()
            .expect("answers")
            .pop_front()
            .expect("a request past the script");
        async move {
            http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::from(body.to_string()))
        }
    });
    (kube::Client::new(service, "tenant"), seen)
}

fn status(code: u16, reason: &str) -> (u16, serde_json::Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": reason, "code": code, "message": reason}),
    )
}

fn secret(labels: serde_json::Value) -> (u16, serde_json::Value) {
    (
        200,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "cloud-init-m", "namespace": "tenant", "labels": labels}}),
    )
}

async fn ensure(answers: Vec<(u16, serde_json::Value)>) -> (Result<()>, Vec<String>) {
    let (client, seen) = scripted(answers);
    let parent = Parent::new(
        client,
        "tenant".into(),
        Arc::new(ApiMetrics::unregistered()),
    );
    let vms = ParentVms::new(parent, "uuid-1");
    let part: Secret =
        serde_json::from_value(json!({"metadata": {"name": "cloud-init-m"}})).expect("secret");
    let r = vms
        .ensure_part(
            &vms.secrets(),
            ("secret_get", "secret_create"),
            "Secret",
            &part,
            "vm-uid",
        )
        .await;
    let seen = seen.lock().expect("log").clone();
    (r, seen)
}

#[tokio::test]
async fn a_strangers_part_made_between_look_and_create_is_refused() {
    let (r, seen) = ensure(vec![
        status(404, "NotFound"),
        status(409, "AlreadyExists"),
        secret(json!({"team": "someone-else"})),
    ])
    .await;
    assert!(
        matches!(&r, Err(CloudError::Conflict(m)) if m.contains("cloud-init-m")),
        "{r:?}"
    );
    assert_eq!(seen, ["GET", "POST", "GET"]);
}

#[tokio::test]
async fn this_clusters_part_made_meanwhile_is_used() {
    let (r, _) = ensure(vec![
        status(404, "NotFound"),
        status(409, "AlreadyExists"),
        secret(json!({CLUSTER_UUID_LABEL: "uuid-1"})),
    ])
    .await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test]
async fn a_part_gone_after_already_exists_is_retried_not_taken() {
    let (r, _) = ensure(vec![
        status(404, "NotFound"),
        status(409, "AlreadyExists"),
        status(404, "NotFound"),
    ])
    .await;
    assert!(matches!(r, Err(CloudError::Unavailable(_))), "{r:?}");
}

#[test]
fn a_name_the_parent_would_refuse_is_said_before_anything_is_made() {
    assert_eq!(name_refusal("worker-0"), None);
    assert_eq!(name_refusal(&"w".repeat(63)), None);
    let long = name_refusal(&"w".repeat(64)).unwrap();
    assert!(
        long.contains("dvp.deckhouse.io/hostname") && long.contains("64"),
        "{long}"
    );
    assert!(name_refusal("w.6").unwrap().contains("w.6-boot"));
}
