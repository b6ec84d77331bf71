use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use overcast_cloud::InstanceState;
use serde_json::json;

use super::*;
use crate::metrics::Metrics;
use crate::nodes::guard::DeletionGuard;
use crate::nodes::tests::{instance, node, node_json, run_with, FakeCloud};
use crate::nodes::{Parts, SyncReport, SHUTDOWN_TAINT};
use crate::testing::Call;

const GRACE: Fencing = Fencing {
    grace: Duration::from_secs(30),
};

/// A node whose Ready condition is `status` since `ago` seconds.
fn with_ready(mut n: Node, status: &str, ago: i64) -> Node {
    let since = Timestamp::now() - SignedDuration::from_secs(ago);
    n.status.as_mut().unwrap().conditions = Some(vec![serde_json::from_value(json!({
        "type": "Ready", "status": status, "lastTransitionTime": since.to_string(),
    }))
    .unwrap()]);
    n
}

fn lost(name: &str, ago: i64) -> Node {
    with_ready(
        node(name, &[], false, Some(&format!("fake://{name}"))),
        status_unknown(),
        ago,
    )
}

fn status_unknown() -> &'static str {
    "Unknown"
}

fn fenced(mut n: Node) -> Node {
    n.spec.as_mut().unwrap().taints = Some(vec![serde_json::from_value(json!({
        "key": OUT_OF_SERVICE_TAINT, "value": OUT_OF_SERVICE_VALUE, "effect": "NoExecute",
    }))
    .unwrap()]);
    n.metadata.annotations = Some([(FENCED_ANNOTATION.to_owned(), "then".to_owned())].into());
    n
}

fn step_now(n: &Node, i: Option<&overcast_cloud::Instance>, gone_admitted: bool) -> Step {
    step(n, i, gone_admitted, GRACE, Timestamp::now())
}

#[test]
fn only_a_lost_node_whose_vm_is_positively_off_is_fenced() {
    let off = instance("n", InstanceState::Shutdown);
    let running = instance("n", InstanceState::Running);
    let suspended = instance("n", InstanceState::Suspended);
    let applied = |s: Step| matches!(s, Step::Apply(_));
    // Lease expired past the grace, the cloud says off: fenced.
    assert!(applied(step_now(&lost("n", 60), Some(&off), false)));
    // Gone, with the guard admitting the listing's absences: fenced; refusing: not.
    assert!(applied(step_now(&lost("n", 60), None, true)));
    assert_eq!(step_now(&lost("n", 60), None, false), Step::Nothing);
    // Anything but off is no answer.
    assert_eq!(
        step_now(&lost("n", 60), Some(&running), true),
        Step::Nothing
    );
    assert_eq!(
        step_now(&lost("n", 60), Some(&suspended), true),
        Step::Nothing
    );
    // A kubelet that reports NotReady is alive; a Ready node is not lost; no condition
    // at all says nothing.
    let alive = with_ready(node("n", &[], false, Some("fake://n")), "False", 600);
    assert_eq!(step_now(&alive, Some(&off), true), Step::Nothing);
    let ready = with_ready(node("n", &[], true, Some("fake://n")), "True", 600);
    assert_eq!(step_now(&ready, Some(&off), true), Step::Nothing);
    let mut bare = node("n", &[], false, Some("fake://n"));
    bare.status.as_mut().unwrap().conditions = None;
    assert_eq!(step_now(&bare, Some(&off), true), Step::Nothing);
    // Opted out; or a person's taint already there (never ours to apply or remove).
    let mut opted = lost("n", 60);
    opted.metadata.labels = Some([(OPT_OUT_LABEL.to_owned(), "disabled".to_owned())].into());
    assert_eq!(step_now(&opted, Some(&off), true), Step::Nothing);
    let mut theirs = lost("n", 60);
    theirs.spec.as_mut().unwrap().taints = fenced(lost("n", 60)).spec.unwrap().taints;
    assert_eq!(step_now(&theirs, Some(&off), true), Step::Nothing);
    let theirs_back = {
        let mut n = with_ready(node("n", &[], true, Some("fake://n")), "True", 5);
        n.spec.as_mut().unwrap().taints = theirs.spec.clone().unwrap().taints;
        n
    };
    assert_eq!(step_now(&theirs_back, Some(&running), true), Step::Nothing);
}

