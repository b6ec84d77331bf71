//! The OpenStack layouts run by the real Terraform with `terraform-provider-overcast`
//! installed as terraform-provider-openstack, against the real services of
//! `../shared/sim/openstack`: the API calls, the bytes (request and answer bodies) and the
//! time of
//! - the plan of an unchanged Standard master (dhctl's converge check), beside the
//!   baseline: the same objects read once each by the OpenStack client (the server, its
//!   port, its two volumes, the attachment, the floating IP);
//! - the apply of a static node, beside the baseline: the client making the same port and
//!   server and waiting for it to be ACTIVE.
//!
//! Every call goes through a counting front before its service: a Keystone region of the
//! benchmark's own (`Bench`) whose endpoints are the fronts, the provider's region set to
//! it, Keystone itself behind one too (its token requests count).
//!
//! `OVERCAST_TEST_OPENSTACK_OPENRC=/tmp/ossim/openrc cargo bench -p overcast-integration
//! --bench terraform_openstack` (Terraform: `OVERCAST_TERRAFORM` or on the PATH; the
//! provider from `cargo build --release --bins`, else the debug one).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use overcast_integration::faulty_front::FaultyFront;
use overcast_integration::figures::{median, ms};
use overcast_integration::terraform::{self, Workspace};
use serde_json::{json, Value};

const RUNS: usize = 3;
const REGION: &str = "Bench";
const PREFIX: &str = "ostb";

/// The fronts' calls and bytes together.
fn counted(fronts: &[FaultyFront]) -> (u64, u64) {
    fronts.iter().fold((0, 0), |(c, b), f| {
        let (n, bytes) = f.passed();
        (c + n as u64, b + bytes)
    })
}

/// Each front's calls so far.
fn calls(fronts: &[FaultyFront]) -> Vec<usize> {
    fronts.iter().map(|f| f.passed().0).collect()
}

/// The calls since `before`, by front.
fn since(fronts: &[FaultyFront], before: &[usize]) -> Vec<usize> {
    calls(fronts)
        .iter()
        .zip(before)
        .map(|(n, b)| n - b)
        .collect()
}

/// One run's calls by service.
fn by_service(kinds: &[&str], delta: &[usize]) {
    let parts: Vec<String> = kinds
        .iter()
        .zip(delta)
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!("    calls of one run by service: {}", parts.join(", "));
}

fn row(what: &str, times: Vec<Duration>, counts: Vec<(u64, u64)>) {
    let n = counts.len() as f64;
    let calls = counts.iter().map(|c| c.0).sum::<u64>() as f64 / n;
    let bytes = counts.iter().map(|c| c.1).sum::<u64>() as f64 / n;
    println!(
        "{what:<52} {:>10} {calls:>8.1} calls {:>9.1} KiB",
        ms(median(times)),
        bytes / 1024.0
    );
}

/// curl with the admin token: (status, JSON).
fn curl(token: &str, method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method])
        .args(["-H", "Content-Type: application/json", "-H"])
        .arg(format!("X-Auth-Token: {token}"));
    if let Some(b) = body {
        cmd.args(["-d", &b.to_string()]);
    }
    let out = cmd.arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn admin_token(env: &BTreeMap<String, String>) -> String {
    let auth = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": env["OS_USERNAME"], "domain": {"id": env["OS_USER_DOMAIN_ID"]}, "password": env["OS_PASSWORD"]}}},
        "scope": {"project": {"name": env["OS_PROJECT_NAME"], "domain": {"id": env["OS_PROJECT_DOMAIN_ID"]}}}}});
    let out = Command::new("curl")
        .args(["-sS", "-i", "-H", "Content-Type: application/json", "-d"])
        .arg(auth.to_string())
        .arg(format!(
            "{}/auth/tokens",
            env["OS_AUTH_URL"].trim_end_matches('/')
        ))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("x-subject-token")
                .then(|| v.trim().to_owned())
        })
        .expect("a token")
}

/// The endpoints of the region `Bench` removed (what an earlier run left, or this one's).
fn drop_region(keystone: &str, token: &str) {
    let eps = curl(
        token,
        "GET",
        &format!("{keystone}/endpoints?region_id={REGION}"),
        None,
    )
    .1;
    for e in eps["endpoints"].as_array().into_iter().flatten() {
        curl(
            token,
            "DELETE",
            &format!("{keystone}/endpoints/{}", e["id"].as_str().unwrap()),
            None,
        );
    }
}

