use std::sync::Mutex;

use async_trait::async_trait;
use overcast_cloud::routes::Route;
use overcast_cloud::CloudError;
use serde_json::{json, Value};

use super::*;
use crate::testing::{mock, serve, Call};

/// A router: its routes, what was asked of it, and whether listing fails.
#[derive(Default)]
struct FakeRouter {
    routes: Mutex<Vec<Route>>,
    created: Mutex<Vec<(String, String)>>,
    deleted: Mutex<Vec<String>>,
    list_fails: bool,
    create_fails: bool,
}

#[async_trait]
impl Routes for FakeRouter {
    async fn list_routes(&self, _: &[RouteTarget]) -> overcast_cloud::Result<Vec<Route>> {
        if self.list_fails {
            return Err(CloudError::Unavailable("router GET timed out".into()));
        }
        Ok(self.routes.lock().unwrap().clone())
    }
    async fn create_route(&self, t: &RouteTarget, cidr: &str) -> overcast_cloud::Result<()> {
        if self.create_fails {
            return Err(CloudError::Unavailable("neutron down".into()));
        }
        self.created
            .lock()
            .unwrap()
            .push((t.node.clone(), cidr.into()));
        Ok(())
    }
    async fn delete_route(&self, r: &Route) -> overcast_cloud::Result<()> {
        self.deleted
            .lock()
            .unwrap()
            .push(r.destination_cidr.clone());
        Ok(())
    }
}

fn node(name: &str, cidr: Option<&str>, network_unavailable: Option<&str>) -> Arc<Node> {
    let mut conditions = vec![json!({"type": "Ready", "status": "True"})];
    if let Some(s) = network_unavailable {
        conditions.push(json!({"type": CONDITION, "status": s}));
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"podCIDR": cidr, "podCIDRs": cidr.map(|c| vec![c])},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"}], "conditions": conditions},
        }))
        .unwrap(),
    )
}

fn route(node: Option<&str>, cidr: &str) -> Route {
    Route {
        node: node.map(str::to_owned),
        destination_cidr: cidr.into(),
        next_hop: "10.0.0.5".into(),
        complete: true,
    }
}

fn sync(api: Api<Node>, router: Arc<FakeRouter>) -> RouteSync {
    RouteSync {
        api,
        cloud: router,
        cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
        metrics: Metrics::unregistered(),
    }
}

fn condition(status: &'static str, reason: &'static str) -> Call {
    Call::new("PATCH", "/api/v1/nodes/n1/status", json!({})).checking(move |body: &Value| {
        let c = &body["status"]["conditions"][0];
        assert_eq!(c["type"], CONDITION);
        assert_eq!(c["status"], status);
        assert_eq!(c["reason"], reason);
    })
}

#[tokio::test]
async fn a_node_s_pod_cidr_is_routed_and_its_network_marked_available() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, vec![condition("False", "RouteCreated")]));
    let router = Arc::new(FakeRouter::default());
    let s = sync(Api::all(client), Arc::clone(&router));
    let report = s
        .run(&[node("n1", Some("10.244.1.0/24"), None)])
        .await
        .unwrap();
    assert_eq!(report.created, 1);
    assert_eq!(
        *router.created.lock().unwrap(),
        vec![("n1".to_owned(), "10.244.1.0/24".to_owned())]
    );
    assert_eq!(server.await.unwrap(), 1);
}

#[tokio::test]
async fn a_route_that_exists_and_a_condition_that_says_so_cost_nothing() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, vec![]));
    let router = Arc::new(FakeRouter::default());
    router
        .routes
        .lock()
        .unwrap()
        .push(route(Some("n1"), "10.244.1.0/24"));
    let s = sync(Api::all(client), Arc::clone(&router));
    let report = s
        .run(&[node("n1", Some("10.244.1.0/24"), Some("False"))])
        .await
        .unwrap();
    assert_eq!(report, RouteReport::default());
    assert_eq!(server.await.unwrap(), 0);
}

#[tokio::test]
async fn a_failed_route_marks_the_network_unavailable() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, vec![condition("True", "NoRouteCreated")]));
    let router = Arc::new(FakeRouter {
        create_fails: true,
        ..FakeRouter::default()
    });
    let s = sync(Api::all(client), Arc::clone(&router));
    let report = s
        .run(&[node("n1", Some("10.244.1.0/24"), Some("False"))])
        .await
        .unwrap();
    assert_eq!(report.failed, 1);
    assert_eq!(server.await.unwrap(), 1);
}

#[tokio::test]
async fn stale_routes_in_the_cluster_cidr_go_and_others_stay() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, vec![]));
    let router = Arc::new(FakeRouter::default());
    router.routes.lock().unwrap().extend([
        route(Some("n1"), "10.244.1.0/24"),
        // Its node is gone (a blackhole), its node's CIDR changed: ours, stale.
        route(None, "10.244.9.0/24"),
        route(Some("n1"), "10.244.7.0/24"),
        // Outside the cluster CIDR: someone else's, never touched.
        route(None, "192.168.50.0/24"),
        route(Some("n1"), "172.16.0.0/24"),
    ]);
    let s = sync(Api::all(client), Arc::clone(&router));
    let report = s
        .run(&[node("n1", Some("10.244.1.0/24"), Some("False"))])
        .await
        .unwrap();
    assert_eq!(report.deleted, 2);
    let mut deleted = router.deleted.lock().unwrap().clone();
    deleted.sort();
    assert_eq!(
        deleted,
        vec!["10.244.7.0/24".to_owned(), "10.244.9.0/24".to_owned()]
    );
    assert_eq!(server.await.unwrap(), 0);
}

#[tokio::test]
async fn a_failed_listing_changes_nothing() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, vec![]));
    let router = Arc::new(FakeRouter {
        list_fails: true,
        ..FakeRouter::default()
    });
    router
        .routes
        .lock()
        .unwrap()
        .push(route(None, "10.244.9.0/24"));
    let s = sync(Api::all(client), Arc::clone(&router));
    assert!(s
        .run(&[node("n1", Some("10.244.1.0/24"), None)])
        .await
        .is_err());
    assert!(router.created.lock().unwrap().is_empty());
    assert!(router.deleted.lock().unwrap().is_empty());
    assert_eq!(server.await.unwrap(), 0);
}
