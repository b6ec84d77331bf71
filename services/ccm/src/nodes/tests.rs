use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use overcast_cloud::{
    AddressType, CloudError, Instance, InstanceState, Instances, NodeAddress, Zone,
};
use serde_json::{json, Value};

use super::*;
use crate::testing::{mock, serve, status_reply, Call};
use crate::Error;

pub(super) struct FakeCloud {
    pub(super) answer: Mutex<Result<Vec<Instance>, String>>,
    calls: AtomicUsize,
}

impl FakeCloud {
    pub(super) fn with(instances: Vec<Instance>) -> Self {
        Self {
            answer: Mutex::new(Ok(instances)),
            calls: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl Instances for FakeCloud {
    fn provider_name(&self) -> &'static str {
        "fake"
    }
    async fn list_instances(&self) -> overcast_cloud::Result<Vec<Instance>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.answer
            .lock()
            .unwrap()
            .clone()
            .map_err(CloudError::Unavailable)
    }
}

pub(super) fn instance(name: &str, state: InstanceState) -> Instance {
    Instance {
        node_name: name.into(),
        provider_id: format!("fake://{name}"),
        instance_type: "small".into(),
        addresses: vec![
            NodeAddress {
                kind: AddressType::InternalIP,
                address: "10.0.0.5".into(),
            },
            NodeAddress {
                kind: AddressType::Hostname,
                address: name.into(),
            },
        ],
        zone: Some(Zone {
            region: "r1".into(),
            zone: "z1".into(),
        }),
        state,
    }
}

pub(super) fn node(name: &str, taints: &[&str], ready: bool, provider_id: Option<&str>) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "42", "uid": format!("uid-{name}")},
        "spec": {
            "providerID": provider_id,
            "taints": taints.iter().map(|k| json!({"key": k, "effect": "NoSchedule"})).collect::<Vec<_>>(),
        },
        "status": {
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": name}],
        }
    }))
    .unwrap()
}

pub(super) fn node_json(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
}

async fn run(
    cloud: &FakeCloud,
    nodes: Vec<Node>,
    calls: Vec<Call>,
    parts: Parts,
) -> (Result<SyncReport>, usize) {
    let guard = guard::DeletionGuard::new(50, std::time::Duration::from_secs(600));
    let metrics = Metrics::unregistered();
    run_with(cloud, nodes, calls, parts, &guard, &metrics).await
}

pub(super) async fn run_with(
    cloud: &FakeCloud,
    nodes: Vec<Node>,
    calls: Vec<Call>,
    parts: Parts,
    guard: &guard::DeletionGuard,
    metrics: &Metrics,
) -> (Result<SyncReport>, usize) {
    let (client, handle) = mock();
    let api: Api<Node> = Api::all(client);
    let server = tokio::spawn(serve(handle, calls));
    let policy = AddressPolicy::default();
    // One at a time, so the scripted API sees a fixed order.
    let sync = NodeSync {
        api: &api,
        cloud,
        policy: &policy,
        metrics,
        parts,
        concurrency: 1,
        guard,
        recorder: None,
        held_back: None,
    };
    let report = sync.run(&nodes).await;
    drop(api);
    (report, server.await.unwrap())
}

const ALL: Parts = Parts {
    initialize: true,
    lifecycle: true,
    fencing: None,
};

#[tokio::test]
async fn an_uninitialized_node_gets_its_identity_and_loses_the_taint() {
    let cloud = FakeCloud::with(vec![instance("n1", InstanceState::Running)]);
    let n = node("n1", &[UNINITIALIZED_TAINT, "dedicated"], true, None);
    let calls = vec![
        Call::new("PATCH", "/api/v1/nodes/n1", node_json("n1")).checking(|b| {
            assert_eq!(b["spec"]["providerID"], "fake://n1");
            assert_eq!(b["spec"]["taints"], json!([{"key": "dedicated", "effect": "NoSchedule"}]));
            assert_eq!(b["metadata"]["resourceVersion"], "42", "guarded by the version read");
            let labels = &b["metadata"]["labels"];
            assert_eq!(labels[INSTANCE_TYPE], "small");
            assert_eq!(labels["beta.kubernetes.io/instance-type"], "small");
            assert_eq!(labels[ZONE], "z1");
            assert_eq!(labels[REGION], "r1");
            assert_eq!(labels["failure-domain.beta.kubernetes.io/zone"], "z1");
        }),
        Call::new("PATCH", "/api/v1/nodes/n1/status", node_json("n1")).checking(|b| {
            assert_eq!(
                b["status"]["addresses"],
                json!([{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "n1"}])
            );
        }),
    ];
    let (report, served) = run(&cloud, vec![n], calls, ALL).await;
    assert_eq!(report.unwrap().initialized, 1);
    assert_eq!(served, 2);
    assert_eq!(cloud.calls.load(Ordering::SeqCst), 1);
}

