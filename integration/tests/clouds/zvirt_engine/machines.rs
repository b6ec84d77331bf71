//! The zVirt provider's VMs for Cluster API (`overcast_cloud_zvirt::EngineVms`) against the
//! engine simulator: a VM cloned as capz clones it (found by name, `image_locked` then
//! `down`), finished (root disk grown, the NIC on its vNIC profile) and started, its
//! guest's addresses read from `eth0`; a second create of the name refused by the engine;
//! removal detaching a CSI volume first, so the volume outlives the VM while the VM's own
//! boot disk goes with it; a removal repeated, and of a VM already gone, succeeding.

use http::Method;
use overcast_cloud::{Machines, VmPhase};
use overcast_cloud_zvirt::{EngineVms, VmSpec};
use serde_json::Value;

use super::*;

async fn get(e: &overcast_cloud_zvirt::Engine, path: &str) -> Value {
    e.json("it", Method::GET, path, None).await.unwrap()
}

async fn phase_of(vms: &EngineVms, name: &str) -> Option<VmPhase> {
    vms.find(name).await.unwrap().map(|v| v.phase)
}

async fn wait_phase(vms: &EngineVms, name: &str, want: VmPhase) {
    for _ in 0..500 {
        if phase_of(vms, name).await.as_ref() == Some(&want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{name} never {want:?}: {:?}", phase_of(vms, name).await);
}

#[tokio::test]
async fn a_machine_s_vm_is_made_started_and_removed_without_its_volumes() {
    let s = sim(Latency::default()).await;
    s.engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = s.engine.add_vnic_profile("ovirtmgmt");
    s.engine
        .set_guest_ips_on_boot("capi-worker-0", &["127.0.0.1", "10.1.0.7", "fe80::7"]);
    let config = config(&s.url, zvirt_sim::USER, zvirt_sim::PASSWORD);
    let e = overcast_cloud_zvirt::connect(&config, None).unwrap();
    let cluster = get(&e, "/clusters").await["cluster"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let vms = EngineVms::new(Arc::clone(&e));
    let spec = VmSpec {
        cluster_id: cluster,
        template: "ubuntu-2204".into(),
        sockets: 2,
        cores: 1,
        threads: 1,
        memory_mib: 4096,
        root_disk_gib: 30,
        nic_name: "nic1".into(),
        vnic_profile_id: profile.clone(),
        host_name: "capi-worker-0".into(),
    };

    assert_eq!(vms.find("capi-worker-0").await.unwrap(), None);
    let vm = vms
        .create(
            "capi-worker-0",
            &spec,
            b"#cloud-config\nruncmd: [\"echo <ok> & done\"]\n",
        )
        .await
        .unwrap();
    assert_eq!(vm.phase, VmPhase::Creating);
    // The engine refuses a second VM of the name: a controller that lost track of the
    // first finds it by name instead.
    let again = vms.create("capi-worker-0", &spec, b"").await.unwrap_err();
    assert!(matches!(again, CloudError::Conflict(_)), "{again:?}");
    assert_eq!(
        vms.find("capi-worker-0").await.unwrap().map(|v| v.id),
        Some(vm.id.clone())
    );

    // What the engine recorded of the create, as capz sends it.
    let made = s.engine.vm_by_name("capi-worker-0").unwrap();
    assert_eq!(made["type"], "high_performance");
    assert_eq!(
        made["initialization"]["custom_script"],
        "#cloud-config\nruncmd: [\"echo <ok> & done\"]\n"
    );
    assert_eq!(made["initialization"]["host_name"], "capi-worker-0");
    let number = overcast_cloud_zvirt::client::number;
    assert_eq!(made["memory_policy"]["ballooning"], "false");
    assert_eq!(number(&made["memory_policy"]["guaranteed"]), Some(4 * GIB));
    assert_eq!(number(&made["memory_policy"]["max"]), Some(4 * GIB));
    assert_eq!(number(&made["cpu"]["topology"]["sockets"]), Some(2));

    // Finished and started once the copy is done; a start while locked is refused.
    assert!(
        vms.start(&vm, &spec, &[]).await.is_err(),
        "started while image_locked"
    );
    wait_phase(&vms, "capi-worker-0", VmPhase::Stopped).await;
    let vm = vms.find("capi-worker-0").await.unwrap().unwrap();
    vms.start(&vm, &spec, &[]).await.unwrap();
    let nics = get(&e, &format!("/vms/{}/nics", vm.id)).await;
    let nics: Vec<&Value> = nics["nic"].as_array().unwrap().iter().collect();
    assert_eq!(nics.len(), 1, "{nics:?}");
    assert_eq!(nics[0]["name"], "nic1");
    assert_eq!(nics[0]["vnic_profile"]["id"], profile.as_str());
    let boot = s
        .engine
        .disks()
        .into_iter()
        .find(|(_, alias, _)| alias == "capi-worker-0_Disk1")
        .map(|(_, _, size)| size);
    assert_eq!(boot, Some(30 * GIB), "{:?}", s.engine.disks());
    wait_phase(&vms, "capi-worker-0", VmPhase::Running).await;
    let mut addresses = Vec::new();
    for _ in 0..500 {
        addresses = vms.addresses(&vm).await.unwrap();
        if !addresses.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(addresses, ["10.1.0.7".parse::<std::net::IpAddr>().unwrap()]);

    // A CSI volume attached to the VM outlives it.
    let csi = disks(&config);
    let volume = csi
        .create_disk(DiskSpec {
            name: "pvc-kept".into(),
            size_bytes: GIB,
            zone: Zone::default(),
            parameters: parameters("data"),
            metadata: BTreeMap::new(),
            source: None,
        })
        .await
        .unwrap();
    csi.attach_disk(&volume.id, &vm.id, false).await.unwrap();
    let removal = vms.remove(&vm).await.unwrap();
    assert_eq!(removal.detached, std::slice::from_ref(&volume.id));
    assert_eq!(vms.find("capi-worker-0").await.unwrap(), None);
    let kept = csi.disk(&volume.id).await.unwrap();
    assert_eq!(kept.id, volume.id);
    // The boot disk is locked while the engine removes it, then gone.
    for _ in 0..500 {
        if !s
            .engine
            .disks()
            .iter()
            .any(|(_, a, _)| a == "capi-worker-0_Disk1")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !s.engine
            .disks()
            .iter()
            .any(|(_, a, _)| a == "capi-worker-0_Disk1"),
        "the VM's boot disk outlived it: {:?}",
        s.engine.disks()
    );
    // Removing it again, or a VM that never was, is success.
    assert_eq!(vms.remove(&vm).await.unwrap().detached.len(), 0);

    // A template that does not exist is NotFound, naming it.
    let mut missing = spec.clone();
    missing.template = "no-such-template".into();
    let err = vms
        .create("capi-worker-1", &missing, b"")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CloudError::NotFound { kind: "template", id } if id == "no-such-template"),
        "{err:?}"
    );
}
