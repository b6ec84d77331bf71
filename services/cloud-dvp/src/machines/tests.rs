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

/// What `refusal` says of `spec` with the parent answering `answers` in turn, and the
/// requests' methods.
async fn refusal_of(
    spec: &VmSpec,
    answers: Vec<(u16, serde_json::Value)>,
) -> (Result<Option<String>>, Vec<String>) {
    let (client, seen) = scripted(answers);
    let parent = Parent::new(
        client,
        "tenant".into(),
        Arc::new(ApiMetrics::unregistered()),
    );
    let r = ParentVms::new(parent, "uuid-1").refusal(spec).await;
    let seen = seen.lock().expect("log").clone();
    (r, seen)
}

fn found(kind: &str) -> (u16, serde_json::Value) {
    (
        200,
        json!({"apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": kind,
               "metadata": {"name": "x"}}),
    )
}

fn spec_booting(kind: &str) -> VmSpec {
    VmSpec {
        class: "generic".into(),
        cores: 2,
        core_fraction: "100%".into(),
        memory: "4Gi".into(),
        bootloader: "EFI".into(),
        run_policy: "AlwaysOnUnlessStoppedManually".into(),
        live_migration_policy: "PreferSafe".into(),
        image_kind: kind.into(),
        image_name: "ubuntu".into(),
        root_disk_bytes: 1 << 30,
        root_disk_storage_class: None,
        additional_disks: Vec::new(),
    }
}

#[tokio::test]
async fn a_class_or_image_the_parent_lacks_is_said_in_capdvps_words() {
    let (r, seen) = refusal_of(
        &spec_booting("ClusterVirtualImage"),
        vec![status(404, "NotFound")],
    )
    .await;
    let why = r.unwrap().expect("refused");
    assert!(
        why.starts_with("VirtualMachineClass 'generic' not found in parent DVP cluster."),
        "{why}"
    );
    assert_eq!(seen, ["GET"], "nothing looked at past the class");

    let (r, _) = refusal_of(
        &spec_booting("VirtualImage"),
        vec![found("VirtualMachineClass"), status(404, "NotFound")],
    )
    .await;
    let why = r.unwrap().expect("refused");
    assert!(
        why.starts_with(
            "VirtualImage 'ubuntu' not found in namespace 'tenant' in parent DVP cluster."
        ) && why.ends_with("kubectl get virtualimages -n tenant"),
        "{why}"
    );
    let (r, _) = refusal_of(
        &spec_booting("ClusterVirtualImage"),
        vec![found("VirtualMachineClass"), found("ClusterVirtualImage")],
    )
    .await;
    assert_eq!(r.unwrap(), None);
}

#[tokio::test]
async fn a_class_this_account_may_not_read_is_not_called_absent() {
    // Without the optional ClusterRole: the class cannot be told, the image still is.
    let (r, seen) = refusal_of(
        &spec_booting("VirtualImage"),
        vec![status(403, "Forbidden"), found("VirtualImage")],
    )
    .await;
    assert_eq!(r.unwrap(), None);
    assert_eq!(seen, ["GET", "GET"]);
    // An answer that is not "found" nor "not found": the parent's error, retried.
    let (r, _) = refusal_of(
        &spec_booting("VirtualImage"),
        vec![status(503, "ServiceUnavailable")],
    )
    .await;
    assert!(matches!(r, Err(CloudError::Unavailable(_))), "{r:?}");
    // A kind DVP boots from but capdvp refuses: not looked for.
    let (r, seen) = refusal_of(
        &spec_booting("VirtualDiskSnapshot"),
        vec![found("VirtualMachineClass")],
    )
    .await;
    assert_eq!(r.unwrap(), None);
    assert_eq!(seen, ["GET"]);
}
