use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use overcast_cloud::{
    CloudError, LoadBalancerRef, LoadBalancerSpec, LoadBalancerStatus, LoadBalancers,
};
use serde_json::{json, Value};

use super::*;
use crate::testing::{mock, serve, Call};

#[derive(Default)]
struct FakeLbs {
    ensured: Mutex<Vec<LoadBalancerSpec>>,
    deleted: Mutex<Vec<String>>,
    fail: bool,
}

#[async_trait]
impl LoadBalancers for FakeLbs {
    async fn get_load_balancer(
        &self,
        _: &LoadBalancerRef,
    ) -> overcast_cloud::Result<Option<LoadBalancerStatus>> {
        Ok(None)
    }
    async fn ensure_load_balancer(
        &self,
        spec: &LoadBalancerSpec,
    ) -> overcast_cloud::Result<LoadBalancerStatus> {
        if self.fail {
            return Err(CloudError::Unavailable("cloud down".into()));
        }
        self.ensured.lock().unwrap().push(spec.clone());
        Ok(LoadBalancerStatus {
            ingress_ips: vec!["127.240.0.1".into()],
            ..LoadBalancerStatus::default()
        })
    }
    async fn delete_load_balancer(&self, lb: &LoadBalancerRef) -> overcast_cloud::Result<()> {
        self.deleted.lock().unwrap().push(lb.name.clone());
        Ok(())
    }
}

const UID: &str = "0a1b2c3d-4e5f-6789-abcd-ef0123456789";

fn service(
    class: Option<&str>,
    finalizers: &[&str],
    ingress: Option<&str>,
    deleting: bool,
) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "web", "namespace": "shop", "uid": UID, "resourceVersion": "7",
            "finalizers": finalizers,
            "deletionTimestamp": if deleting { Some("2026-11-22T00:00:00Z") } else { None },
        },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": class,
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080},
                {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
            ],
        },
        "status": {"loadBalancer": {"ingress": ingress.map(|ip| vec![json!({"ip": ip})])}},
    }))
    .unwrap()
}

fn node(name: &str, ip: &str, ready: bool, excluded: bool) -> Arc<Node> {
    let labels = if excluded {
        json!({EXCLUDE_LABEL: ""})
    } else {
        json!({})
    };
    Arc::new(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
        "status": {
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
            "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}],
        }
    }))
    .unwrap())
}

fn svc_json() -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"}})
}

fn event_call(reason: &'static str) -> Call {
    Call::new("POST", "/apis/events.k8s.io/v1/namespaces/shop/events", json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"}, "eventTime": null}))
        .checking(move |b| {
            assert_eq!(b["reason"], reason);
            assert_eq!(b["regarding"]["name"], "web");
            assert_eq!(b["reportingController"], "overcast-ccm");
        })
}

fn sync_for(lbs: &Arc<FakeLbs>, client: Client, class: Option<&str>) -> ServiceSync {
    let mut sync = ServiceSync::new(
        client.clone(),
        Arc::clone(lbs) as Arc<dyn LoadBalancers>,
        Metrics::unregistered(),
    );
    sync.recorder = Some(Recorder::new(
        client,
        Reporter {
            controller: "overcast-ccm".into(),
            instance: None,
        },
    ));
    sync.class = class.map(Into::into);
    sync
}

/// One reconcile of `svc` against the scripted API: its result and the calls served.
async fn run(
    lbs: &Arc<FakeLbs>,
    svc: Service,
    nodes: Vec<Arc<Node>>,
    calls: Vec<Call>,
    class: Option<&str>,
) -> (Result<Action>, usize) {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, calls));
    let sync = sync_for(lbs, client, class);
    let result = sync.reconcile(Arc::new(svc), &nodes).await;
    drop(sync);
    (result, server.await.unwrap())
}

