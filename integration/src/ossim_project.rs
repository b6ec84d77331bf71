//! A simulator's project made as large as a benchmark needs: servers booted in batches
//! (Nova's multiple-create, 10 a request, on a 64 MiB flavor), volumes made 20 at a time,
//! the quotas raised, and everything of a prefix swept — each step tolerant of the 500s
//! the simulator's SQLite answers under load.

use std::time::{Duration, Instant};

use http::Method;
use overcast_cloud_openstack::client::Microversion;
use overcast_cloud_openstack::{OpenStack, Service};
use serde_json::{json, Value};

pub async fn call(
    os: &OpenStack,
    service: Service,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let version = match service {
        Service::Compute => Some(Microversion(2, 47)),
        _ => None,
    };
    let r = os
        .call(service, "bench", method, path, body.as_ref(), version)
        .await
        .expect("call");
    (
        r.status.as_u16(),
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

/// The servers whose names start with `prefix`: (id, name, status).
pub async fn servers(os: &OpenStack, prefix: &str) -> Vec<(String, String, String)> {
    let (_, doc) = call(
        os,
        Service::Compute,
        Method::GET,
        &format!("/servers/detail?name=^{prefix}&limit=1000"),
        None,
    )
    .await;
    doc["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let field = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
            (field("id"), field("name"), field("status"))
        })
        .filter(|(_, _, status)| status != "DELETED")
        .collect()
}

/// The volumes whose names start with `prefix` (every status): (id, name, status).
pub async fn volumes(os: &OpenStack, prefix: &str) -> Vec<(String, String, String)> {
    let (_, doc) = call(
        os,
        Service::BlockStorage,
        Method::GET,
        "/volumes/detail?limit=1000",
        None,
    )
    .await;
    doc["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .map(|v| {
            let field = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (field("id"), field("name"), field("status"))
        })
        .collect()
}

/// A flavor (`<prefix>-tiny`, 64 MiB) small enough that hundreds of servers fit on the
/// simulator's one fake compute host.
pub async fn tiny_flavor(os: &OpenStack, prefix: &str) -> Value {
    let name = format!("{prefix}-tiny");
    let (_, flavors) = call(os, Service::Compute, Method::GET, "/flavors", None).await;
    if let Some(f) = flavors["flavors"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["name"] == name.as_str())
    {
        return f["id"].clone();
    }
    let (status, made) = call(
        os,
        Service::Compute,
        Method::POST,
        "/flavors",
        Some(json!({"flavor": {"name": name, "vcpus": 1, "ram": 64, "disk": 0}})),
    )
    .await;
    assert_eq!(status, 200, "{made}");
    made["flavor"]["id"].clone()
}

