//! An engine that holds far more than this cluster (issue 70): the simulator searches and
//! pages as the engine does, and the provider reads this cluster's VMs and disks alone —
//! through the provider's own client and the csi binary's socket. The figures at 10 and
//! 2,000 VMs are the `zvirt_scale` benchmark's.

use http::Method;
use overcast_cloud::{Instances, NodeRef};
use overcast_cloud_http::HttpSettings;
use overcast_cloud_zvirt::EngineInstances;
use serde_json::Value;

use super::*;

/// The names (a disk's alias) of what `GET /<collection>?search=…&max=…` answers.
async fn found(
    engine: &overcast_cloud_zvirt::Engine,
    collection: &str,
    search: &str,
    max: Option<usize>,
) -> Vec<String> {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("search", search);
    if let Some(m) = max {
        q.append_pair("max", &m.to_string());
    }
    let path = format!("/{collection}?{}", q.finish());
    let doc: Value = engine
        .json("search", Method::GET, &path, None)
        .await
        .unwrap();
    let kind = collection.trim_end_matches('s');
    doc[kind]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            v["name"]
                .as_str()
                .or(v["alias"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

/// 5,000 VMs listed in pages as the engine pages a VM search (`page n` of `max`, by name),
/// a disk search as the engine answers it (its first `max`; `page 2` empty), and the
/// searches its backend refuses answered with nothing.
#[tokio::test]
async fn the_simulator_pages_and_searches_as_the_engine_does() {
    let s = sim(Latency::default()).await;
    for i in 0..5_000 {
        s.engine.add_vm(&format!("vm-{:05}", 4_999 - i));
    }
    let engine =
        overcast_cloud_zvirt::connect(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD), None)
            .unwrap();
    let mut seen = Vec::new();
    for page in 1..=11 {
        let got = found(
            &engine,
            "vms",
            &format!("sortby name page {page}"),
            Some(500),
        )
        .await;
        assert_eq!(got.len(), if page <= 10 { 500 } else { 0 }, "page {page}");
        seen.extend(got);
    }
    let want: Vec<String> = (0..5_000).map(|i| format!("vm-{i:05}")).collect();
    assert_eq!(seen, want, "every VM once, in name order");
    // `desc`, wildcards, `or`, `!=` on the cluster.
    let got = found(
        &engine,
        "vms",
        "name=vm-0000* or name=VM-04999 sortby name desc",
        None,
    )
    .await;
    assert_eq!(
        got,
        [
            "vm-04999", "vm-00009", "vm-00008", "vm-00007", "vm-00006", "vm-00005", "vm-00004",
            "vm-00003", "vm-00002", "vm-00001", "vm-00000"
        ]
    );
    let other = format!("cluster!={}", zvirt_sim::CLUSTER);
    let got = found(&engine, "vms", &other, None).await;
    assert!(got.is_empty());
    // What the backend refuses: nothing, 200.
    for refused in ["color=red", "name='x'", "id=not-a-uuid", "name=a or"] {
        let got = found(&engine, "vms", refused, None).await;
        assert!(got.is_empty(), "{refused}: {got:?}");
    }
    // Disks: a search runs whole, its first `max` kept; later pages are empty.
    let vm = s.engine.add_vm("holder");
    for _ in 0..3 {
        s.engine.add_boot_disk(&vm, GIB);
    }
    let got = found(&engine, "disks", "alias=holder_*", Some(2)).await;
    assert_eq!(got.len(), 2);
    let got = found(&engine, "disks", "alias=holder_* page 2", Some(2)).await;
    assert!(got.is_empty(), "{got:?}");
}

/// An answer over the client's limit is an error naming the endpoint and the size, asked
/// once — never a truncated listing, never read again and again.
#[tokio::test]
async fn an_answer_over_the_client_s_limit_is_a_clear_error_asked_once() {
    let s = sim(Latency::default()).await;
    for i in 0..300 {
        s.engine.add_vm(&format!("vm-{i}"));
    }
    let settings = HttpSettings {
        max_body: 64 << 10,
        ..HttpSettings::new("zvirt")
    };
    let engine = overcast_cloud_zvirt::connect_with(
        &config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD),
        settings,
        None,
    )
    .unwrap();
    let instances = EngineInstances::new(engine);
    let before = s.engine.calls().get("GET /vms").copied().unwrap_or(0);
    let e = instances.list_instances().await.unwrap_err().to_string();
    assert!(
        e.contains("vm_list") && e.contains("/ovirt-engine/api/vms") && e.contains("65536 bytes"),
        "{e}"
    );
    assert_eq!(s.engine.calls()["GET /vms"] - before, 1, "asked once");
}

/// The ccm's question at 2,000 VMs: the nodes' VMs alone, by id and by name, the same
/// calls and about the same bytes as at 10; a VM the search leaves out is gone only when
/// its own read says so, and a search the engine refuses is not taken for "all gone".
#[tokio::test]
async fn a_sync_reads_the_nodes_vms_alone_and_a_blind_search_deletes_nothing() {
    let s = sim(Latency::default()).await;
    s.engine.add_cluster("other", zvirt_sim::DATA_CENTER);
    let w0 = s.engine.add_vm("worker-0");
    let w1 = s.engine.add_vm("worker-1");
    s.engine.set_vm_ips(&w0, &["10.1.0.10"]);
    let engine =
        overcast_cloud_zvirt::connect(&config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD), None)
            .unwrap();
    let instances = EngineInstances::new(engine);
    let gone = "00000000-0000-4000-8000-00000000dead";
    let ids = [format!("zvirt://{w0}"), format!("zvirt://{gone}")];
    let nodes = [
        NodeRef {
            name: "worker-0",
            provider_id: Some(&ids[0]),
        },
        NodeRef {
            name: "gone",
            provider_id: Some(&ids[1]),
        },
        NodeRef {
            name: "worker-1",
            provider_id: None,
        },
        NodeRef {
            name: "elsewhere",
            provider_id: Some("aws:///i-1"),
        },
    ];
    let ask = async || {
        let (calls, bytes) = (s.engine.total_calls(), s.engine.answer_bytes());
        let mut found: Vec<String> = instances
            .instances_of(&nodes)
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.provider_id)
            .collect();
        found.sort();
        (
            found,
            s.engine.total_calls() - calls,
            s.engine.answer_bytes() - bytes,
        )
    };
    let mut want = vec![format!("zvirt://{w0}"), format!("zvirt://{w1}")];
    want.sort();
    let (found, calls_small, bytes_small) = ask().await;
    assert_eq!(found, want);
    for i in 0..2_000 {
        let id = s.engine.add_vm_in(&format!("other-{i}"), "other");
        s.engine.set_vm_ips(&id, &["10.2.0.1"]);
    }
    let (found, calls_large, bytes_large) = ask().await;
    assert_eq!(found, want);
    assert_eq!(
        calls_large, calls_small,
        "one search, the clusters, the data centers"
    );
    assert!(
        bytes_large < bytes_small + 4096,
        "{bytes_small} → {bytes_large} bytes"
    );
    assert!(
        !s.engine.calls().contains_key("GET /vms/{id}"),
        "no VM read alone: {:?}",
        s.engine.calls()
    );

    // The engine refusing every search: the answer is still whole (each id read alone,
    // then the listing), never a node taken for gone.
    s.engine.set_blind_search(true);
    let (found, _, _) = ask().await;
    assert_eq!(found.len(), 2_002, "the whole listing answers");
    assert!(found.contains(&format!("zvirt://{w0}")) && found.contains(&format!("zvirt://{w1}")));
    s.engine.set_blind_search(false);
    // A chunk whose every node is gone: each id's own 404 says so, no listing.
    let only_gone = [NodeRef {
        name: "gone",
        provider_id: Some(&ids[1]),
    }];
    let listed = s.engine.calls().get("GET /vms").copied().unwrap_or(0);
    assert!(instances.instances_of(&only_gone).await.unwrap().is_empty());
    assert_eq!(
        s.engine.calls()["GET /vms"],
        listed + 1,
        "the search alone, no listing"
    );
}