fn finalizer_added(b: &Value) {
    assert_eq!(
        b[0],
        json!({"op": "test", "path": "/metadata/finalizers", "value": null})
    );
    assert_eq!(
        b[1],
        json!({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
    );
}

fn ingress_set(b: &Value) {
    assert_eq!(
        b["status"]["loadBalancer"]["ingress"],
        json!([{"ip": "127.240.0.1"}])
    );
}

#[tokio::test]
async fn a_new_load_balancer_service_gets_the_finalizer_first_then_balancer_ingress_and_event() {
    let lbs = Arc::new(FakeLbs::default());
    let nodes = vec![
        node("b", "10.0.0.2", true, false),
        node("a", "10.0.0.1", true, false),
        node("down", "10.0.0.3", false, false),
        node("ex", "10.0.0.4", true, true),
    ];
    let calls = vec![
        Call::new("PATCH", "/api/v1/namespaces/shop/services/web", svc_json())
            .checking(finalizer_added),
    ];
    let (result, served) = run(
        &lbs,
        service(None, &[], None, false),
        nodes.clone(),
        calls,
        None,
    )
    .await;
    assert_eq!(
        result.unwrap(),
        Action::await_change(),
        "the patch brings the next pass"
    );
    assert_eq!(served, 1);
    assert!(
        lbs.ensured.lock().unwrap().is_empty(),
        "no balancer before the finalizer holds"
    );

    let calls = vec![
        Call::new(
            "PATCH",
            "/api/v1/namespaces/shop/services/web/status",
            svc_json(),
        )
        .checking(ingress_set),
        event_call("EnsuredLoadBalancer"),
    ];
    let (result, served) = run(
        &lbs,
        service(None, &[FINALIZER], None, false),
        nodes,
        calls,
        None,
    )
    .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(300)));
    assert_eq!(served, 2);
    let ensured = lbs.ensured.lock().unwrap();
    assert_eq!(ensured[0].name, "a0a1b2c3d4e5f6789abcdef012345678");
    assert_eq!(ensured[0].service.to_string(), "shop/web");
    assert_eq!(ensured[0].service.uid, UID);
    assert_eq!(ensured[0].ports.len(), 2);
    assert_eq!(ensured[0].ports[1].protocol, Protocol::Udp);
    assert_eq!(ensured[0].ports[1].node_port, 30053);
    let backends: Vec<&str> = ensured[0]
        .backends
        .iter()
        .map(|b| b.address.as_str())
        .collect();
    assert_eq!(
        backends,
        vec!["10.0.0.1", "10.0.0.2"],
        "ready, not excluded nodes, by InternalIP"
    );
}

#[tokio::test]
async fn an_up_to_date_service_costs_no_api_call_and_an_unchanged_one_no_cloud_call() {
    let lbs = Arc::new(FakeLbs::default());
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, vec![]));
    let sync = sync_for(&lbs, client, None);
    let svc = Arc::new(service(None, &[FINALIZER], Some("127.240.0.1"), false));
    let one = vec![node("a", "10.0.0.1", true, false)];
    sync.reconcile(Arc::clone(&svc), &one).await.unwrap();
    assert_eq!(
        lbs.ensured.lock().unwrap()[0].requested_ip.as_deref(),
        Some("127.240.0.1"),
        "a restart keeps the address"
    );
    // Our own status patch, an annotation: nothing the cloud sees changed.
    let again = sync.reconcile(Arc::clone(&svc), &one).await.unwrap();
    assert_eq!(lbs.ensured.lock().unwrap().len(), 1, "no second cloud call");
    assert!(
        again != Action::await_change(),
        "still resynced later: {again:?}"
    );
    // A new backend is a change.
    let two = vec![
        node("a", "10.0.0.1", true, false),
        node("b", "10.0.0.2", true, false),
    ];
    sync.reconcile(Arc::clone(&svc), &two).await.unwrap();
    assert_eq!(lbs.ensured.lock().unwrap().len(), 2);
    assert_eq!(lbs.ensured.lock().unwrap()[1].backends.len(), 2);
    drop(sync);
    assert_eq!(server.await.unwrap(), 0);
}

