//! kubelet's `--node-ip` (the `alpha.kubernetes.io/provided-node-ip` annotation it writes
//! with `--cloud-provider=external`) on Nodes the cloud lists with several addresses.

use super::*;
use crate::addresses::PROVIDED_NODE_IP;

/// A host with an uplink and a bridge, as the cloud lists it.
fn two_nics(name: &str) -> Instance {
    let mut i = instance(name, InstanceState::Running);
    i.addresses = vec![
        NodeAddress {
            kind: AddressType::InternalIP,
            address: "192.168.122.10".into(),
        },
        NodeAddress {
            kind: AddressType::InternalIP,
            address: "10.88.0.1".into(),
        },
        NodeAddress {
            kind: AddressType::Hostname,
            address: name.into(),
        },
    ];
    i
}

fn given(mut n: Node, ip: &str) -> Node {
    n.metadata.annotations = Some([(PROVIDED_NODE_IP.to_owned(), ip.to_owned())].into());
    n
}

#[tokio::test]
async fn a_node_is_initialized_with_the_address_its_kubelet_was_given() {
    let cloud = FakeCloud::with(vec![two_nics("n1")]);
    let n = given(node("n1", &[UNINITIALIZED_TAINT], true, None), "10.88.0.1");
    let calls = vec![
        Call::new("PATCH", "/api/v1/nodes/n1", node_json("n1"))
            .checking(|b| assert_eq!(b["spec"]["taints"], json!([]))),
        Call::new("PATCH", "/api/v1/nodes/n1/status", node_json("n1")).checking(|b| {
            assert_eq!(
                b["status"]["addresses"],
                json!([{"type": "InternalIP", "address": "10.88.0.1"}, {"type": "Hostname", "address": "n1"}]),
                "the given address is the node's only InternalIP"
            );
        }),
    ];
    let (report, served) = run(&cloud, vec![n], calls, ALL).await;
    assert_eq!(report.unwrap().initialized, 1);
    assert_eq!(served, 2);
}

/// As upstream: an address the cloud does not list keeps the node tainted (nothing is
/// written), and an initialized node's addresses are left as they are.
#[tokio::test]
async fn a_node_ip_the_cloud_does_not_list_changes_nothing() {
    let cloud = FakeCloud::with(vec![two_nics("n1"), two_nics("n2")]);
    let nodes = vec![
        given(node("n1", &[UNINITIALIZED_TAINT], true, None), "10.99.0.1"),
        given(node("n2", &[], true, Some("fake://n2")), "10.99.0.1"),
    ];
    let (report, served) = run(&cloud, nodes, vec![], ALL).await;
    let report = report.unwrap();
    assert_eq!(report.node_ip_unmatched, 2);
    assert_eq!((report.initialized, report.addresses_updated), (0, 0));
    assert_eq!(served, 0, "no patch: the taint and the addresses stay");
}

/// A node initialized before (by us without the annotation read, or by a provider that
/// listed every NIC) carrying both InternalIPs is set right; one already right is not
/// patched again.
#[tokio::test]
async fn an_initialized_nodes_addresses_follow_its_node_ip() {
    let cloud = FakeCloud::with(vec![two_nics("n1"), two_nics("n2")]);
    let mut both = given(node("n1", &[], true, Some("fake://n1")), "10.88.0.1");
    both.status.as_mut().unwrap().addresses = Some(vec![
        K8sAddress {
            type_: "InternalIP".into(),
            address: "192.168.122.10".into(),
        },
        K8sAddress {
            type_: "InternalIP".into(),
            address: "10.88.0.1".into(),
        },
        K8sAddress {
            type_: "Hostname".into(),
            address: "n1".into(),
        },
    ]);
    let mut right = given(node("n2", &[], true, Some("fake://n2")), "192.168.122.10");
    right.status.as_mut().unwrap().addresses = Some(vec![
        K8sAddress {
            type_: "InternalIP".into(),
            address: "192.168.122.10".into(),
        },
        K8sAddress {
            type_: "Hostname".into(),
            address: "n2".into(),
        },
    ]);
    let calls = vec![
        Call::new("PATCH", "/api/v1/nodes/n1/status", node_json("n1")).checking(|b| {
            assert_eq!(
                b["status"]["addresses"],
                json!([{"type": "InternalIP", "address": "10.88.0.1"}, {"type": "Hostname", "address": "n1"}])
            );
        }),
    ];
    let (report, served) = run(&cloud, vec![both, right], calls, ALL).await;
    assert_eq!(report.unwrap().addresses_updated, 1);
    assert_eq!(served, 1);
}

/// Addresses from a cloud that names no Hostname (a machine listed by its IPs alone)
/// keep the one kubelet wrote, as upstream's controller does, instead of dropping it.
#[tokio::test]
async fn the_hostname_kubelet_wrote_is_kept_when_the_cloud_names_none() {
    let mut i = instance("n1", InstanceState::Running);
    i.addresses.retain(|a| a.kind != AddressType::Hostname);
    i.addresses[0].address = "10.0.0.6".into();
    let cloud = FakeCloud::with(vec![i]);
    let calls = vec![
        Call::new("PATCH", "/api/v1/nodes/n1/status", node_json("n1")).checking(|b| {
            assert_eq!(
                b["status"]["addresses"],
                json!([{"type": "InternalIP", "address": "10.0.0.6"}, {"type": "Hostname", "address": "n1"}])
            );
        }),
    ];
    let n = node("n1", &[], true, Some("fake://n1"));
    let (report, served) = run(&cloud, vec![n], calls, ALL).await;
    assert_eq!(report.unwrap().addresses_updated, 1);
    assert_eq!(served, 1);
}

#[test]
fn the_node_cache_keeps_the_node_ip_and_no_other_annotation() {
    let mut n: Node = serde_json::from_value(crate::fixtures::kubelet_node(3)).unwrap();
    n.annotations_mut()
        .insert(PROVIDED_NODE_IP.into(), "10.88.0.1".into());
    assert!(n.annotations().len() > 1);
    slim(&mut n);
    assert_eq!(
        n.metadata.annotations,
        Some([(PROVIDED_NODE_IP.to_owned(), "10.88.0.1".to_owned())].into())
    );
    let mut bare: Node = serde_json::from_value(crate::fixtures::kubelet_node(4)).unwrap();
    slim(&mut bare);
    assert_eq!(bare.metadata.annotations, None);
}