/// A cloud that reports no address for a node (vSphere's guest tools not running yet)
/// leaves the node's own (the kubelet's) as they are, on initialization and after it, as
/// upstream's cloud-node controller does; the rest of the identity is written.
#[tokio::test]
async fn no_addresses_from_the_cloud_leave_the_nodes_own() {
    let mut quiet = instance("n1", InstanceState::Running);
    quiet.addresses.clear();
    let mut quiet2 = instance("n2", InstanceState::Running);
    quiet2.addresses.clear();
    let cloud = FakeCloud::with(vec![quiet, quiet2]);
    let nodes = vec![
        node("n1", &[UNINITIALIZED_TAINT], true, None),
        node("n2", &[], true, Some("fake://n2")),
    ];
    let calls = vec![Call::new("PATCH", "/api/v1/nodes/n1", node_json("n1"))
        .checking(|b| assert_eq!(b["spec"]["providerID"], "fake://n1"))];
    let (report, served) = run(&cloud, nodes, calls, ALL).await;
    let report = report.unwrap();
    assert_eq!((report.initialized, report.addresses_updated), (1, 0));
    assert_eq!(served, 1, "no status patch for either node");
}

/// An empty instance type or region (a cloud without regions, a flavor whose name is no
/// label value) writes no label, as the upstream cloud-node controller.
#[tokio::test]
async fn empty_identity_values_are_no_labels() {
    let mut i = instance("n1", InstanceState::Running);
    i.instance_type = String::new();
    i.zone = Some(Zone {
        region: String::new(),
        zone: "z1".into(),
    });
    let cloud = FakeCloud::with(vec![i]);
    let n = node("n1", &[UNINITIALIZED_TAINT], true, None);
    let calls = vec![
        Call::new("PATCH", "/api/v1/nodes/n1", node_json("n1")).checking(|b| {
            assert_eq!(
                b["metadata"]["labels"],
                json!({ZONE: "z1", "failure-domain.beta.kubernetes.io/zone": "z1"})
            );
        }),
        Call::new("PATCH", "/api/v1/nodes/n1/status", node_json("n1")),
    ];
    let (report, served) = run(&cloud, vec![n], calls, ALL).await;
    assert_eq!(report.unwrap().initialized, 1);
    assert_eq!(served, 2);
}

/// Two instances of one name (a leftover server): the node without a providerID gets
/// neither identity, and is not deleted either — not even NotReady.
#[tokio::test]
async fn a_name_two_instances_carry_is_neither_initialized_nor_deleted() {
    let mut other = instance("n1", InstanceState::Running);
    other.provider_id = "fake://n1-leftover".into();
    let cloud = FakeCloud::with(vec![instance("n1", InstanceState::Running), other]);
    let nodes = vec![
        node("n1", &[UNINITIALIZED_TAINT], true, None),
        node("n1", &[], false, None),
    ];
    let (report, served) = run(&cloud, nodes, vec![], ALL).await;
    let report = report.unwrap();
    assert_eq!(report.initialized, 0);
    assert_eq!(served, 0, "no patch, no deletion");
}

#[tokio::test]
async fn a_cloud_error_touches_no_node() {
    let cloud = FakeCloud::with(vec![]);
    *cloud.answer.lock().unwrap() = Err("timeout".into());
    let nodes = vec![
        node("gone", &[], false, Some("fake://gone")),
        node("new", &[UNINITIALIZED_TAINT], true, None),
    ];
    let (report, served) = run(&cloud, nodes, vec![], ALL).await;
    assert!(matches!(report, Err(Error::Cloud(_))));
    assert_eq!(served, 0, "no deletion on an uncertain answer");
}

