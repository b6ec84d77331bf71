//! The pod network's routes on the simulator's real Neutron router (`router1`, its
//! interface on `subnet1`): the provider adds and removes one route at a time
//! (`extraroute-atomic`) or writes the whole list at the read revision (`If-Match`),
//! keeps the routes of other writers, and puts the CIDR in the node port's allowed
//! address pairs; the real `ccm` routes a Node's pod CIDR, marks its network available,
//! and removes the route when the Node goes. Needs `OVERCAST_TEST_KUBECONFIG` for the
//! ccm part besides the openrc.

use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use overcast_cloud::routes::{RouteTarget, Routes};
use overcast_cloud::{AddressType, NodeAddress};
use overcast_cloud_openstack::routes::NeutronRoutes;
use overcast_integration::{binary, free_port, KillOnDrop};

use super::ccm::{kubeconfig, wait};
use super::*;

const PORT_PREFIX: &str = "overcast-it-route-";

async fn neutron(cloud: &Cloud, method: Method, path: &str, body: Option<&Value>) -> (u16, Value) {
    let resp = cloud
        .os
        .call(Service::Network, "it_neutron", method, path, body, None)
        .await
        .expect("neutron");
    (
        resp.status.as_u16(),
        serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
    )
}

async fn router_id(cloud: &Cloud) -> String {
    let (_, v) = neutron(cloud, Method::GET, "/v2.0/routers?name=router1", None).await;
    v["routers"][0]["id"].as_str().expect("router1").to_owned()
}

