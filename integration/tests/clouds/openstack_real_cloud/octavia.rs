//! Load balancers on the simulator's real Octavia (API and worker, amphora provider with
//! no-op drivers: the objects, their statuses and Octavia's checks are real, the VIP is
//! a fake address on a port Neutron does not have): a Service's load balancer made as
//! OCCM makes it, changed object by object, adopted when OCCM made it, deleted with
//! everything on it; one in ERROR deleted and made again.

use overcast_cloud::{Backend, CloudError, LoadBalancers, Protocol};
use overcast_cloud_openstack::config::LoadBalancerOpts;
use overcast_cloud_openstack::octavia::load_balancer_name;

use super::lb_help::*;
use super::*;

#[tokio::test]
async fn services_get_octavia_load_balancers_as_occm_makes_them() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    sweep(&cloud).await;
    // A real server: its address is the first member, and the subnet it is on is found
    // from it (no subnet-id configured), as OCCM finds it from the first node.
    let server = cloud
        .boot(&format!("overcast-it-lb-{}", std::process::id()))
        .await;
    let (_, ports) = neutron(
        &cloud,
        Method::GET,
        &format!("/v2.0/ports?device_id={server}"),
        None,
    )
    .await;
    let node_ip = ports["ports"][0]["fixed_ips"][0]["ip_address"]
        .as_str()
        .unwrap()
        .to_owned();
    let subnet = cloud.env["OSSIM_SUBNET_ID"].clone();

    // The sim's Octavia (on SQLite) leaves the children of a fully populated create
    // PENDING_CREATE for good (its worker reads the load balancer before the listeners
    // are committed), so no later change could be made to them: here the children are
    // added one call at a time, as with OCCM's `provider-requires-serial-api-calls`.
    // The one-call create is checked on its own below.
    let serial = LoadBalancerOpts {
        provider_requires_serial_api_calls: true,
        ..LoadBalancerOpts::default()
    };
    let lbs = lbs(&cloud, serial);
    let mut spec = service(
        "web",
        &[(Protocol::Tcp, 80, 30080), (Protocol::Udp, 53, 30053)],
        &[("node-a", &node_ip)],
    );
    // Internal: the VIP is the address (the no-op VIP port is no Neutron port, a floating
    // IP cannot go on it; the floating IP is tested below on a real port).
    spec.annotations.insert(
        "service.beta.kubernetes.io/openstack-internal-load-balancer".into(),
        "true".into(),
    );
    let before = snapshot(&cloud, MUTATIONS);
    let status = retried("ensure", async || lbs.ensure_load_balancer(&spec).await).await;
    let name = load_balancer_name(CLUSTER, &spec.service);
    assert_eq!(name, "kube_service_overcast-it_shop_web");
    let found = named(&cloud, &name).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let lb = &found[0];
    let lb_id = lb["id"].as_str().unwrap().to_owned();
    assert_eq!(lb["provisioning_status"], "ACTIVE");
    assert_eq!(lb["vip_subnet_id"], subnet.as_str());
    assert_eq!(lb["tags"], json!([name]));
    assert_eq!(
        status.ingress_ips,
        vec![lb["vip_address"].as_str().unwrap().to_owned()]
    );
    assert_eq!(
        status.annotations["loadbalancer.openstack.org/load-balancer-id"],
        lb_id
    );
    assert_eq!(
        made(&cloud, MUTATIONS, &before),
        BTreeMap::from([
            ("loadbalancer_create".into(), 1),
            ("listener_create".into(), 2),
            ("pool_create".into(), 2),
            ("member_batch_update".into(), 2),
        ])
    );
    let l = listeners(&cloud, &lb_id).await;
    assert_eq!(l.len(), 2);
    assert_eq!(
        (l[0]["protocol"].as_str(), l[0]["protocol_port"].as_u64()),
        (Some("UDP"), Some(53))
    );
    assert_eq!(
        (l[1]["protocol"].as_str(), l[1]["protocol_port"].as_u64()),
        (Some("TCP"), Some(80))
    );
    assert_eq!(l[1]["name"], format!("listener_0_{name}"));
    assert_eq!(l[1]["tags"], json!([name]));
    assert_eq!(l[1]["timeout_client_data"], 50000);
    assert_eq!(
        members(&cloud, &lb_id, 80).await,
        vec![("node-a".into(), node_ip.clone(), 30080)]
    );

    // The same Service again: nothing changes, nothing is written.
    let before = snapshot(&cloud, MUTATIONS);
    let again = lbs.ensure_load_balancer(&spec).await.expect("ensure again");
    assert_eq!(again, status);
    assert_eq!(made(&cloud, MUTATIONS, &before), BTreeMap::new());

    // A node joins, a port goes, a monitor and a timeout are asked for: each is changed
    // where it differs.
    spec.backends.push(Backend {
        node: "node-b".into(),
        address: "10.0.0.250".into(),
        labels: BTreeMap::new(),
    });
    spec.ports.truncate(1);
    spec.annotations.insert(
        "loadbalancer.openstack.org/enable-health-monitor".into(),
        "true".into(),
    );
    spec.annotations.insert(
        "loadbalancer.openstack.org/timeout-client-data".into(),
        "1000".into(),
    );
    let before = snapshot(&cloud, MUTATIONS);
    lbs.ensure_load_balancer(&spec)
        .await
        .expect("ensure changed");
    assert_eq!(
        made(&cloud, MUTATIONS, &before),
        BTreeMap::from([
            ("listener_update".into(), 1),
            ("member_batch_update".into(), 1),
            ("healthmonitor_create".into(), 1),
            ("pool_delete".into(), 1),
            ("listener_delete".into(), 1),
        ])
    );
    let l = listeners(&cloud, &lb_id).await;
    assert_eq!(l.len(), 1);
    assert_eq!(l[0]["timeout_client_data"], 1000);
    assert_eq!(
        members(&cloud, &lb_id, 80).await,
        vec![
            ("node-a".into(), node_ip.clone(), 30080),
            ("node-b".into(), "10.0.0.250".into(), 30080)
        ]
    );
    let (_, pools) = octavia(
        &cloud,
        Method::GET,
        &format!("/v2/lbaas/pools?loadbalancer_id={lb_id}"),
        None,
    )
    .await;
    let hm = pools["pools"][0]["healthmonitor_id"]
        .as_str()
        .expect("a monitor")
        .to_owned();
    let (_, hm) = octavia(
        &cloud,
        Method::GET,
        &format!("/v2/lbaas/healthmonitors/{hm}"),
        None,
    )
    .await;
    assert_eq!(hm["healthmonitor"]["type"], "TCP");
    assert_eq!(hm["healthmonitor"]["name"], format!("monitor_0_{name}"));
    assert_eq!(hm["healthmonitor"]["delay"], 5);

    // A class that is not configured is refused, and nothing changes.
    let mut classy = spec.clone();
    classy
        .annotations
        .insert("loadbalancer.openstack.org/class".into(), "nope".into());
    assert!(matches!(
        lbs.ensure_load_balancer(&classy).await,
        Err(CloudError::InvalidArgument(_))
    ));

    // Deleted with everything on it.
    lbs.delete_load_balancer(&spec.reference())
        .await
        .expect("delete");
    assert!(named(&cloud, &name).await.is_empty());
    let (code, _) = octavia(
        &cloud,
        Method::GET,
        &format!("/v2/lbaas/listeners/{}", l[0]["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(code, 404);
    // Deleting again finds nothing to delete.
    lbs.delete_load_balancer(&spec.reference())
        .await
        .expect("delete again");

    // A load balancer OCCM made (its name, one listener on 80, no tags, no pool) is
    // adopted: no second one, its listener kept, a pool added under it.
    let adopt = service(
        "adopt",
        &[(Protocol::Tcp, 80, 30081)],
        &[("node-a", &node_ip)],
    );
    let occm_name = load_balancer_name(CLUSTER, &adopt.service);
    let (code, made_lb) = octavia(
        &cloud,
        Method::POST,
        "/v2/lbaas/loadbalancers",
        Some(&json!({"loadbalancer": {"name": occm_name, "vip_subnet_id": subnet,
            "listeners": [{"name": format!("listener_0_{occm_name}"), "protocol": "TCP", "protocol_port": 80}]}})),
    )
    .await;
    assert_eq!(code, 201, "{made_lb}");
    let occm_id = made_lb["loadbalancer"]["id"].as_str().unwrap().to_owned();
    retried("settle", async || lbs_wait(&cloud, &occm_id).await).await;

    // Another Service names that load balancer by load-balancer-id: it shares it (its own
    // listener is added; a shared one gets no floating IP of its own, so the pass ends in
    // that refusal), and its deletion takes its listener and leaves the load balancer.
    let mut other = service(
        "other",
        &[(Protocol::Tcp, 8080, 30082)],
        &[("node-a", &node_ip)],
    );
    other.annotations.insert(
        "loadbalancer.openstack.org/load-balancer-id".into(),
        occm_id.clone(),
    );
    match lbs.ensure_load_balancer(&other).await {
        Err(CloudError::FailedPrecondition(e)) => assert!(e.contains("shared"), "{e}"),
        other => panic!("a shared external Service without a floating IP: {other:?}"),
    }
    assert_eq!(listeners(&cloud, &occm_id).await.len(), 2);
    retried("delete the sharer", async || {
        lbs.delete_load_balancer(&other.reference()).await
    })
    .await;
    assert_eq!(
        named(&cloud, &occm_name).await.len(),
        1,
        "the owner's load balancer stays"
    );
    let left = listeners(&cloud, &occm_id).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["protocol_port"], 80);
    let mut adopt = adopt;
    adopt.annotations.insert(
        "service.beta.kubernetes.io/openstack-internal-load-balancer".into(),
        "true".into(),
    );
    let before = snapshot(&cloud, MUTATIONS);
    let adopted = lbs.ensure_load_balancer(&adopt).await.expect("adopt");
    assert_eq!(
        adopted.annotations["loadbalancer.openstack.org/load-balancer-id"],
        occm_id
    );
    let writes = made(&cloud, MUTATIONS, &before);
    assert!(!writes.contains_key("loadbalancer_create"), "{writes:?}");
    assert_eq!(writes.get("pool_create"), Some(&1), "{writes:?}");
    assert_eq!(named(&cloud, &occm_name).await.len(), 1);
    assert_eq!(
        members(&cloud, &occm_id, 80).await,
        vec![("node-a".into(), node_ip.clone(), 30081)]
    );
    lbs.delete_load_balancer(&adopt.reference())
        .await
        .expect("delete adopted");
    assert!(named(&cloud, &occm_name).await.is_empty());

    // A floating IP is not made here: the sim's VIP port is no Neutron port (a floating
    // IP cannot go on it), and its no-op network driver cannot find the subnet of a real
    // port named by `loadbalancer.openstack.org/port-id` (Octavia refuses the create).
    cloud.delete_server(&server).await;
}

/// The default: a new load balancer with its listeners, pools, members and monitors in
/// one call, as OCCM makes it; Octavia takes the body and makes the whole tree (the
/// sim's leaves the children PENDING_CREATE, see above: the tree is read, not changed).
#[tokio::test]
async fn a_new_load_balancer_is_made_in_one_call() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    sweep(&cloud).await;
    let opts = LoadBalancerOpts {
        subnet_id: Some(cloud.env["OSSIM_SUBNET_ID"].clone()),
        ..LoadBalancerOpts::default()
    };
    let lbs = lbs(&cloud, opts);
    let mut spec = service(
        "whole",
        &[(Protocol::Tcp, 80, 30080), (Protocol::Udp, 53, 30053)],
        &[("node-a", "10.0.0.201"), ("node-b", "10.0.0.202")],
    );
    spec.annotations.insert(
        "service.beta.kubernetes.io/openstack-internal-load-balancer".into(),
        "true".into(),
    );
    spec.annotations.insert(
        "loadbalancer.openstack.org/enable-health-monitor".into(),
        "true".into(),
    );
    let before = snapshot(&cloud, MUTATIONS);
    let status = retried("ensure", async || lbs.ensure_load_balancer(&spec).await).await;
    assert_eq!(
        made(&cloud, MUTATIONS, &before),
        BTreeMap::from([("loadbalancer_create".into(), 1)])
    );
    let name = load_balancer_name(CLUSTER, &spec.service);
    let found = named(&cloud, &name).await;
    assert_eq!(found.len(), 1);
    let lb_id = found[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        status.ingress_ips,
        vec![found[0]["vip_address"].as_str().unwrap().to_owned()]
    );
    let l = listeners(&cloud, &lb_id).await;
    assert_eq!(l.len(), 2);
    assert_eq!(l[1]["name"], format!("listener_0_{name}"));
    assert_eq!(l[0]["name"], format!("listener_1_{name}"));
    let expect = |port| {
        vec![
            ("node-a".to_owned(), "10.0.0.201".to_owned(), port),
            ("node-b".to_owned(), "10.0.0.202".to_owned(), port),
        ]
    };
    assert_eq!(members(&cloud, &lb_id, 80).await, expect(30080));
    assert_eq!(members(&cloud, &lb_id, 53).await, expect(30053));
    let (_, pools) = octavia(
        &cloud,
        Method::GET,
        &format!("/v2/lbaas/pools?loadbalancer_id={lb_id}"),
        None,
    )
    .await;
    let mut monitors: Vec<String> = Vec::new();
    for p in pools["pools"].as_array().unwrap() {
        let id = p["healthmonitor_id"]
            .as_str()
            .expect("a monitor on every pool");
        let (_, hm) = octavia(
            &cloud,
            Method::GET,
            &format!("/v2/lbaas/healthmonitors/{id}"),
            None,
        )
        .await;
        monitors.push(hm["healthmonitor"]["type"].as_str().unwrap().to_owned());
    }
    monitors.sort();
    assert_eq!(monitors, vec!["TCP".to_owned(), "UDP-CONNECT".to_owned()]);
    retried("delete", async || {
        lbs.delete_load_balancer(&spec.reference()).await
    })
    .await;
    assert!(named(&cloud, &name).await.is_empty());
}