#[test]
fn the_grace_counts_from_readys_last_transition() {
    let off = instance("n", InstanceState::Shutdown);
    match step_now(&lost("n", 10), Some(&off), false) {
        Step::Wait(left) => assert!(
            (Duration::from_secs(19)..=Duration::from_secs(20)).contains(&left),
            "{left:?}"
        ),
        other => panic!("{other:?}"),
    }
    // Exactly at the grace: applied.
    let n = lost("n", 0);
    let since = n.status.as_ref().unwrap().conditions.as_ref().unwrap()[0]
        .last_transition_time
        .clone()
        .unwrap()
        .0;
    assert!(matches!(
        step(
            &n,
            Some(&off),
            false,
            GRACE,
            since + SignedDuration::from_secs(30)
        ),
        Step::Apply(_)
    ));
    // A condition without a transition time: the grace starts now.
    let mut n = lost("n", 0);
    n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time = None;
    assert_eq!(step_now(&n, Some(&off), false), Step::Wait(GRACE.grace));
}

#[test]
fn our_taint_comes_off_only_when_the_node_is_ready_and_its_vm_running() {
    let running = instance("n", InstanceState::Running);
    let off = instance("n", InstanceState::Shutdown);
    let back = fenced(with_ready(
        node("n", &[], true, Some("fake://n")),
        "True",
        5,
    ));
    assert_eq!(step_now(&back, Some(&running), true), Step::Remove);
    // Ready, but the cloud says off or does not list it: contradicts; left as it is.
    assert_eq!(step_now(&back, Some(&off), true), Step::Nothing);
    assert_eq!(step_now(&back, None, true), Step::Nothing);
    // Running again but its kubelet not back yet.
    assert_eq!(
        step_now(&fenced(lost("n", 5)), Some(&running), true),
        Step::Nothing
    );
    // The opt-out label never keeps our taint on.
    let mut opted = back.clone();
    opted.metadata.labels = Some([(OPT_OUT_LABEL.to_owned(), "disabled".to_owned())].into());
    assert_eq!(step_now(&opted, Some(&running), true), Step::Remove);
}

/// `node` with its taints replaced by `keys` (NoExecute).
fn tainted(mut n: Node, keys: &[&str]) -> Node {
    n.spec.as_mut().unwrap().taints = Some(
        keys.iter()
            .map(|k| serde_json::from_value(json!({"key": k, "effect": "NoExecute"})).unwrap())
            .collect(),
    );
    n
}

#[test]
fn our_annotation_goes_after_the_lifecycle_controller_s_last_write_and_a_lost_taint_comes_back() {
    let running = instance("n", InstanceState::Running);
    let off = instance("n", InstanceState::Shutdown);
    let back = fenced(with_ready(
        node("n", &[], true, Some("fake://n")),
        "True",
        5,
    ));
    // Our taint off, the lifecycle controller's not yet: its write (which, before 1.26,
    // may carry a taint list read before ours went) is still to come; the annotation stays.
    let unreachable = tainted(back.clone(), &["node.kubernetes.io/unreachable"]);
    assert_eq!(step_now(&unreachable, Some(&running), true), Step::Nothing);
    let not_ready = tainted(back.clone(), &["node.kubernetes.io/not-ready"]);
    assert_eq!(step_now(&not_ready, Some(&running), true), Step::Nothing);
    // That write put ours back: removed again.
    let put_back = tainted(
        back.clone(),
        &[OUT_OF_SERVICE_TAINT, "overcast.dev/someone-else"],
    );
    assert_eq!(step_now(&put_back, Some(&running), true), Step::Remove);
    // Both off: the annotation released.
    let done = tainted(back.clone(), &["overcast.dev/someone-else"]);
    assert_eq!(step_now(&done, Some(&running), true), Step::Release);
    // Still lost and off, our taint gone (a stale list written over it): applied again.
    let lost_again = tainted(fenced(lost("n", 600)), &["node.kubernetes.io/unreachable"]);
    assert!(matches!(
        step_now(&lost_again, Some(&off), false),
        Step::Apply(_)
    ));
    // ... only on a positive answer, and never against the opt-out label.
    assert_eq!(step_now(&lost_again, Some(&running), true), Step::Nothing);
    assert_eq!(step_now(&lost_again, None, false), Step::Nothing);
    let mut opted = lost_again.clone();
    opted.metadata.labels = Some([(OPT_OUT_LABEL.to_owned(), "disabled".to_owned())].into());
    assert_eq!(step_now(&opted, Some(&off), true), Step::Nothing);
}

