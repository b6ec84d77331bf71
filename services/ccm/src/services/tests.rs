use std::sync::Mutex;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::runtime::events::{Recorder, Reporter};
use overcast_cloud::{CloudError, LoadBalancerSpec, LoadBalancerStatus, LoadBalancers};
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
        _: &str,
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
            ingress_hostnames: vec![],
        })
    }
    async fn delete_load_balancer(&self, name: &str) -> overcast_cloud::Result<()> {
        self.deleted.lock().unwrap().push(name.into());
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

fn node(name: &str, ip: &str, ready: bool, excluded: bool) -> Node {
    let labels = if excluded {
        json!({EXCLUDE_LABEL: ""})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
        "status": {
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
            "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}],
        }
    }))
    .unwrap()
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

async fn run(
    lbs: &FakeLbs,
    svc: Service,
    nodes: Vec<Node>,
    calls: Vec<Call>,
    class: Option<&str>,
) -> (Result<()>, usize) {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, calls));
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "overcast-ccm".into(),
            instance: None,
        },
    );
    let metrics = Metrics::unregistered();
    let sync = ServiceSync {
        client,
        cloud: lbs,
        recorder: Some(&recorder),
        metrics: &metrics,
        class: class.map(Into::into),
    };
    let result = sync.reconcile(&svc, &nodes).await;
    drop(sync);
    drop(recorder);
    (result, server.await.unwrap())
}

#[tokio::test]
async fn a_new_load_balancer_service_gets_finalizer_balancer_ingress_and_event() {
    let lbs = FakeLbs::default();
    let nodes = vec![
        node("b", "10.0.0.2", true, false),
        node("a", "10.0.0.1", true, false),
        node("down", "10.0.0.3", false, false),
        node("ex", "10.0.0.4", true, true),
    ];
    let calls = vec![
        Call::new("PATCH", "/api/v1/namespaces/shop/services/web", svc_json()).checking(|b| {
            assert_eq!(b["metadata"]["finalizers"], json!([FINALIZER]));
            assert_eq!(b["metadata"]["resourceVersion"], "7");
        }),
        Call::new(
            "PATCH",
            "/api/v1/namespaces/shop/services/web/status",
            svc_json(),
        )
        .checking(|b| {
            assert_eq!(
                b["status"]["loadBalancer"]["ingress"],
                json!([{"ip": "127.240.0.1"}])
            );
        }),
        event_call("EnsuredLoadBalancer"),
    ];
    let (result, served) = run(&lbs, service(None, &[], None, false), nodes, calls, None).await;
    result.unwrap();
    assert_eq!(served, 3);
    let ensured = lbs.ensured.lock().unwrap();
    assert_eq!(ensured[0].name, "a0a1b2c3d4e5f6789abcdef012345678");
    assert_eq!(ensured[0].service, "shop/web");
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
async fn an_up_to_date_service_costs_no_api_call_and_keeps_its_address() {
    let lbs = FakeLbs::default();
    let (result, served) = run(
        &lbs,
        service(None, &[FINALIZER], Some("127.240.0.1"), false),
        vec![node("a", "10.0.0.1", true, false)],
        vec![],
        None,
    )
    .await;
    result.unwrap();
    assert_eq!(served, 0);
    assert_eq!(
        lbs.ensured.lock().unwrap()[0].requested_ip.as_deref(),
        Some("127.240.0.1"),
        "a restart keeps the address"
    );
}

#[tokio::test]
async fn deletion_tears_down_the_balancer_then_releases_the_finalizer() {
    let lbs = FakeLbs::default();
    let calls = vec![
        event_call("DeletedLoadBalancer"),
        Call::new("PATCH", "/api/v1/namespaces/shop/services/web", svc_json()).checking(|b| {
            assert_eq!(b["metadata"]["finalizers"], json!(["other/keep"]));
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
async fn another_load_balancer_class_is_left_alone_and_ours_is_served() {
    let lbs = FakeLbs::default();
    let (result, served) = run(
        &lbs,
        service(Some("example.com/other"), &[], None, false),
        vec![],
        vec![],
        None,
    )
    .await;
    result.unwrap();
    assert_eq!(served, 0);
    assert!(lbs.ensured.lock().unwrap().is_empty());
    let calls = vec![
        Call::new("PATCH", "/api/v1/namespaces/shop/services/web", svc_json()),
        Call::new(
            "PATCH",
            "/api/v1/namespaces/shop/services/web/status",
            svc_json(),
        ),
        event_call("EnsuredLoadBalancer"),
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
    assert_eq!(served, 3);
}

#[tokio::test]
async fn a_cloud_failure_is_an_event_and_an_error() {
    let lbs = FakeLbs {
        fail: true,
        ..Default::default()
    };
    let calls = vec![event_call("SyncLoadBalancerFailed")];
    let (result, served) = run(
        &lbs,
        service(None, &[FINALIZER], None, false),
        vec![],
        calls,
        None,
    )
    .await;
    assert!(matches!(result, Err(Error::Cloud(_))));
    assert_eq!(served, 1);
}