#[tokio::test]
async fn deletion_tears_down_the_balancer_then_releases_only_our_finalizer() {
    let lbs = Arc::new(FakeLbs::default());
    let calls = vec![
        event_call("DeletedLoadBalancer"),
        Call::new("PATCH", "/api/v1/namespaces/shop/services/web", svc_json()).checking(|b| {
            assert_eq!(
                *b,
                json!([
                    {"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER},
                    {"op": "remove", "path": "/metadata/finalizers/1"},
                ])
            );
        }),
    ];
    let svc = service(None, &["other/keep", FINALIZER], Some("127.240.0.1"), true);
    let (result, served) = run(&lbs, svc, vec![], calls, None).await;
    result.unwrap();
    assert_eq!(served, 2);
    assert_eq!(
        *lbs.deleted.lock().unwrap(),
        vec!["a0a1b2c3d4e5f6789abcdef012345678".to_owned()]
    );
}

#[tokio::test]
async fn a_service_that_stops_being_a_balancer_is_torn_down_cleared_and_let_go() {
    let lbs = Arc::new(FakeLbs::default());
    let mut svc = service(None, &[FINALIZER], Some("127.240.0.1"), false);
    svc.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    let calls = vec![
        event_call("DeletedLoadBalancer"),
        Call::new(
            "PATCH",
            "/api/v1/namespaces/shop/services/web/status",
            svc_json(),
        )
        .checking(|b| assert_eq!(b["status"]["loadBalancer"]["ingress"], Value::Null)),
        Call::new("PATCH", "/api/v1/namespaces/shop/services/web", svc_json()).checking(|b| {
            assert_eq!(
                b[1],
                json!({"op": "remove", "path": "/metadata/finalizers/0"})
            );
        }),
    ];
    let (result, served) = run(&lbs, svc, vec![], calls, None).await;
    result.unwrap();
    assert_eq!(served, 3);
    assert_eq!(lbs.deleted.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn another_load_balancer_class_is_left_alone_and_ours_is_served() {
    let lbs = Arc::new(FakeLbs::default());
    let (result, served) = run(
        &lbs,
        service(Some("example.com/other"), &[], None, false),
        vec![],
        vec![],
        None,
    )
    .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert_eq!(served, 0, "not even a finalizer");
    assert!(lbs.ensured.lock().unwrap().is_empty());
    let calls = vec![
        Call::new("PATCH", "/api/v1/namespaces/shop/services/web", svc_json())
            .checking(finalizer_added),
    ];
    let (result, served) = run(
        &lbs,
        service(Some("overcast.dev/local"), &[], None, false),
        vec![],
        calls,
        Some("overcast.dev/local"),
    )
    .await;
    result.unwrap();
    assert_eq!(served, 1);
}

// Paused time: the delays are exact.
#[tokio::test(start_paused = true)]
async fn a_cloud_failure_is_an_event_and_an_error_then_waits_its_delay_unless_the_spec_changes() {
    let lbs = Arc::new(FakeLbs {
        fail: true,
        ..Default::default()
    });
    let (client, handle) = mock();
    let calls = vec![
        event_call("SyncLoadBalancerFailed"),
        // The edited spec (generation 2) is tried at once, and fails again: the
        // recorder counts the repeated event on the first one.
        Call::new(
            "PATCH",
            "/apis/events.k8s.io/v1/namespaces/shop/events/web.",
            json!({}),
        )
        .prefix(),
    ];
    let server = tokio::spawn(serve(handle, calls));
    let sync = sync_for(&lbs, client, None);
    let mut svc = service(None, &[FINALIZER], None, false);
    svc.metadata.generation = Some(1);
    let svc = Arc::new(svc);
    let result = sync.reconcile(Arc::clone(&svc), &[]).await;
    assert!(matches!(result, Err(Error::Cloud(_))), "{result:?}");
    assert_eq!(
        sync.retry_after(&svc),
        Action::requeue(Duration::from_secs(5))
    );
    // Our event, a status change: the same spec waits its delay, without a call.
    let waiting = sync.reconcile(Arc::clone(&svc), &[]).await.unwrap();
    assert!(
        waiting != Action::await_change() && waiting != Action::requeue(Duration::ZERO),
        "{waiting:?}"
    );
    let mut edited = (*svc).clone();
    edited.metadata.generation = Some(2);
    let result = sync.reconcile(Arc::new(edited.clone()), &[]).await;
    assert!(matches!(result, Err(Error::Cloud(_))));
    assert_eq!(
        sync.retry_after(&edited),
        Action::requeue(Duration::from_secs(10)),
        "its failures still count"
    );
    drop(sync);
    assert_eq!(server.await.unwrap(), 2);
}