fn fencing_only() -> Parts {
    Parts {
        initialize: false,
        lifecycle: false,
        fencing: Some(GRACE),
    }
}

#[tokio::test]
async fn a_fence_is_one_guarded_patch_with_the_taint_and_our_annotation_then_undone() {
    let cloud = FakeCloud::with(vec![
        instance("off", InstanceState::Shutdown),
        instance("back", InstanceState::Running),
        instance("released", InstanceState::Running),
        instance("running", InstanceState::Running),
    ]);
    let mut back = fenced(with_ready(
        node("back", &[], true, Some("fake://back")),
        "True",
        5,
    ));
    back.spec
        .as_mut()
        .unwrap()
        .taints
        .as_mut()
        .unwrap()
        .push(serde_json::from_value(json!({"key": "keep", "effect": "NoSchedule"})).unwrap());
    // Back before, our taint already off: only the annotation goes.
    let mut released = fenced(with_ready(
        node("released", &[], true, Some("fake://released")),
        "True",
        5,
    ));
    released.spec.as_mut().unwrap().taints = Some(vec![serde_json::from_value(
        json!({"key": "keep", "effect": "NoSchedule"}),
    )
    .unwrap()]);
    let nodes = vec![
        with_ready(
            node("off", &[SHUTDOWN_TAINT], false, Some("fake://off")),
            "Unknown",
            60,
        ),
        back,
        released,
        lost("running", 600),
    ];
    let calls = vec![
        Call::new("PATCH", "/api/v1/nodes/off", node_json("off")).checking(|b| {
            assert_eq!(b["metadata"]["resourceVersion"], "42");
            let taints = b["spec"]["taints"].as_array().unwrap();
            assert_eq!(taints.len(), 2, "the shutdown taint kept: {taints:?}");
            assert_eq!(taints[0]["key"], SHUTDOWN_TAINT);
            assert_eq!(taints[1]["key"], OUT_OF_SERVICE_TAINT);
            assert_eq!(taints[1]["value"], OUT_OF_SERVICE_VALUE);
            assert_eq!(taints[1]["effect"], "NoExecute");
            assert!(taints[1]["timeAdded"].is_string());
            let note = b["metadata"]["annotations"][FENCED_ANNOTATION]
                .as_str()
                .unwrap();
            assert!(note.contains("powered off"), "{note}");
        }),
        Call::new("PATCH", "/api/v1/nodes/back", node_json("back")).checking(|b| {
            assert_eq!(
                b["spec"]["taints"],
                json!([{"key": "keep", "effect": "NoSchedule"}])
            );
            assert!(
                b["metadata"].get("annotations").is_none(),
                "the annotation stays with the taint's removal: {b}"
            );
            assert_eq!(b["metadata"]["resourceVersion"], "42");
        }),
        Call::new("PATCH", "/api/v1/nodes/released", node_json("released")).checking(|b| {
            assert_eq!(
                b["spec"]["taints"],
                json!([{"key": "keep", "effect": "NoSchedule"}])
            );
            assert!(
                b["metadata"]["annotations"]
                    .as_object()
                    .is_some_and(|a| a.get(FENCED_ANNOTATION) == Some(&json!(null))),
                "the annotation released: {b}"
            );
            assert_eq!(b["metadata"]["resourceVersion"], "42");
        }),
    ];
    let metrics = Metrics::unregistered();
    let guard = DeletionGuard::off();
    let (report, served) = run_with(&cloud, nodes, calls, fencing_only(), &guard, &metrics).await;
    let report = report.unwrap();
    assert_eq!((report.fenced, report.unfenced, served), (1, 1, 3));
    let count = |a: &str| {
        metrics
            .fencing
            .get_or_create(&crate::metrics::ActionLabel { action: a.into() })
            .get()
    };
    assert_eq!((count("applied"), count("removed")), (1, 1));
    // One was ours before; one applied, one removed.
    assert_eq!(metrics.out_of_service.get(), 1);
}