/// ListVolumes through the csi binary on an engine full of other VMs' disks: this
/// cluster's volumes alone, paged with tokens, each page reading its own disks' attachments.
#[tokio::test]
async fn list_volumes_pages_this_cluster_s_disks_alone() {
    use overcast_integration::{create_request, csi_v1 as csi};
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-0");
    for i in 0..500 {
        let other = s.engine.add_vm(&format!("other-{i}"));
        s.engine.add_boot_disk(&other, GIB);
    }
    let conf = s.cloud_config();
    let driver = Csi::start(&[
        "--cloud=zvirt",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={vm}"),
        &format!("--zone={}", zvirt_sim::CLUSTER),
        &format!("--device-by-id-dir={}", s.by_id.display()),
    ])
    .await;
    let mut c = driver.controller().await;
    let mut made = Vec::new();
    for i in 0..3 {
        let mut req = create_request(
            &format!("pvc-0000000{i}-0000-4000-8000-000000000000"),
            GIB as i64,
        );
        req.parameters = parameters("data").into_iter().collect();
        made.push(
            c.create_volume(req)
                .await
                .unwrap()
                .into_inner()
                .volume
                .unwrap()
                .volume_id,
        );
    }
    made.sort();
    let (mut token, mut listed) = (String::new(), Vec::new());
    loop {
        let bytes = s.engine.answer_bytes();
        let page = c
            .list_volumes(csi::ListVolumesRequest {
                max_entries: 1,
                starting_token: token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            s.engine.answer_bytes() - bytes < 16 << 10,
            "a page reads this cluster's disks alone"
        );
        listed.extend(
            page.entries
                .into_iter()
                .map(|e| e.volume.unwrap().volume_id),
        );
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    assert_eq!(listed, made);
    assert_eq!(
        s.engine.calls().get("GET /vms").copied().unwrap_or(0),
        0,
        "no VM listing"
    );
    for id in &made {
        c.delete_volume(csi::DeleteVolumeRequest {
            volume_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
}

/// A cluster name the engine's search cannot hold bare (a space): ListVolumes lists every
/// disk and keeps this cluster's — never an empty answer from a search the engine refuses.
#[tokio::test]
async fn a_cluster_name_the_search_cannot_hold_lists_every_disk_and_keeps_its_own() {
    use overcast_integration::{create_request, csi_v1 as csi};
    let s = sim(Latency::default()).await;
    let vm = s.engine.add_vm("worker-0");
    let other = s.engine.add_vm("other-0");
    s.engine.add_boot_disk(&other, GIB);
    let conf = s.cloud_config();
    let driver = Csi::start(&[
        "--cloud=zvirt",
        "--cluster=two words",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={vm}"),
        &format!("--zone={}", zvirt_sim::CLUSTER),
        &format!("--device-by-id-dir={}", s.by_id.display()),
    ])
    .await;
    let mut c = driver.controller().await;
    let mut req = create_request("vol-spaced-cluster", GIB as i64);
    req.parameters = parameters("data").into_iter().collect();
    let id = c
        .create_volume(req)
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let listed: Vec<String> = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries
        .into_iter()
        .map(|e| e.volume.unwrap().volume_id)
        .collect();
    assert_eq!(
        listed,
        std::slice::from_ref(&id),
        "this cluster's volume alone"
    );
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: id,
        ..Default::default()
    })
    .await
    .unwrap();
}
