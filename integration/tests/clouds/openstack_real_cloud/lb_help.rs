//! Octavia and Neutron as the load-balancer tests read them: raw calls, a load
//! balancer's listeners and members, a Service spec, the provider with short waits,
//! call counts, and the sweep of what an earlier run left.

use overcast_cloud::{Backend, CloudError, LbPort, LoadBalancerSpec, Protocol, ServiceRef};
use overcast_cloud_openstack::config::LoadBalancerOpts;
use overcast_cloud_openstack::octavia::api::Waits as LbWaits;
use overcast_cloud_openstack::octavia::OctaviaLoadBalancers;

use super::*;

pub const CLUSTER: &str = "overcast-it";

pub async fn octavia(
    cloud: &Cloud,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let resp = cloud
        .os
        .call(
            Service::LoadBalancer,
            "it_octavia",
            method,
            path,
            body,
            None,
        )
        .await
        .expect("octavia");
    (
        resp.status.as_u16(),
        serde_json::from_slice(&resp.body).unwrap_or(Value::Null),
    )
}

pub async fn neutron(
    cloud: &Cloud,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
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

/// Octavia's load balancers named `name`, but those DELETED.
pub async fn named(cloud: &Cloud, name: &str) -> Vec<Value> {
    let (_, v) = octavia(
        cloud,
        Method::GET,
        &format!("/v2/lbaas/loadbalancers?name={name}"),
        None,
    )
    .await;
    v["loadbalancers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l["provisioning_status"] != "DELETED")
        .collect()
}

pub async fn listeners(cloud: &Cloud, lb: &str) -> Vec<Value> {
    let (_, v) = octavia(
        cloud,
        Method::GET,
        &format!("/v2/lbaas/listeners?loadbalancer_id={lb}"),
        None,
    )
    .await;
    let mut l = v["listeners"].as_array().cloned().unwrap_or_default();
    l.sort_by_key(|l| l["protocol_port"].as_u64());
    l
}

pub async fn members(cloud: &Cloud, lb: &str, port: u16) -> Vec<(String, String, u64)> {
    let (_, v) = octavia(
        cloud,
        Method::GET,
        &format!("/v2/lbaas/pools?loadbalancer_id={lb}"),
        None,
    )
    .await;
    let listener = listeners(cloud, lb)
        .await
        .into_iter()
        .find(|l| l["protocol_port"] == port)
        .expect("listener");
    let pool = v["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["listeners"][0]["id"] == listener["id"])
        .expect("pool")
        .clone();
    let (_, m) = octavia(
        cloud,
        Method::GET,
        &format!("/v2/lbaas/pools/{}/members", pool["id"].as_str().unwrap()),
        None,
    )
    .await;
    let mut out: Vec<(String, String, u64)> = m["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_owned(),
                m["address"].as_str().unwrap().to_owned(),
                m["protocol_port"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Deletes what an earlier run left: load balancers of the test cluster, our ports.
pub async fn sweep(cloud: &Cloud) {
    let (_, v) = octavia(cloud, Method::GET, "/v2/lbaas/loadbalancers", None).await;
    for lb in v["loadbalancers"].as_array().into_iter().flatten() {
        let name = lb["name"].as_str().unwrap_or_default();
        if name.starts_with(&format!("kube_service_{CLUSTER}_")) {
            let id = lb["id"].as_str().unwrap();
            octavia(
                cloud,
                Method::DELETE,
                &format!("/v2/lbaas/loadbalancers/{id}?cascade=true"),
                None,
            )
            .await;
        }
    }
    let (_, fips) = neutron(cloud, Method::GET, "/v2.0/floatingips", None).await;
    for f in fips["floatingips"].as_array().into_iter().flatten() {
        if f["description"]
            .as_str()
            .unwrap_or_default()
            .contains(CLUSTER)
        {
            neutron(
                cloud,
                Method::DELETE,
                &format!("/v2.0/floatingips/{}", f["id"].as_str().unwrap()),
                None,
            )
            .await;
        }
    }
    let (_, ports) = neutron(cloud, Method::GET, "/v2.0/ports?name=overcast-it-vip", None).await;
    for p in ports["ports"].as_array().into_iter().flatten() {
        neutron(
            cloud,
            Method::DELETE,
            &format!("/v2.0/ports/{}", p["id"].as_str().unwrap()),
            None,
        )
        .await;
    }
}

pub fn service(
    name: &str,
    ports: &[(Protocol, u16, u16)],
    backends: &[(&str, &str)],
) -> LoadBalancerSpec {
    LoadBalancerSpec {
        name: format!("a{}", name.replace('-', "")),
        service: ServiceRef {
            namespace: "shop".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        ports: ports
            .iter()
            .map(|(protocol, port, node_port)| LbPort {
                name: format!("p{port}"),
                protocol: *protocol,
                port: *port,
                node_port: *node_port,
            })
            .collect(),
        backends: backends
            .iter()
            .map(|(node, address)| Backend {
                node: (*node).into(),
                address: (*address).into(),
                labels: BTreeMap::new(),
            })
            .collect(),
        ..LoadBalancerSpec::default()
    }
}

/// Runs `f` again on an Unavailable answer, as the ccm does (the simulator's Octavia keeps
/// its database in SQLite: a worker's flow can fail on "database is locked" and leave a
/// load balancer in ERROR, which the provider repairs on the next pass).
pub async fn retried<T>(what: &str, mut f: impl AsyncFnMut() -> overcast_cloud::Result<T>) -> T {
    for attempt in 1..=5 {
        match f().await {
            Ok(v) => return v,
            Err(CloudError::Unavailable(e)) if attempt < 5 => {
                eprintln!("{what}: {e} (attempt {attempt}; tried again)")
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
    unreachable!()
}

pub fn lbs(cloud: &Cloud, opts: LoadBalancerOpts) -> OctaviaLoadBalancers {
    OctaviaLoadBalancers::new(Arc::clone(&cloud.os), opts, CLUSTER.into()).with_waits(LbWaits {
        first: Duration::from_millis(200),
        longest: Duration::from_secs(2),
        // The deadline a user's ccm has (OCCM's ~5 minutes): the simulator's Octavia
        // took over 120 s for a listener's update under CI's load (CI16 of issue 72).
        deadline: LbWaits::default().deadline,
    })
}

/// Waits until the load balancer `id` is ACTIVE (one made here by hand, as OCCM would).
pub async fn lbs_wait(cloud: &Cloud, id: &str) -> overcast_cloud::Result<()> {
    for _ in 0..240 {
        let (_, v) = octavia(
            cloud,
            Method::GET,
            &format!("/v2/lbaas/loadbalancers/{id}"),
            None,
        )
        .await;
        match v["loadbalancer"]["provisioning_status"].as_str() {
            Some("ACTIVE") => return Ok(()),
            Some("ERROR") => return Err(CloudError::Unavailable(format!("{id} went into ERROR"))),
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    Err(CloudError::DeadlineExceeded(format!(
        "{id} not ACTIVE in 60 s"
    )))
}

/// The calls of these names made since `before` (a snapshot of the counters).
pub fn made(
    cloud: &Cloud,
    names: &[&str],
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    names
        .iter()
        .map(|n| {
            (
                n.to_string(),
                cloud.metrics.requests(n) - before.get(*n).copied().unwrap_or(0),
            )
        })
        .filter(|(_, c)| *c > 0)
        .collect()
}

pub fn snapshot(cloud: &Cloud, names: &[&str]) -> BTreeMap<String, u64> {
    names
        .iter()
        .map(|n| (n.to_string(), cloud.metrics.requests(n)))
        .collect()
}

pub const MUTATIONS: &[&str] = &[
    "loadbalancer_create",
    "loadbalancer_update",
    "listener_create",
    "listener_update",
    "listener_delete",
    "pool_create",
    "pool_delete",
    "member_batch_update",
    "healthmonitor_create",
    "healthmonitor_update",
    "healthmonitor_delete",
    "floating_ip_create",
];
