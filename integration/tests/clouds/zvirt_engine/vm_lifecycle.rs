//! The simulator's VM lives against the engine's rules (its header cites the commands):
//! a clone from a template is `image_locked` then `down` with a bootable copy of the
//! template's disk; start walks `wait_for_launch` → `powering_up` → `up` and the guest's
//! addresses follow; the refusals carry the engine's statuses and messages; removing a VM
//! removes its disks unless `detach_only`. Driven through the provider's own engine client
//! (SSO, JSON), as the CAPI provider will be.

use http::Method;
use serde_json::{json, Value};

use super::*;

async fn call(
    e: &overcast_cloud_zvirt::client::Engine,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let resp = e.call("it", method, path, body.as_ref()).await.unwrap();
    let doc = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
    (resp.status.as_u16(), doc)
}

/// `POST /vms/{id}/{verb}`: the status answered.
async fn action(e: &overcast_cloud_zvirt::client::Engine, id: &str, verb: &str) -> u16 {
    call(
        e,
        Method::POST,
        &format!("/vms/{id}/{verb}"),
        Some(json!({})),
    )
    .await
    .0
}

async fn status_of(e: &overcast_cloud_zvirt::client::Engine, id: &str) -> String {
    call(e, Method::GET, &format!("/vms/{id}"), None).await.1["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Polls until the VM's status is `want`; the statuses seen on the way, in order.
async fn walk_to(e: &overcast_cloud_zvirt::client::Engine, id: &str, want: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..300 {
        let s = status_of(e, id).await;
        if seen.last() != Some(&s) {
            seen.push(s.clone());
        }
        if s == want {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} not {want}: {seen:?}");
}

#[tokio::test]
async fn a_vm_is_cloned_started_stopped_and_removed_as_the_engine_does() {
    let s = sim(Latency::default()).await;
    s.engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = s.engine.add_vnic_profile("ovirtmgmt");
    s.engine
        .set_guest_ips_on_boot("worker-0", &["10.1.0.7", "fe80::1"]);
    let config = config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD);
    let e = overcast_cloud_zvirt::connect(&config, None).unwrap();

    // The template is found by name.
    let (code, templates) = call(
        &e,
        Method::GET,
        "/templates?search=name%3Dubuntu-2204",
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(templates["template"][0]["name"], "ubuntu-2204");

    // What the REST layer refuses before any command runs.
    let (code, doc) = call(
        &e,
        Method::POST,
        "/vms?clone=true",
        Some(json!({"name": "x", "template": {"name": "ubuntu-2204"}})),
    )
    .await;
    assert_eq!(
        (code, doc["reason"].as_str()),
        (400, Some("Incomplete parameters")),
        "{doc}"
    );
    let (code, _) = call(
        &e,
        Method::POST,
        "/vms?clone=true",
        Some(json!({"name": "x", "cluster": {"name": "Default"}, "template": {"name": "no-such"}})),
    )
    .await;
    assert_eq!(code, 404);

    let vm = json!({
        "name": "worker-0", "cluster": {"name": "Default"}, "template": {"name": "ubuntu-2204"},
        "type": "high_performance", "memory": (8u64 << 30).to_string(),
        "memory_policy": {"ballooning": "false", "guaranteed": (8u64 << 30).to_string(), "max": (8u64 << 30).to_string()},
        "cpu": {"topology": {"sockets": "4", "cores": "1", "threads": "1"}},
        "initialization": {"custom_script": "#cloud-config\nruncmd: [\"echo <&>\"]\n", "host_name": "worker-0"},
    });
    let (code, made) = call(&e, Method::POST, "/vms?clone=true", Some(vm.clone())).await;
    assert_eq!(code, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["status"], "image_locked");
    // A second VM of the name: 409, nothing made.
    let (code, doc) = call(&e, Method::POST, "/vms?clone=true", Some(vm)).await;
    assert_eq!(code, 409, "{doc}");
    // Locked while its disk is copied: not started, not removed.
    let (code, doc) = call(
        &e,
        Method::POST,
        &format!("/vms/{id}/start"),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 409, "{doc}");
    assert!(doc["detail"].as_str().unwrap().contains("locked"), "{doc}");
    let (code, _) = call(&e, Method::DELETE, &format!("/vms/{id}"), None).await;
    assert_eq!(code, 409);
    assert_eq!(walk_to(&e, &id, "down").await.last().unwrap(), "down");

    // The copy: one bootable active disk of the template's size.
    let (_, atts) = call(&e, Method::GET, &format!("/vms/{id}/diskattachments"), None).await;
    let boot = &atts["disk_attachment"][0];
    assert_eq!(
        (boot["bootable"].as_str(), boot["active"].as_str()),
        (Some("true"), Some("true")),
        "{atts}"
    );
    let disk = boot["disk"]["id"].as_str().unwrap().to_owned();
    let (_, d) = call(&e, Method::GET, &format!("/disks/{disk}"), None).await;
    assert_eq!(
        overcast_cloud_zvirt::client::number(&d["provisioned_size"]),
        Some(10 * GIB)
    );

    // A NIC on a profile that exists; a second of the name 409; an unknown profile 400.
    let nic = json!({"name": "nic1", "vnic_profile": {"id": profile}});
    assert_eq!(
        call(
            &e,
            Method::POST,
            &format!("/vms/{id}/nics"),
            Some(nic.clone())
        )
        .await
        .0,
        201
    );
    assert_eq!(
        call(&e, Method::POST, &format!("/vms/{id}/nics"), Some(nic))
            .await
            .0,
        409
    );
    let other =
        json!({"name": "nic2", "vnic_profile": {"id": "00000000-0000-0000-0000-00000000beef"}});
    assert_eq!(
        call(&e, Method::POST, &format!("/vms/{id}/nics"), Some(other))
            .await
            .0,
        400
    );

    // What it was made with is what the engine reports.
    let got = s.engine.vm_by_name("worker-0").unwrap();
    assert_eq!(got["type"], "high_performance");
    assert_eq!(got["cpu"]["topology"]["sockets"], "4");
    assert_eq!(got["memory_policy"]["ballooning"], "false");
    assert_eq!(got["initialization"]["host_name"], "worker-0");
    assert!(got["initialization"]["custom_script"]
        .as_str()
        .unwrap()
        .contains("<&>"));

    // Stopping a VM that is down: 409.
    assert_eq!(action(&e, &id, "stop").await, 409);
    // Started: the engine's path to up, then the guest's addresses.
    assert_eq!(action(&e, &id, "start").await, 200);
    let seen = walk_to(&e, &id, "up").await;
    assert_eq!(seen, ["wait_for_launch", "powering_up", "up"]);
    assert_eq!(action(&e, &id, "start").await, 409);
    let ips = overcast_integration::real::wait_for(
        "the guest's addresses",
        Duration::from_secs(5),
        async || {
            let d = call(&e, Method::GET, &format!("/vms/{id}/reporteddevices"), None)
                .await
                .1;
            (!d["reported_device"].is_null()).then_some(d)
        },
    )
    .await;
    assert_eq!(ips["reported_device"][0]["name"], "eth0", "{ips}");
    assert_eq!(
        ips["reported_device"][0]["ips"]["ip"][0]["address"],
        "10.1.0.7"
    );

    // Removing a running VM: 409. Stopped, removed: its disks go with it.
    assert_eq!(
        call(&e, Method::DELETE, &format!("/vms/{id}"), None)
            .await
            .0,
        409
    );
    assert_eq!(action(&e, &id, "stop").await, 200);
    assert_eq!(status_of(&e, &id).await, "down");
    assert_eq!(
        call(&e, Method::DELETE, &format!("/vms/{id}"), None)
            .await
            .0,
        200
    );
    assert_eq!(
        call(&e, Method::GET, &format!("/vms/{id}"), None).await.0,
        404
    );
    overcast_integration::real::wait_for(
        "the VM's boot disk gone with it",
        Duration::from_secs(5),
        async || {
            (call(&e, Method::GET, &format!("/disks/{disk}"), None)
                .await
                .0
                == 404)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_vm_removed_with_detach_only_leaves_its_disks() {
    let s = sim(Latency::default()).await;
    s.engine.add_template("base", GIB);
    let config = config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD);
    let e = overcast_cloud_zvirt::connect(&config, None).unwrap();
    let (code, made) = call(
        &e,
        Method::POST,
        "/vms",
        Some(json!({"name": "keep", "cluster": {"name": "Default"}, "template": {"name": "base"}})),
    )
    .await;
    assert_eq!(code, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    // Without clone the VM is down at once.
    assert_eq!(made["status"], "down");
    let disk = call(&e, Method::GET, &format!("/vms/{id}/diskattachments"), None)
        .await
        .1["disk_attachment"][0]["disk"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        call(
            &e,
            Method::DELETE,
            &format!("/vms/{id}?detach_only=true"),
            None
        )
        .await
        .0,
        200
    );
    tokio::time::sleep(Latency::default().remove * 3).await;
    assert_eq!(
        call(&e, Method::GET, &format!("/disks/{disk}"), None)
            .await
            .0,
        200
    );
}