/// The region `Bench`: each service's public endpoint of `home` through its front.
async fn region(
    env: &BTreeMap<String, String>,
    token: &str,
) -> (Vec<FaultyFront>, Vec<&'static str>) {
    let keystone = env["OS_AUTH_URL"].trim_end_matches('/').to_owned();
    let home = env["OS_REGION_NAME"].clone();
    drop_region(&keystone, token);
    curl(
        token,
        "POST",
        &format!("{keystone}/regions"),
        Some(json!({"region": {"id": REGION}})),
    );
    let (mut fronts, mut kinds) = (Vec::new(), Vec::new());
    for kind in ["compute", "network", "volumev3", "block-storage", "image"] {
        let svc = curl(
            token,
            "GET",
            &format!("{keystone}/services?type={kind}"),
            None,
        )
        .1;
        let Some(id) = svc["services"][0]["id"].as_str() else {
            continue;
        };
        let eps = curl(
            token,
            "GET",
            &format!("{keystone}/endpoints?service_id={id}&interface=public&region_id={home}"),
            None,
        )
        .1;
        let Some(url) = eps["endpoints"][0]["url"].as_str() else {
            continue;
        };
        let uri: http::Uri = url.replace("%(", "pct-(").parse().expect("endpoint");
        let upstream = format!("{}:{}", uri.host().unwrap(), uri.port_u16().unwrap_or(80));
        let front = FaultyFront::start(upstream.parse().expect("address")).await;
        let via = format!("http://{}{}", front.addr, uri.path().replace("pct-(", "%("));
        curl(
            token,
            "POST",
            &format!("{keystone}/endpoints"),
            Some(json!({"endpoint": {
            "service_id": id, "interface": "public", "region_id": REGION, "url": via}})),
        );
        fronts.push(front);
        kinds.push(kind);
    }
    let ks: http::Uri = keystone.parse().unwrap();
    fronts.push(
        FaultyFront::start(
            format!("{}:{}", ks.host().unwrap(), ks.port_u16().unwrap())
                .parse()
                .unwrap(),
        )
        .await,
    );
    kinds.push("identity");
    (fronts, kinds)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Ok(openrc) = std::env::var("OVERCAST_TEST_OPENSTACK_OPENRC") else {
        overcast_integration::say_skipped(
            "set OVERCAST_TEST_OPENSTACK_OPENRC to run the OpenStack Terraform benchmark",
        );
        return;
    };
    let Some(bin) = terraform::binary("the OpenStack Terraform benchmark") else {
        return;
    };
    let env = overcast_integration::ossim::openrc(&openrc);
    let token = admin_token(&env);
    let (fronts, kinds) = region(&env, &token).await;
    let keystone_front = fronts.last().unwrap().addr;
    let auth_url = format!("http://{keystone_front}/v3");
    let _ = std::fs::create_dir_all("/dev/mapper");
    println!(
        "{:<52} {:>10} {:>14} {:>13}",
        "(median of 3)", "time", "API calls", "bytes"
    );

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let layouts = terraform::copy_layouts("openstack", root);
    let vars = json!({
        "clusterConfiguration": {"cloud": {"provider": "OpenStack", "prefix": PREFIX}, "podSubnetCIDR": "10.111.0.0/16"},
        "providerClusterConfiguration": {
            "layout": "Standard", "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx6iJ2ckwTG7DZQfAQVPTqTy2NQoa4JDVHLOZMYtT5V bench",
            "standard": {"internalNetworkCIDR": "192.168.230.0/24", "internalNetworkDNSServers": ["8.8.8.8"], "externalNetworkName": "public"},
            "provider": {"authURL": auth_url, "domainName": "Default", "tenantName": env["OS_PROJECT_NAME"],
                         "username": env["OS_USERNAME"], "password": env["OS_PASSWORD"], "region": REGION},
            "masterNodeGroup": {"replicas": 1, "volumeTypeMap": {"nova": "__DEFAULT__"},
                "instanceClass": {"flavorName": "m1.small", "imageName": "fake-image", "rootDiskSize": 1, "etcdDiskSizeGb": 1}},
            "nodeGroups": [{"name": "worker", "replicas": 1,
                "instanceClass": {"flavorName": "m1.small", "imageName": "fake-image", "mainNetwork": PREFIX}}],
        },
        "clusterUUID": "5c4e1a7e-1111-4222-8333-944444444444", "nodeIndex": 0, "nodeGroupName": "worker",
        "cloudConfig": "I2Nsb3VkLWNvbmZpZwo=",
    });
    let var_file = root.join("vars.json");
    std::fs::write(&var_file, vars.to_string()).unwrap();
    let v = format!("-var-file={}", var_file.display());
    let module = |step: &str| {
        let plugins = root.join(step);
        std::fs::create_dir_all(&plugins).unwrap();
        let w = Workspace::module(
            &bin,
            &plugins,
            layouts.join("layouts/standard").join(step),
            ("terraform-provider-openstack", "openstack"),
        );
        tokio::task::block_in_place(|| w.init());
        w
    };
    let run = |w: &Workspace, args: &[&str]| tokio::task::block_in_place(|| w.run(args).ok());
    let base = module("base-infrastructure");
    run(
        &base,
        &["apply", "-input=false", "-no-color", "-auto-approve", &v],
    );
    let master = module("master-node");
    run(
        &master,
        &["apply", "-input=false", "-no-color", "-auto-approve", &v],
    );

    // The plan of the unchanged master.
    let (mut times, mut counts) = (vec![], vec![]);
    let mut last = Vec::new();
    for _ in 0..RUNS {
        let each = calls(&fronts);
        let before = counted(&fronts);
        let t = Instant::now();
        let plan = tokio::task::block_in_place(|| master.plan(&[&v]));
        assert_eq!(plan.code, 0, "{}{}", plan.stdout, plan.stderr);
        times.push(t.elapsed());
        last = since(&fronts, &each);
        let after = counted(&fronts);
        counts.push((after.0 - before.0, after.1 - before.1));
    }
    row("OpenStack master-node: plan, unchanged", times, counts);
    by_service(&kinds, &last);

    // Baseline: the client reads each of the master's objects once.
    let state: Value =
        serde_json::from_slice(&std::fs::read(master.dir.join("terraform.tfstate")).unwrap())
            .unwrap();
    let id = |ty: &str, name: &str| id_of(&state, "managed", ty, name);
    let server = id("openstack_compute_instance_v2", "master");
    let reads = [
        (
            overcast_cloud_openstack::Service::Compute,
            format!("/servers/{server}"),
        ),
        (
            overcast_cloud_openstack::Service::Network,
            format!(
                "/v2.0/ports/{}",
                id(
                    "openstack_networking_port_v2",
                    "master_internal_with_security"
                )
            ),
        ),
        (
            overcast_cloud_openstack::Service::BlockStorage,
            format!(
                "/volumes/{}",
                id("openstack_blockstorage_volume_v3", "master")
            ),
        ),
        (
            overcast_cloud_openstack::Service::BlockStorage,
            format!(
                "/volumes/{}",
                id("openstack_blockstorage_volume_v3", "kubernetes_data")
            ),
        ),
        (
            overcast_cloud_openstack::Service::Compute,
            format!(
                "/servers/{}",
                id("openstack_compute_volume_attach_v2", "kubernetes_data")
                    .replace('/', "/os-volume_attachments/")
            ),
        ),
        (
            overcast_cloud_openstack::Service::Compute,
            format!(
                "/os-floating-ips/{}",
                id("openstack_compute_floatingip_v2", "master")
            ),
        ),
    ];
    let conf = root.join("cloud.conf");
    std::fs::write(&conf, format!(
        "[Global]\nauth-url = {auth_url}\nusername = {}\npassword = {}\nuser-domain-name = Default\ntenant-name = {}\ntenant-domain-name = Default\nregion = {REGION}\n",
        env["OS_USERNAME"], env["OS_PASSWORD"], env["OS_PROJECT_NAME"])).unwrap();
    let (mut times, mut counts) = (vec![], vec![]);
    for _ in 0..RUNS {
        // A client as a process starts it: its own token.
        let config = overcast_cloud_openstack::Config::load(Some(&conf)).unwrap();
        let os = overcast_cloud_openstack::connect(&config, None).unwrap();
        let before = counted(&fronts);
        let t = Instant::now();
        for (service, path) in &reads {
            os.expect(*service, "bench", http::Method::GET, path, None, &[200])
                .await
                .expect(path);
        }
        times.push(t.elapsed());
        let after = counted(&fronts);
        counts.push((after.0 - before.0, after.1 - before.1));
    }
    row(
        "OpenStack baseline: read the master's objects (client)",
        times,
        counts,
    );

    // A static node's apply, and the baseline's port and server.
    let node = module("static-node");
    let (mut times, mut counts) = (vec![], vec![]);
    let mut last = Vec::new();
    for _ in 0..RUNS {
        let each = calls(&fronts);
        let before = counted(&fronts);
        let t = Instant::now();
        run(
            &node,
            &["apply", "-input=false", "-no-color", "-auto-approve", &v],
        );
        times.push(t.elapsed());
        last = since(&fronts, &each);
        let after = counted(&fronts);
        counts.push((after.0 - before.0, after.1 - before.1));
        run(
            &node,
            &["destroy", "-input=false", "-no-color", "-auto-approve", &v],
        );
    }
    row("OpenStack static-node: apply", times, counts);
    by_service(&kinds, &last);
    let network = id_of(
        &state,
        "data",
        "openstack_networking_network_v2",
        "internal",
    );
    let (mut times, mut counts) = (vec![], vec![]);
    let image = curl(
        &token,
        "GET",
        "http://127.0.0.1:9292/v2/images?name=fake-image",
        None,
    )
    .1["images"][0]["id"]
        .clone();
    let flavors = curl(&token, "GET", "http://127.0.0.1:8774/v2.1/flavors", None).1;
    let flavor = flavors["flavors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "m1.small")
        .unwrap()["id"]
        .clone();
    for _ in 0..RUNS {
        let config = overcast_cloud_openstack::Config::load(Some(&conf)).unwrap();
        let os = overcast_cloud_openstack::connect(&config, None).unwrap();
        let before = counted(&fronts);
        let t = Instant::now();
        use overcast_cloud_openstack::Service::{Compute, Network};
        let port = os
            .expect(
                Network,
                "bench",
                http::Method::POST,
                "/v2.0/ports",
                Some(
                    &json!({"port": {"network_id": network, "name": format!("{PREFIX}-baseline")}}),
                ),
                &[201],
            )
            .await
            .unwrap();
        let port: Value = serde_json::from_slice(&port.body).unwrap();
        let made = os.expect(Compute, "bench", http::Method::POST, "/servers", Some(&json!({"server": {"name": format!("{PREFIX}-baseline"), "imageRef": image, "flavorRef": flavor, "networks": [{"port": port["port"]["id"]}]}})), &[202]).await.unwrap();
        let made: Value = serde_json::from_slice(&made.body).unwrap();
        let sid = made["server"]["id"].as_str().unwrap().to_owned();
        loop {
            let s = os
                .expect(
                    Compute,
                    "bench",
                    http::Method::GET,
                    &format!("/servers/{sid}"),
                    None,
                    &[200],
                )
                .await
                .unwrap();
            let s: Value = serde_json::from_slice(&s.body).unwrap();
            if s["server"]["status"] == "ACTIVE" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        times.push(t.elapsed());
        let after = counted(&fronts);
        counts.push((after.0 - before.0, after.1 - before.1));
        os.expect(
            Compute,
            "bench",
            http::Method::DELETE,
            &format!("/servers/{sid}"),
            None,
            &[204],
        )
        .await
        .unwrap();
        while os
            .expect(
                Compute,
                "bench",
                http::Method::GET,
                &format!("/servers/{sid}"),
                None,
                &[200],
            )
            .await
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        os.expect(
            Network,
            "bench",
            http::Method::DELETE,
            &format!("/v2.0/ports/{}", port["port"]["id"].as_str().unwrap()),
            None,
            &[204],
        )
        .await
        .unwrap();
    }
    row(
        "OpenStack baseline: make the port and server (client)",
        times,
        counts,
    );

    run(
        &master,
        &["destroy", "-input=false", "-no-color", "-auto-approve", &v],
    );
    run(
        &base,
        &["destroy", "-input=false", "-no-color", "-auto-approve", &v],
    );
    // The region goes with the fronts it named.
    let keystone = env["OS_AUTH_URL"].trim_end_matches('/').to_owned();
    drop_region(&keystone, &token);
    for e in std::fs::read_dir("/dev/mapper")
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name()
            .to_string_lossy()
            .starts_with("cinder--volumes-volume--")
            && e.file_type().is_ok_and(|t| t.is_file())
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The id of a data source (`mode = "data"`) of the state.
fn id_of(state: &Value, mode: &str, ty: &str, name: &str) -> String {
    state["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == ty && r["name"] == name && r["mode"] == mode)
        .map(|r| {
            r["instances"][0]["attributes"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .unwrap_or_else(|| panic!("{mode} {ty}.{name}"))
}