#[tokio::test]
async fn lifecycle_deletes_gone_not_ready_nodes_and_taints_shut_down_ones() {
    let cloud = FakeCloud::with(vec![
        instance("off", InstanceState::Shutdown),
        instance("back", InstanceState::Running),
        instance("fine", InstanceState::Running),
    ]);
    let nodes = vec![
        node("gone", &[], false, Some("fake://gone")),
        node("gone-but-ready", &[], true, Some("fake://gone-but-ready")),
        node("off", &[], false, Some("fake://off")),
        node("back", &[SHUTDOWN_TAINT], true, Some("fake://back")),
        node("fine", &[], true, Some("fake://fine")),
    ];
    let calls = vec![
        // Only the node that was looked at: its uid and the version read.
        Call::new("DELETE", "/api/v1/nodes/gone", node_json("gone")).checking(|b| {
            assert_eq!(
                b["preconditions"],
                json!({"uid": "uid-gone", "resourceVersion": "42"})
            );
        }),
        Call::new("PATCH", "/api/v1/nodes/off", node_json("off")).checking(|b| {
            assert_eq!(
                b["spec"]["taints"],
                json!([{"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}])
            );
            assert_eq!(b["metadata"]["resourceVersion"], "42");
        }),
        Call::new("PATCH", "/api/v1/nodes/back", node_json("back")).checking(|b| {
            assert_eq!(b["spec"]["taints"], json!([]));
        }),
    ];
    let (report, served) = run(&cloud, nodes, calls, ALL).await;
    let report = report.unwrap();
    assert_eq!(
        (report.deleted, report.tainted_shutdown, report.untainted),
        (1, 1, 1)
    );
    assert_eq!(
        served, 3,
        "a Ready node is never deleted; a healthy one untouched"
    );
}

#[tokio::test]
async fn drifted_addresses_are_patched_and_a_conflict_is_read_again_and_retried_at_once() {
    let mut moved = instance("n1", InstanceState::Running);
    moved.addresses[0].address = "10.0.0.99".into();
    let cloud = FakeCloud::with(vec![moved, instance("n2", InstanceState::Shutdown)]);
    let nodes = vec![
        node("n1", &[], true, Some("fake://n1")),
        node("n2", &[], false, Some("fake://n2")),
    ];
    let mut newer =
        serde_json::to_value(node("n2", &["dedicated"], false, Some("fake://n2"))).unwrap();
    newer["metadata"]["resourceVersion"] = json!("43");
    let calls = vec![
        Call::new("PATCH", "/api/v1/nodes/n1/status", node_json("n1")).checking(|b| {
            assert_eq!(b["status"]["addresses"][0]["address"], "10.0.0.99");
        }),
        Call::new("PATCH", "/api/v1/nodes/n2", status_reply(409, "Conflict")).status(409),
        Call::new("GET", "/api/v1/nodes/n2", newer),
        Call::new("PATCH", "/api/v1/nodes/n2", node_json("n2")).checking(|b| {
            assert_eq!(b["metadata"]["resourceVersion"], "43", "guarded by the version read again");
            assert_eq!(
                b["spec"]["taints"],
                json!([{"key": "dedicated", "effect": "NoSchedule"}, {"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}]),
                "the taint someone added meanwhile is kept"
            );
        }),
    ];
    let (report, served) = run(&cloud, nodes, calls, ALL).await;
    assert_eq!(report.unwrap().tainted_shutdown, 1);
    assert_eq!(served, 4);
}

#[tokio::test]
async fn a_conflict_that_persists_surfaces_as_an_error_after_three_reads() {
    let cloud = FakeCloud::with(vec![instance("n2", InstanceState::Shutdown)]);
    let nodes = vec![node("n2", &[], false, Some("fake://n2"))];
    let mut calls =
        vec![Call::new("PATCH", "/api/v1/nodes/n2", status_reply(409, "Conflict")).status(409)];
    for _ in 0..3 {
        calls.push(Call::new(
            "GET",
            "/api/v1/nodes/n2",
            serde_json::to_value(node("n2", &[], false, Some("fake://n2"))).unwrap(),
        ));
        calls.push(
            Call::new("PATCH", "/api/v1/nodes/n2", status_reply(409, "Conflict")).status(409),
        );
    }
    let (report, served) = run(&cloud, nodes, calls, ALL).await;
    assert!(
        matches!(report, Err(ref e) if e.is_conflict()),
        "{report:?}"
    );
    assert_eq!(served, 7);
}

#[tokio::test]
async fn controllers_not_chosen_do_nothing() {
    let cloud = FakeCloud::with(vec![instance("n1", InstanceState::Running)]);
    let nodes = vec![
        node("n1", &[UNINITIALIZED_TAINT], true, None),
        node("gone", &[], false, None),
    ];
    let (report, served) = run(
        &cloud,
        nodes,
        vec![],
        Parts {
            initialize: false,
            lifecycle: false,
            fencing: None,
        },
    )
    .await;
    assert_eq!(report.unwrap(), SyncReport::default());
    assert_eq!(served, 0);
}

#[tokio::test]
async fn more_gone_nodes_than_the_guard_allows_are_all_kept() {
    // Ten nodes, four NotReady, and a listing that still names only six: at 10% the
    // window allows one deletion, so none of the four goes.
    let mut instances = vec![];
    let mut nodes = vec![];
    for i in 0..10 {
        let name = format!("n{i}");
        if i >= 4 {
            instances.push(instance(&name, InstanceState::Running));
        }
        nodes.push(node(&name, &[], i >= 4, Some(&format!("fake://{name}"))));
    }
    let cloud = FakeCloud::with(instances);
    let guard = guard::DeletionGuard::new(10, std::time::Duration::from_secs(600));
    let metrics = Metrics::unregistered();
    let (report, served) = run_with(&cloud, nodes.clone(), vec![], ALL, &guard, &metrics).await;
    let report = report.unwrap();
    assert_eq!((report.deleted, report.deletion_refused), (0, 4));
    assert_eq!(served, 0, "no DELETE sent");
    assert_eq!(metrics.node_deletions_refused.get(), 4);

    // When only one is gone, it is deleted — and the next one in the same window is not.
    let mut listed: Vec<Instance> = (1..10)
        .map(|i| instance(&format!("n{i}"), InstanceState::Running))
        .collect();
    *cloud.answer.lock().unwrap() = Ok(listed.clone());
    let calls = vec![Call::new("DELETE", "/api/v1/nodes/n0", node_json("n0"))];
    let (report, served) = run_with(&cloud, nodes.clone(), calls, ALL, &guard, &metrics).await;
    assert_eq!(report.unwrap().deleted, 1);
    assert_eq!(served, 1);
    listed.remove(0);
    *cloud.answer.lock().unwrap() = Ok(listed);
    let (report, served) =
        run_with(&cloud, nodes[1..].to_vec(), vec![], ALL, &guard, &metrics).await;
    assert_eq!(report.unwrap().deletion_refused, 1);
    assert_eq!(served, 0);
}

#[tokio::test]
async fn nodes_of_another_provider_are_not_this_controllers() {
    // A static node beside cloud ones: absent from the cloud's listing by nature.
    let cloud = FakeCloud::with(vec![instance("n1", InstanceState::Running)]);
    let nodes = vec![
        node("n1", &[], true, Some("fake://n1")),
        node("static-1", &[], false, Some("static://static-1")),
    ];
    let (report, served) = run(&cloud, nodes, vec![], ALL).await;
    let report = report.unwrap();
    assert_eq!((report.deleted, report.deletion_refused), (0, 0));
    assert_eq!(served, 0, "neither deleted nor tainted");
}

#[test]
fn heartbeats_wake_nothing_new_uninitialized_and_readiness_changes_do() {
    use crate::nodes::{Wake, WatchTriage};
    let node = |ready: bool, uninit: bool| -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "uid": "u1"},
            "spec": {"taints": if uninit { serde_json::json!([{"key": UNINITIALIZED_TAINT, "effect": "NoSchedule"}]) } else { serde_json::json!([]) }},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    };
    let mut t = WatchTriage::default();
    let both = Wake {
        nodes: true,
        services: true,
    };
    assert_eq!(t.applied(&node(false, true)), both, "a new node");
    assert_eq!(
        t.applied(&node(false, true)),
        Wake {
            nodes: true,
            services: false
        },
        "still uninitialized"
    );
    assert_eq!(
        t.applied(&node(false, false)),
        Wake::default(),
        "initialized, NotReady as before"
    );
    assert_eq!(t.applied(&node(true, false)), both, "turned Ready");
    for _ in 0..20 {
        assert_eq!(
            t.applied(&node(true, false)),
            Wake::default(),
            "a heartbeat"
        );
    }
    assert_eq!(t.applied(&node(false, false)), both, "turned NotReady");
    assert_eq!(
        t.deleted(&node(false, false)),
        Wake {
            nodes: false,
            services: true
        }
    );
    assert_eq!(
        t.applied(&node(false, false)),
        both,
        "the same name again is new"
    );
}

#[test]
fn the_slim_node_answers_every_controller_question_as_the_full_one() {
    let full: Node = serde_json::from_value(crate::fixtures::kubelet_node(7)).unwrap();
    let mut slim_node = full.clone();
    slim(&mut slim_node);
    assert_eq!(ready(&slim_node), ready(&full));
    assert!(ready(&slim_node));
    assert_eq!(taints(&slim_node), taints(&full));
    assert_eq!(provider_id(&slim_node), provider_id(&full));
    assert_eq!(slim_node.labels(), full.labels());
    assert_eq!(slim_node.metadata.uid, full.metadata.uid);
    assert_eq!(slim_node.resource_version(), full.resource_version());
    assert_eq!(
        slim_node.status.as_ref().unwrap().addresses,
        full.status.as_ref().unwrap().addresses
    );
    let mut a = WatchTriage::default();
    let mut b = WatchTriage::default();
    assert_eq!(a.applied(&slim_node), b.applied(&full));
    // A NotReady node stays NotReady.
    let mut down = crate::fixtures::kubelet_node(8);
    down["status"]["conditions"][4]["status"] = json!("False");
    let mut down: Node = serde_json::from_value(down).unwrap();
    slim(&mut down);
    assert!(!ready(&down));
    // Fencing reads Ready's status and last transition, and its own annotation.
    let mut lost = crate::fixtures::kubelet_node(9);
    lost["status"]["conditions"][4]["status"] = json!("Unknown");
    lost["metadata"]["annotations"][fencing::FENCED_ANNOTATION] = json!("then");
    let lost: Node = serde_json::from_value(lost).unwrap();
    let mut lost_slim = lost.clone();
    slim(&mut lost_slim);
    let off = instance("n", InstanceState::Shutdown);
    let grace = Fencing {
        grace: std::time::Duration::from_secs(30),
    };
    let now = jiff::Timestamp::now();
    for n in [&full, &lost] {
        let mut s = n.clone();
        slim(&mut s);
        assert_eq!(
            fencing::step(&s, Some(&off), true, grace, now),
            fencing::step(n, Some(&off), true, grace, now)
        );
    }
    assert!(fencing::fenced_by_us(&lost_slim));
    let mut unmarked = lost.clone();
    unmarked.metadata.annotations = None;
    slim(&mut unmarked);
    assert!(matches!(
        fencing::step(&unmarked, Some(&off), true, grace, now),
        fencing::Step::Apply(_)
    ));
    let before = serde_json::to_vec(&full).unwrap().len();
    let after = serde_json::to_vec(&slim_node).unwrap().len();
    assert!(after * 5 < before, "{before} → {after} bytes");
}

/// A providerID the provider cannot read is an error for that node, never "gone": a
/// NotReady node carrying one is neither deleted nor tainted (before, its string matched
/// no instance's, and it was deleted).
#[tokio::test]
async fn an_unreadable_provider_id_is_an_error_never_gone() {
    let cloud = FakeCloud::with(vec![instance("n1", InstanceState::Running)]);
    let nodes = vec![
        node("n1", &[], true, Some("fake://n1")),
        node("odd", &[], false, Some("fake://a/b")),
    ];
    let (report, served) = run(&cloud, nodes, vec![], ALL).await;
    let err = report.unwrap_err().to_string();
    assert!(err.contains("fake://a/b"), "{err}");
    assert_eq!(served, 0, "neither deleted nor tainted");
}

/// The Services hear of a node changing what a pool takes it by — its providerID and
/// addresses, set by the ccm's initialization — not only of readiness flips; heartbeats
/// still wake nothing.
#[test]
fn a_node_getting_its_identity_and_addresses_wakes_the_services() {
    use crate::nodes::{Wake, WatchTriage};
    let node = |pid: Option<&str>, ip: Option<&str>| -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "uid": "u2"},
            "spec": {"providerID": pid},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": ip.map(|ip| json!([{"type": "InternalIP", "address": ip}])).unwrap_or(json!([])),
            },
        }))
        .unwrap()
    };
    let mut t = WatchTriage::default();
    t.applied(&node(None, None));
    assert_eq!(t.applied(&node(None, None)), Wake::default(), "a heartbeat");
    assert!(
        t.applied(&node(Some("fake://n"), None)).services,
        "providerID set"
    );
    assert!(
        t.applied(&node(Some("fake://n"), Some("10.0.0.9")))
            .services,
        "an address set"
    );
    assert_eq!(
        t.applied(&node(Some("fake://n"), Some("10.0.0.9"))),
        Wake::default(),
        "a heartbeat"
    );
    assert!(
        t.applied(&node(Some("fake://n"), Some("10.0.0.10")))
            .services,
        "the address changed"
    );
}

mod node_ip;