/// Octavia's own record of a load balancer set to `status`, as a worker that died mid-flow
/// leaves it (the simulator keeps Octavia's database in SQLite beside its openrc).
fn set_provisioning_status(lb: &str, status: &str) {
    let openrc = std::env::var("OVERCAST_TEST_OPENSTACK_OPENRC").expect("the openrc");
    let db = std::path::Path::new(&openrc)
        .parent()
        .unwrap()
        .join("octavia/octavia.db");
    for attempt in 1..=20 {
        let out = std::process::Command::new("sqlite3")
            .arg(&db)
            .arg(format!(
                "PRAGMA busy_timeout=5000; UPDATE load_balancer SET provisioning_status='{status}' WHERE id='{lb}';"
            ))
            .output()
            .expect("sqlite3");
        if out.status.success() {
            return;
        }
        eprintln!(
            "sqlite3 (attempt {attempt}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("could not set {lb} to {status}");
}

/// A Service's load balancer in ERROR, with the annotations the ccm wrote on the Service:
/// the ccm's own balancer is deleted and made anew, the annotation follows the new one,
/// and the ingress names the new balancer's address. An id annotation the user wrote,
/// naming a balancer that is gone, is NOT_FOUND saying so — never replaced. (Before: the
/// balancer was deleted, and every pass after it looked up the id the ccm itself had
/// written, got 404 and stopped: the Service had no balancer at all.)
#[tokio::test]
async fn a_balancer_in_error_is_made_again_and_the_annotation_follows_it() {
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    sweep(&cloud).await;
    let lbs = lbs(
        &cloud,
        LoadBalancerOpts {
            provider_requires_serial_api_calls: true,
            subnet_id: Some(cloud.env["OSSIM_SUBNET_ID"].clone()),
            ..LoadBalancerOpts::default()
        },
    );
    let mut spec = service(
        "broken",
        &[(Protocol::Tcp, 80, 30080)],
        &[("node-a", "10.0.0.9")],
    );
    spec.annotations.insert(
        "service.beta.kubernetes.io/openstack-internal-load-balancer".into(),
        "true".into(),
    );
    let id_key = "loadbalancer.openstack.org/load-balancer-id";
    let status = retried("ensure", async || lbs.ensure_load_balancer(&spec).await).await;
    // What the ccm then writes on the Service.
    spec.annotations.extend(status.annotations.clone());
    let first = status.annotations[id_key].clone();
    set_provisioning_status(&first, "ERROR");

    // The ccm's next passes, each with the Service's annotations as the last left them.
    let mut made = None;
    for pass in 1..=8 {
        match lbs.ensure_load_balancer(&spec).await {
            Ok(s) => {
                spec.annotations.extend(s.annotations.clone());
                made = Some(s);
                break;
            }
            Err(CloudError::Unavailable(e)) => eprintln!("pass {pass}: {e}"),
            Err(e) => panic!("pass {pass} after ERROR: {e}"),
        }
    }
    let status = made.expect("a balancer made again");
    let second = status.annotations[id_key].clone();
    assert_ne!(second, first, "a new balancer");
    assert_eq!(
        spec.annotations[id_key], second,
        "the annotation follows it"
    );
    let (code, lb) = octavia(
        &cloud,
        Method::GET,
        &format!("/v2/lbaas/loadbalancers/{second}"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(lb["loadbalancer"]["provisioning_status"], "ACTIVE");
    assert_eq!(
        status.ingress_ips,
        vec![lb["loadbalancer"]["vip_address"]
            .as_str()
            .unwrap()
            .to_owned()],
        "the ingress names the live balancer"
    );
    let name = load_balancer_name(CLUSTER, &spec.service);
    assert_eq!(named(&cloud, &name).await.len(), 1, "one balancer");

    // The user's own annotation naming a balancer that is gone: said, not replaced.
    let mut theirs = service("theirs", &[(Protocol::Tcp, 80, 30081)], &[]);
    theirs
        .annotations
        .insert(id_key.into(), "00000000-0000-4000-8000-000000000000".into());
    match lbs.ensure_load_balancer(&theirs).await {
        Err(CloudError::NotFound { id, .. }) => {
            assert!(id.contains("not written by this ccm"), "{id}")
        }
        other => panic!("{other:?}"),
    }
    assert!(named(&cloud, &load_balancer_name(CLUSTER, &theirs.service))
        .await
        .is_empty());
    lbs.delete_load_balancer(&spec.reference())
        .await
        .expect("delete");
}