#[tokio::test]
async fn a_node_in_its_grace_asks_for_a_sync_when_the_grace_ends() {
    let cloud = FakeCloud::with(vec![
        instance("soon", InstanceState::Shutdown),
        instance("later", InstanceState::Shutdown),
    ]);
    let nodes = vec![lost("soon", 20), lost("later", 5)];
    let metrics = Metrics::unregistered();
    let (report, served) = run_with(
        &cloud,
        nodes,
        vec![],
        fencing_only(),
        &DeletionGuard::off(),
        &metrics,
    )
    .await;
    let report = report.unwrap();
    assert_eq!((report.fenced, served), (0, 0));
    let left = report.recheck_in.unwrap();
    assert!(
        left <= Duration::from_secs(10) && left > Duration::from_secs(8),
        "{left:?}"
    );
}

#[tokio::test]
async fn no_positive_answer_fences_nothing() {
    // The cloud fails: nothing at all is written.
    let cloud = FakeCloud::with(vec![]);
    *cloud.answer.lock().unwrap() = Err("503 from the proxy's HTML page".into());
    let metrics = Metrics::unregistered();
    let (report, served) = run_with(
        &cloud,
        vec![lost("a", 600)],
        vec![],
        fencing_only(),
        &DeletionGuard::off(),
        &metrics,
    )
    .await;
    assert!(report.is_err());
    assert_eq!(served, 0);

    // Most nodes missing from a successful listing: the guard refuses its absences, so
    // none of the lost ones is fenced (a wrong inventory looks like a mass power-off).
    let cloud = FakeCloud::with(vec![instance("a", InstanceState::Running)]);
    let nodes = vec![
        lost("a", 600),
        lost("b", 600),
        lost("c", 600),
        lost("d", 600),
    ];
    let guard = DeletionGuard::new(10, Duration::from_secs(600));
    let (report, served) = run_with(&cloud, nodes, vec![], fencing_only(), &guard, &metrics).await;
    assert_eq!((report.unwrap().fenced, served), (0, 0));

    // Another provider's node (its providerID in another scheme) is not ours to fence.
    let cloud = FakeCloud::with(vec![]);
    let other = with_ready(node("x", &[], false, Some("other://x")), "Unknown", 600);
    let (report, served) = run_with(
        &cloud,
        vec![other],
        vec![],
        fencing_only(),
        &DeletionGuard::off(),
        &metrics,
    )
    .await;
    assert_eq!((report.unwrap(), served), (SyncReport::default(), 0));
}

#[tokio::test]
async fn a_gone_node_the_lifecycle_deletes_is_not_fenced_too() {
    let cloud = FakeCloud::with(vec![]);
    let calls = vec![Call::new("DELETE", "/api/v1/nodes/gone", node_json("gone"))];
    let parts = Parts {
        initialize: false,
        lifecycle: true,
        fencing: Some(GRACE),
    };
    let metrics = Metrics::unregistered();
    let (report, served) = run_with(
        &cloud,
        vec![lost("gone", 600)],
        calls,
        parts,
        &DeletionGuard::off(),
        &metrics,
    )
    .await;
    let report = report.unwrap();
    assert_eq!((report.deleted, report.fenced, served), (1, 0, 1));
}