/// Boots servers named `<prefix>-…` until `n` are ACTIVE: Nova's multiple-create, 10 a
/// request, each batch waited for (more at once drove the simulator's SQLite into
/// "database is locked").
pub async fn grow_to(
    os: &OpenStack,
    flavor: &Value,
    image: &str,
    net: &str,
    prefix: &str,
    n: usize,
) {
    let started = Instant::now();
    loop {
        let all = servers(os, prefix).await;
        let active = all.iter().filter(|s| s.2 == "ACTIVE").count();
        if active >= n {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5400),
            "{active} of {n} ACTIVE after 90 minutes"
        );
        for (id, _, _) in all.iter().filter(|s| s.2 == "ERROR") {
            call(
                os,
                Service::Compute,
                Method::DELETE,
                &format!("/servers/{id}"),
                None,
            )
            .await;
        }
        if !all.iter().any(|s| s.2 == "BUILD") {
            let batch = (n - active).min(10);
            let (status, body) = call(
                os,
                Service::Compute,
                Method::POST,
                "/servers",
                Some(json!({"server": {
                    "name": format!("{prefix}-{:05}", all.len()), "imageRef": image,
                    "flavorRef": flavor, "networks": [{"uuid": net}],
                    "min_count": batch, "max_count": batch,
                }})),
            )
            .await;
            // The simulator's Nova (SQLite) answers a 500 now and then under load: asked
            // again next round.
            match status {
                202 => {}
                s if s >= 500 => eprintln!("Nova answered {s} to a boot; asking again: {body}"),
                _ => panic!("boot: {status} {body}"),
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Makes 1 GiB volumes named `<prefix>-…` with `metadata` until there are `n`, 20 at a
/// time, each batch waited out of `creating`.
pub async fn volumes_to(os: &OpenStack, prefix: &str, metadata: &Value, n: usize) {
    loop {
        let others = volumes(os, prefix).await.len();
        if others >= n {
            return;
        }
        for i in others..(others + 20).min(n) {
            let (status, body) = call(
                os,
                Service::BlockStorage,
                Method::POST,
                "/volumes",
                Some(
                    json!({"volume": {"name": format!("{prefix}-{i:05}"), "size": 1,
                    "metadata": metadata}}),
                ),
            )
            .await;
            match status {
                202 => {}
                s if s >= 500 => eprintln!("Cinder answered {s} to a create; asking again: {body}"),
                _ => panic!("volume create: {status} {body}"),
            }
        }
        settle_volumes(os, prefix).await;
    }
}

/// Waits (up to 10 minutes) until no volume named `<prefix>-…` is creating or deleting.
pub async fn settle_volumes(os: &OpenStack, prefix: &str) {
    let started = Instant::now();
    while volumes(os, prefix)
        .await
        .iter()
        .any(|(_, _, s)| s == "creating" || s == "deleting")
        && started.elapsed() < Duration::from_secs(600)
    {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Deletes every server and volume named `<prefix>-…` (an earlier run's), and waits for
/// them to go. Ten deletes a round, asked again each
/// round (a mass delete drove the simulator's SQLite into "database is locked", leaving
/// servers in ERROR that a single delete never removed).
pub async fn sweep(os: &OpenStack, prefix: &str) {
    let started = Instant::now();
    loop {
        let left = servers(os, prefix).await;
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "{} servers left after 30 minutes",
            left.len()
        );
        for (id, _, _) in left.iter().take(10) {
            // A delete that failed halfway leaves its task `deleting` for good, and Nova
            // then ignores another: the admin's reset clears it first.
            call(
                os,
                Service::Compute,
                Method::POST,
                &format!("/servers/{id}/action"),
                Some(json!({"os-resetState": {"state": "error"}})),
            )
            .await;
            call(
                os,
                Service::Compute,
                Method::DELETE,
                &format!("/servers/{id}"),
                None,
            )
            .await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    loop {
        settle_volumes(os, prefix).await;
        let left = volumes(os, prefix).await;
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2400),
            "{} volumes left",
            left.len()
        );
        for (id, _, _) in left.iter().take(20) {
            call(
                os,
                Service::BlockStorage,
                Method::DELETE,
                &format!("/volumes/{id}"),
                None,
            )
            .await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Raises the project's quotas (instances, cores, RAM, ports, volumes, gigabytes: no limit)
/// and finds or makes the network `<prefix>` (a /20 subnet); returns its id.
pub async fn prepare(admin: &OpenStack, prefix: &str) -> String {
    let project = admin
        .session()
        .await
        .expect("token")
        .project_id
        .clone()
        .expect("a project-scoped token");
    call(
        admin,
        Service::Compute,
        Method::PUT,
        &format!("/os-quota-sets/{project}"),
        Some(json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}})),
    )
    .await;
    call(
        admin,
        Service::Network,
        Method::PUT,
        &format!("/v2.0/quotas/{project}"),
        Some(json!({"quota": {"port": -1}})),
    )
    .await;
    call(
        admin,
        Service::BlockStorage,
        Method::PUT,
        &format!("/os-quota-sets/{project}"),
        Some(json!({"quota_set": {"volumes": -1, "gigabytes": -1}})),
    )
    .await;
    let (_, found) = call(
        admin,
        Service::Network,
        Method::GET,
        &format!("/v2.0/networks?name={prefix}"),
        None,
    )
    .await;
    let net = match found["networks"][0]["id"].as_str() {
        Some(id) => id.to_owned(),
        None => {
            let (_, made) = call(
                admin,
                Service::Network,
                Method::POST,
                "/v2.0/networks",
                Some(json!({"network": {"name": prefix}})),
            )
            .await;
            let id = made["network"]["id"].as_str().unwrap().to_owned();
            call(
                admin,
                Service::Network,
                Method::POST,
                "/v2.0/subnets",
                Some(json!({"subnet": {"network_id": id, "ip_version": 4, "cidr": "10.210.0.0/20", "name": prefix}})),
            )
            .await;
            id
        }
    };
    net
}