async fn router_routes(cloud: &Cloud, router: &str) -> Vec<(String, String)> {
    let (_, v) = neutron(cloud, Method::GET, &format!("/v2.0/routers/{router}"), None).await;
    let mut out: Vec<(String, String)> = v["router"]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["destination"].as_str().unwrap().to_owned(),
                r["nexthop"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn pairs(cloud: &Cloud, port: &str) -> Vec<String> {
    let (_, v) = neutron(cloud, Method::GET, &format!("/v2.0/ports/{port}"), None).await;
    v["port"]["allowed_address_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ip_address"].as_str().unwrap().to_owned())
        .collect()
}

/// A port on net1 standing for a server's NIC: its id and address.
async fn nic(cloud: &Cloud, name: &str) -> (String, String) {
    let (code, v) = neutron(
        cloud,
        Method::POST,
        "/v2.0/ports",
        Some(&json!({"port": {"name": format!("{PORT_PREFIX}{name}"),
            "network_id": cloud.env["OSSIM_NET_ID"], "device_owner": "compute:nova"}})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    (
        v["port"]["id"].as_str().unwrap().to_owned(),
        v["port"]["fixed_ips"][0]["ip_address"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

/// Removes what an earlier run left: our ports, and every route through them.
async fn clean(cloud: &Cloud, router: &str) {
    let (_, ports) = neutron(cloud, Method::GET, "/v2.0/ports", None).await;
    for p in ports["ports"].as_array().into_iter().flatten() {
        if p["name"]
            .as_str()
            .unwrap_or_default()
            .starts_with(PORT_PREFIX)
        {
            let ip = p["fixed_ips"][0]["ip_address"].as_str().unwrap_or_default();
            let stale: Vec<Value> = router_routes(cloud, router)
                .await
                .into_iter()
                .filter(|(_, hop)| hop == ip)
                .map(|(d, h)| json!({"destination": d, "nexthop": h}))
                .collect();
            if !stale.is_empty() {
                neutron(
                    cloud,
                    Method::PUT,
                    &format!("/v2.0/routers/{router}/remove_extraroutes"),
                    Some(&json!({"router": {"routes": stale}})),
                )
                .await;
            }
            neutron(
                cloud,
                Method::DELETE,
                &format!("/v2.0/ports/{}", p["id"].as_str().unwrap()),
                None,
            )
            .await;
        }
    }
}

fn target(node: &str, ip: &str) -> RouteTarget {
    RouteTarget {
        node: node.into(),
        provider_id: None,
        addresses: vec![NodeAddress {
            kind: AddressType::InternalIP,
            address: ip.into(),
        }],
    }
}

#[tokio::test]
async fn routes_go_on_the_router_one_at_a_time_or_at_the_read_revision() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    let router = router_id(&cloud).await;
    clean(&cloud, &router).await;
    let (port, ip) = nic(&cloud, "node").await;
    let (_, other_ip) = nic(&cloud, "other").await;
    // Another writer's route, outside any pod network.
    neutron(
        &cloud,
        Method::PUT,
        &format!("/v2.0/routers/{router}/add_extraroutes"),
        Some(&json!({"router": {"routes": [{"destination": "192.168.77.0/24", "nexthop": other_ip}]}})),
    )
    .await;
    let theirs = ("192.168.77.0/24".to_owned(), other_ip.clone());
    for (forced, cidr) in [(false, "10.244.1.0/24"), (true, "10.244.2.0/24")] {
        let mut routes = NeutronRoutes::new(Arc::clone(&cloud.os), router.clone());
        routes.force_revision_writes = forced;
        let t = target("n1", &ip);
        routes.create_route(&t, cidr).await.expect("create");
        routes.create_route(&t, cidr).await.expect("create again");
        let on_router = router_routes(&cloud, &router).await;
        assert!(
            on_router.contains(&(cidr.to_owned(), ip.clone())),
            "{on_router:?}"
        );
        assert!(on_router.contains(&theirs), "{on_router:?}");
        assert_eq!(on_router.iter().filter(|r| r.0 == cidr).count(), 1);
        assert!(pairs(&cloud, &port).await.contains(&cidr.to_owned()));
        let listed = routes
            .list_routes(std::slice::from_ref(&t))
            .await
            .expect("list");
        let ours = listed
            .iter()
            .find(|r| r.destination_cidr == cidr)
            .expect("listed");
        assert_eq!(ours.node.as_deref(), Some("n1"));
        let other = listed
            .iter()
            .find(|r| r.destination_cidr == "192.168.77.0/24")
            .unwrap();
        assert_eq!(other.node, None, "no node has the other writer's next hop");
        routes.delete_route(ours).await.expect("delete");
        routes.delete_route(ours).await.expect("delete again");
        let on_router = router_routes(&cloud, &router).await;
        assert!(!on_router.iter().any(|r| r.0 == cidr), "{on_router:?}");
        assert!(on_router.contains(&theirs));
        assert!(!pairs(&cloud, &port).await.contains(&cidr.to_owned()));
    }
    // The revision guard itself: a write at a revision someone else has moved past is
    // refused (Conflict), and the other writer's routes stay.
    let (_, r) = neutron(
        &cloud,
        Method::GET,
        &format!("/v2.0/routers/{router}"),
        None,
    )
    .await;
    let stale = r["router"]["revision_number"]
        .as_u64()
        .expect("revision_number");
    neutron(
        &cloud,
        Method::PUT,
        &format!("/v2.0/routers/{router}/add_extraroutes"),
        Some(&json!({"router": {"routes": [{"destination": "192.168.79.0/24", "nexthop": other_ip}]}})),
    )
    .await;
    let lost_update = cloud
        .os
        .expect_at_revision(
            Service::Network,
            "it_router_update",
            &format!("/v2.0/routers/{router}"),
            &json!({"router": {"routes": []}}),
            Some(stale),
        )
        .await;
    assert!(
        matches!(lost_update, Err(overcast_cloud::CloudError::Conflict(_))),
        "{lost_update:?}"
    );
    assert!(router_routes(&cloud, &router).await.contains(&theirs));
    clean(&cloud, &router).await;
}

#[tokio::test]
async fn the_ccm_routes_a_node_s_pod_cidr_and_removes_it_with_the_node() {
    let _turn = CLOUD.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    let Some(kubeconfig) = kubeconfig() else {
        return;
    };
    let router = router_id(&cloud).await;
    clean(&cloud, &router).await;
    let nodes: Api<Node> = Api::all(overcast_integration::real::client(&kubeconfig).await);
    let _ = nodes
        .delete("overcast-it-route-n1", &DeleteParams::default())
        .await;
    let (port, ip) = nic(&cloud, "ccm-node").await;
    let (_, other_ip) = nic(&cloud, "ccm-other").await;
    // Another writer's route inside no cluster CIDR, and a stale one of ours: a pod CIDR
    // whose node is gone.
    neutron(
        &cloud,
        Method::PUT,
        &format!("/v2.0/routers/{router}/add_extraroutes"),
        Some(&json!({"router": {"routes": [
            {"destination": "192.168.78.0/24", "nexthop": other_ip},
            {"destination": "10.244.9.0/24", "nexthop": other_ip}]}})),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let conf = cloud_conf_through_login_cache(&cloud.env, dir.path());
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str(&format!("[Route]\nrouter-id = {router}\n"));
    std::fs::write(&conf, text).unwrap();
    let _ccm = KillOnDrop(
        Command::new(binary("ccm"))
            .arg("--cloud=openstack")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--controllers=route")
            .arg("--allocate-node-cidrs=true")
            .arg("--cluster-cidr=10.244.0.0/16")
            .arg("--route-reconciliation-period=1s")
            .arg("--leader-elect-lease-name=overcast-it-os-routes")
            .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ccm"),
    );
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "overcast-it-route-n1"},
        "spec": {"podCIDR": "10.244.5.0/24", "podCIDRs": ["10.244.5.0/24"]},
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    nodes
        .patch_status(
            "overcast-it-route-n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}),
            ),
        )
        .await
        .expect("node address");
    let want = ("10.244.5.0/24".to_owned(), ip.clone());
    wait("the node's route on the router", 60, async || {
        router_routes(&cloud, &router)
            .await
            .contains(&want)
            .then_some(())
    })
    .await;
    wait("NetworkUnavailable False", 60, async || {
        let n = nodes.get("overcast-it-route-n1").await.ok()?;
        let c = n
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "NetworkUnavailable")?;
        (c.status == "False" && c.reason.as_deref() == Some("RouteCreated")).then_some(())
    })
    .await;
    assert!(pairs(&cloud, &port)
        .await
        .contains(&"10.244.5.0/24".to_owned()));
    let on_router = router_routes(&cloud, &router).await;
    assert!(
        !on_router.iter().any(|r| r.0 == "10.244.9.0/24"),
        "the stale pod route goes: {on_router:?}"
    );
    assert!(on_router.contains(&("192.168.78.0/24".to_owned(), other_ip.clone())));

    nodes
        .delete("overcast-it-route-n1", &DeleteParams::default())
        .await
        .expect("delete node");
    wait("the route gone with the node", 60, async || {
        (!router_routes(&cloud, &router).await.contains(&want)).then_some(())
    })
    .await;
    assert!(router_routes(&cloud, &router)
        .await
        .contains(&("192.168.78.0/24".to_owned(), other_ip.clone())));
    clean(&cloud, &router).await;
}

/// A route exists only with its port pair. A pair update Neutron refuses (another writer
/// changed the port between the read and the write: revision bumped) takes the route out
/// again, as OCCM's CreateRoute does, so the next pass makes both; and a route a crash left
/// without its pair is listed as incomplete, so the next pass adds the pair. (Before: the
/// route stayed, the ccm found it present, marked the node's network available, and port
/// security dropped the pods' traffic.)
#[tokio::test]
async fn a_route_is_there_only_with_its_port_pair() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    let router = router_id(&cloud).await;
    clean(&cloud, &router).await;
    let (port, ip) = nic(&cloud, "paired").await;
    let t = target("n1", &ip);
    let cidr = "10.244.9.0/24";

    // Another writer renames the port between our read and our write, once.
    let mut routes = NeutronRoutes::new(Arc::clone(&cloud.os), router.clone());
    let os = Arc::clone(&cloud.os);
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = Arc::clone(&fired);
    routes.between_port_read_and_write = Some(Arc::new(move |port: String| {
        let os = Arc::clone(&os);
        let once = Arc::clone(&once);
        Box::pin(async move {
            if once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            os.call(
                Service::Network,
                "it_port_update",
                Method::PUT,
                &format!("/v2.0/ports/{port}"),
                Some(&json!({"port": {"description": "changed by another writer"}})),
                None,
            )
            .await
            .expect("the other writer's update");
        })
    }));
    let refused = routes.create_route(&t, cidr).await;
    assert!(
        matches!(refused, Err(overcast_cloud::CloudError::Conflict(_))),
        "{refused:?}"
    );
    assert!(fired.load(std::sync::atomic::Ordering::SeqCst));
    assert!(
        !router_routes(&cloud, &router)
            .await
            .iter()
            .any(|r| r.0 == cidr),
        "the route is taken out again with its pair refused"
    );
    assert!(!pairs(&cloud, &port).await.contains(&cidr.to_owned()));
    // The next pass: both.
    routes.create_route(&t, cidr).await.expect("the next pass");
    assert!(router_routes(&cloud, &router)
        .await
        .contains(&(cidr.to_owned(), ip.clone())));
    assert!(pairs(&cloud, &port).await.contains(&cidr.to_owned()));
    let listed = routes.list_routes(std::slice::from_ref(&t)).await.unwrap();
    assert!(listed
        .iter()
        .any(|r| r.destination_cidr == cidr && r.complete));

    // A crash between the route and the pair: the pair is taken away behind our back.
    neutron(
        &cloud,
        Method::PUT,
        &format!("/v2.0/ports/{port}"),
        Some(&json!({"port": {"allowed_address_pairs": []}})),
    )
    .await;
    let listed = routes.list_routes(std::slice::from_ref(&t)).await.unwrap();
    let ours = listed
        .iter()
        .find(|r| r.destination_cidr == cidr)
        .expect("listed");
    assert!(!ours.complete, "a route without its pair is incomplete");
    routes.create_route(&t, cidr).await.expect("repaired");
    assert!(pairs(&cloud, &port).await.contains(&cidr.to_owned()));
    assert_eq!(
        router_routes(&cloud, &router)
            .await
            .iter()
            .filter(|r| r.0 == cidr)
            .count(),
        1
    );
    clean(&cloud, &router).await;
}
