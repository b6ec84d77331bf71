//! Machines Deckhouse's own Cluster API providers left, taken over by the real `capi`:
//! the objects are written here as capz and capdvp write them on a running machine
//! (their finalizers, spec.id/providerID, addresses, conditions, readiness flags of
//! either contract, labels; the VM as they named, labelled and built it, already
//! running on the simulator), then `capi` starts. Nothing is made, changed or restarted
//! on the cloud — the engine gets no write, the parent no call at all — the Node stays,
//! and only the readiness flag the object lacks is written. Deleted later, each goes as
//! capz/capdvp would take it (VM stopped and removed with its own disks, a CSI volume
//! detached and kept; the parent's VM, boot disk and cloud-init Secret), and no finalizer
//! of theirs is left: the machines' and capdvp's on the DeckhouseCluster. Needs
//! `OVERCAST_TEST_KUBECONFIG`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use overcast_capi::crd::dvp::{DeckhouseCluster, DeckhouseMachine};
use overcast_capi::crd::zvirt::ZvirtMachine;
use overcast_cloud::{DiskSpec, Disks, Zone};
use overcast_cloud_zvirt::{Config, EngineDisks, Waits};
use overcast_integration::capi::{self, CLOUD_INIT};
use overcast_integration::dvp_sim::DvpSim;
use overcast_integration::real::{self, wait_for};
use overcast_integration::zvirt_sim::{self, Engine, Latency};
use serde_json::{json, Value};

const GIB: u64 = 1 << 30;

fn ns(cloud: &str) -> String {
    format!("overcast-it-adopt-{cloud}-{}", std::process::id())
}

async fn namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await;
}

fn dynamic(client: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap();
    Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(group, version, kind),
            &format!("{}s", kind.to_ascii_lowercase()),
        ),
    )
}

/// Creates `obj` and, when it has one, writes its status (the status subresource takes
/// nothing at create).
async fn put(api: &Api<DynamicObject>, obj: Value) -> DynamicObject {
    let status = obj.get("status").cloned();
    let made = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
    match status {
        Some(s) => api
            .patch_status(
                &made.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": s })),
            )
            .await
            .unwrap_or_else(|e| panic!("status: {e}")),
        None => made,
    }
}

fn owner(kind: &str, obj: &DynamicObject) -> Value {
    json!([{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": obj.name_any(),
        "uid": obj.uid().unwrap(), "controller": true, "blockOwnerDeletion": true,
    }])
}

/// The Cluster `cluster` (its infrastructure provisioned) and a Machine of it with its
/// Node joined, as CAPI's core controllers leave them on a running cluster.
async fn core_objects(
    client: &Client,
    ns: &str,
    infra: (&str, &str, &str),
    cluster: &str,
) -> DynamicObject {
    let (api_version, cluster_kind, _) = infra;
    let clusters = dynamic(client, ns, "cluster.x-k8s.io/v1beta2", "Cluster");
    put(
        &clusters,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": cluster},
            "spec": {"infrastructureRef": {"apiGroup": api_version.split('/').next(), "kind": cluster_kind, "name": cluster}},
            "status": {"initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true}, "phase": "Provisioned"},
        }),
    )
    .await
}

async fn machine_of(
    client: &Client,
    ns: &str,
    infra: (&str, &str, &str),
    cluster: &str,
    name: &str,
    provider_id: &str,
) -> DynamicObject {
    let (api_version, _, machine_kind) = infra;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-bootstrap")},
                "type": "cluster.x-k8s.io/secret",
                "stringData": {"value": CLOUD_INIT, "format": "cloud-config"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    put(
        &dynamic(client, ns, "cluster.x-k8s.io/v1beta2", "Machine"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "spec": {
                "clusterName": cluster,
                "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                "infrastructureRef": {"apiGroup": api_version.split('/').next(), "kind": machine_kind, "name": name},
                "providerID": provider_id,
            },
            "status": {
                "nodeRef": {"name": name},
                "initialization": {"infrastructureProvisioned": true, "bootstrapDataSecretCreated": true},
                "phase": "Running",
            },
        }),
    )
    .await
}

/// The Node kubelet registered and the ccm gave the providerID.
async fn node(client: &Client, name: &str, provider_id: &str) -> Node {
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(name, &DeleteParams::default()).await;
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"providerID": provider_id},
            }))
            .unwrap(),
        )
        .await
        .unwrap()
}

fn addresses(name: &str, ip: &str) -> Value {
    json!([
        {"type": "Hostname", "address": name}, {"type": "InternalDNS", "address": name},
        {"type": "InternalIP", "address": ip}, {"type": "ExternalIP", "address": ip},
    ])
}

async fn gone<K>(api: &Api<K>, name: &str, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(what, Duration::from_secs(90), async || {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await
}

const ZVIRT: (&str, &str, &str) = (
    "infrastructure.cluster.x-k8s.io/v1",
    "ZvirtCluster",
    "ZvirtMachine",
);
const DVP: (&str, &str, &str) = (
    "infrastructure.cluster.x-k8s.io/v1alpha1",
    "DeckhouseCluster",
    "DeckhouseMachine",
);

/// The VM `name` as capz builds it through the engine's API: cloned from the template
/// into the cluster, high-performance, the CPU topology and memory of the machine, its
/// cloud-init; once down, one NIC `nic1` on the profile, then started and up, its guest
/// reporting its address. Returns its id.
async fn capz_vm(
    e: &overcast_cloud_zvirt::Engine,
    cluster: &str,
    template: &str,
    profile: &str,
    name: &str,
) -> String {
    let memory = (8192u64 << 20).to_string();
    let made = e
        .json(
            "it",
            Method::POST,
            "/vms?clone=true",
            Some(&json!({
                "name": name, "cluster": {"id": cluster}, "template": {"id": template},
                "type": "high_performance",
                "cpu": {"topology": {"sockets": "1", "cores": "4", "threads": "1"}},
                "memory": memory,
                "memory_policy": {"guaranteed": memory, "max": memory, "ballooning": "false"},
                "initialization": {"custom_script": CLOUD_INIT, "host_name": name},
            })),
        )
        .await
        .expect("clone");
    let id = made["id"].as_str().unwrap().to_owned();
    let status = async |want: &str| {
        wait_for(
            &format!("{name} {want}"),
            Duration::from_secs(60),
            async || {
                let vm = e
                    .json("it", Method::GET, &format!("/vms/{id}"), None)
                    .await
                    .ok()?;
                (vm["status"] == want).then_some(())
            },
        )
        .await
    };
    status("down").await;
    e.json(
        "it",
        Method::POST,
        &format!("/vms/{id}/nics"),
        Some(&json!({"name": "nic1", "vnic_profile": {"id": profile}})),
    )
    .await
    .expect("nic");
    e.json(
        "it",
        Method::POST,
        &format!("/vms/{id}/start"),
        Some(&json!({})),
    )
    .await
    .expect("start");
    status("up").await;
    // capz then waits for the guest's address on eth0.
    wait_for(
        &format!("{name}'s guest address"),
        Duration::from_secs(60),
        async || {
            let doc = e
                .json(
                    "it",
                    Method::GET,
                    &format!("/vms/{id}/reporteddevices"),
                    None,
                )
                .await
                .ok()?;
            (!doc["reported_device"].as_array()?.is_empty()).then_some(())
        },
    )
    .await;
    id
}

/// The engine's write calls (anything but a GET) in `after` that `before` had not.
fn writes(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> Vec<String> {
    after
        .iter()
        .filter(|(k, n)| !k.starts_with("GET") && before.get(*k) != Some(n))
        .map(|(k, n)| format!("{k} ×{}", n - before.get(k).copied().unwrap_or(0)))
        .collect()
}

#[tokio::test]
async fn capz_s_running_machines_are_adopted_as_they_are_then_removed_as_capz_would() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(kubeconfig) = real::kubeconfig("adopting capz's machines") else {
        return;
    };
    let client = real::client(&kubeconfig).await;
    let mut crds = capi::core_crds();
    crds.extend(capi::provider_crds("zvirt"));
    capi::install(&client, &crds).await;
    let ns = ns("zvirt");
    namespace(&client, &ns).await;

    let dir = tempfile::tempdir().unwrap();
    let (by_id, files) = (dir.path().join("by-id"), dir.path().join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 200 * GIB, Latency::default());
    let url = engine.start().await;
    // Its loop devices go however the test ends.
    let _unplug = engine.unplug_on_drop();
    let template = engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    engine.set_guest_ips_on_boot("capz-w-0", &["127.0.0.1", "10.3.0.7"]);
    engine.set_guest_ips_on_boot("capz-w-1", &["10.3.0.8"]);
    let cloud_config = dir.path().join("cloud-config");
    std::fs::write(
        &cloud_config,
        format!(
            "server: {url}\nusername: {}\npassword: {}\n",
            zvirt_sim::USER,
            zvirt_sim::PASSWORD
        ),
    )
    .unwrap();
    let config = Config::load(Some(&cloud_config), &|_| None).unwrap();
    let e = overcast_cloud_zvirt::connect(&config, None).unwrap();
    let engine_cluster = e.json("it", Method::GET, "/clusters", None).await.unwrap()["cluster"][0]
        ["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // What capz and CAPI left: the cluster, and two machines — one written by capz's
    // v1beta1-era controller (`ready`, v1beta1 conditions with the `Ready` summary), one
    // by its v1beta2 types (`initialization.provisioned`, metav1 conditions, no `ready`).
    let cluster = core_objects(&client, &ns, ZVIRT, "zvirt").await;
    put(
        &dynamic(&client, &ns, ZVIRT.0, "ZvirtCluster"),
        json!({
            "apiVersion": ZVIRT.0, "kind": "ZvirtCluster",
            "metadata": {"name": "zvirt", "labels": {"app": "capz-controller-manager"}, "ownerReferences": owner("Cluster", &cluster)},
            "spec": {"id": engine_cluster, "controlPlaneEndpoint": {"host": "10.222.0.1", "port": 443}},
            "status": {"ready": true},
        }),
    )
    .await;
    let zms_dyn = dynamic(&client, &ns, ZVIRT.0, "ZvirtMachine");
    let mut vms = Vec::new();
    for (name, ip, v1beta2) in [
        ("capz-w-0", "10.3.0.7", false),
        ("capz-w-1", "10.3.0.8", true),
    ] {
        let id = capz_vm(&e, &engine_cluster, &template, &profile, name).await;
        let provider_id = format!("zvirt://{id}");
        let machine = machine_of(&client, &ns, ZVIRT, "zvirt", name, &provider_id).await;
        node(&client, name, &provider_id).await;
        let t = "2026-11-01T10:00:00Z";
        let status = if v1beta2 {
            json!({
                "initialization": {"provisioned": true},
                "addresses": addresses(name, ip),
                "conditions": [{"type": "VirtualMachineReady", "status": "True", "reason": "VMRunning", "message": "", "lastTransitionTime": t, "observedGeneration": 1}],
            })
        } else {
            json!({
                "ready": true,
                "addresses": addresses(name, ip),
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": t},
                    {"type": "VirtualMachineReady", "status": "True", "lastTransitionTime": t},
                ],
            })
        };
        put(
            &zms_dyn,
            json!({
                "apiVersion": ZVIRT.0, "kind": "ZvirtMachine",
                "metadata": {"name": name, "finalizers": ["zvirtmachine.infrastructure.cluster.x-k8s.io"], "ownerReferences": owner("Machine", &machine)},
                "spec": {
                    "id": id, "providerID": provider_id, "template": "ubuntu-2204",
                    "vnicProfileID": profile, "cpu": {"sockets": 1, "cores": 4, "threads": 1},
                    "memory": 8192, "rootDiskSizeGb": 30, "nicName": "nic1",
                },
                "status": status,
            }),
        )
        .await;
        vms.push((name, id));
    }
    let before = engine.calls();
    let vm_before: Vec<Value> = vms
        .iter()
        .map(|(n, _)| engine.vm_by_name(n).unwrap())
        .collect();

    let capi = capi::spawn_zvirt(&kubeconfig, &cloud_config, &ns);
    let zms: Api<ZvirtMachine> = Api::namespaced(client.clone(), &ns);
    // The flag each lacks, written; nothing else.
    for (name, _) in &vms {
        wait_for(
            &format!("{name} provisioned in both contracts' words"),
            Duration::from_secs(60),
            async || {
                let s = zms.get(name).await.ok()?.status?;
                (s.ready && s.initialization?.provisioned == Some(true)).then_some(())
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = engine.calls();
    assert!(
        writes(&before, &after).is_empty(),
        "adoption wrote to the engine: {:?}",
        writes(&before, &after)
    );
    for (vm, (name, id)) in vm_before.iter().zip(&vms) {
        let now = engine.vm_by_name(name).unwrap();
        assert_eq!(&now, vm, "{name}'s VM changed");
        assert_eq!(now["status"], "up");
        let zm = zms.get(name).await.unwrap();
        assert_eq!(zm.spec.id, *id);
        assert_eq!(
            zm.spec.provider_id.as_deref(),
            Some(format!("zvirt://{id}").as_str())
        );
        assert_eq!(
            zm.finalizers(),
            ["zvirtmachine.infrastructure.cluster.x-k8s.io"]
        );
        let s = zm.status.unwrap();
        assert!(s.failure_reason.is_none());
        assert_eq!(s.addresses.len(), 4);
        assert!(
            Api::<Node>::all(client.clone())
                .get_opt(name)
                .await
                .unwrap()
                .is_some(),
            "{name}'s Node went"
        );
    }
    assert_eq!(engine.vm_count(), 2, "a VM was made");

    // Deleted as capz deletes: stopped, a CSI volume detached and kept, the VM removed,
    // the finalizer gone.
    let csi = EngineDisks::new(
        Arc::clone(&e),
        "overcast-it".into(),
        16,
        Waits {
            unlocked: Duration::from_secs(30),
            active: Duration::from_secs(30),
            gone: Duration::from_secs(30),
        },
    );
    let volume = csi
        .create_disk(DiskSpec {
            name: "pvc-of-capz-w-0".into(),
            size_bytes: GIB,
            zone: Zone::default(),
            parameters: [("storageDomainName".to_owned(), "data".to_owned())].into(),
            metadata: Default::default(),
            source: None,
        })
        .await
        .unwrap();
    csi.attach_disk(&volume.id, &vms[0].1, false).await.unwrap();
    for (name, id) in &vms {
        zms.delete(name, &DeleteParams::default()).await.unwrap();
        gone(&zms, name, &format!("{name} gone")).await;
        assert!(
            e.json("it", Method::GET, &format!("/vms/{id}"), None)
                .await
                .is_err(),
            "{name}'s VM outlived its machine"
        );
    }
    let kept = csi.disk(&volume.id).await.expect("the CSI volume was kept");
    assert!(kept.attachments.is_empty(), "{kept:?}");
    drop(capi);
    for (name, _) in &vms {
        let _ = Api::<Node>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await;
    }
}

const CLUSTER_UUID: &str = "5b3c1e2a-adopt-it";

#[tokio::test]
async fn capdvp_s_running_machines_are_adopted_as_they_are_then_removed_as_capdvp_would() {
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(kubeconfig) = real::kubeconfig("adopting capdvp's machines") else {
        return;
    };
    let client = real::client(&kubeconfig).await;
    let mut crds = capi::core_crds();
    crds.extend(capi::provider_crds("dvp"));
    capi::install(&client, &crds).await;
    overcast_integration::dvp_sim::install_crds(&client).await;
    let ns = ns("dvp");
    namespace(&client, &ns).await;
    let parent_ns = format!("{ns}-parent");
    let sim = DvpSim::start(client.clone(), &parent_ns, Duration::from_millis(100)).await;
    let image = format!("overcast-it-adopt-{}", std::process::id());
    sim.add_image("ClusterVirtualImage", &image, GIB / 2, true)
        .await;

    // The parent's VM as capdvp makes it: labelled, then its cloud-init Secret and boot
    // disk owned by it; the simulator runs it once they are there.
    let name = "capdvp-w-0";
    let labels = json!({
        "deckhouse.io/managed-by": "deckhouse",
        "dvp.deckhouse.io/cluster-uuid": CLUSTER_UUID,
        "dvp.deckhouse.io/hostname": name,
    });
    let parent_vms = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &parent_ns,
        &overcast_cloud_dvp::api::virtual_machine(),
    );
    let vm = parent_vms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "runPolicy": "AlwaysOnUnlessStoppedManually", "liveMigrationPolicy": "PreferSafe",
                    "osType": "Generic", "bootloader": "EFI", "virtualMachineClassName": "generic",
                    "enableParavirtualization": true,
                    "provisioning": {"type": "UserDataRef", "userDataRef": {"kind": "Secret", "name": format!("cloud-init-{name}")}},
                    "cpu": {"cores": 2, "coreFraction": "100%"}, "memory": {"size": "4Gi"},
                    "blockDeviceRefs": [{"kind": "VirtualDisk", "name": format!("{name}-boot")}],
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let vm_owner = json!([{
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
        "name": name, "uid": vm.uid().unwrap(),
    }]);
    Api::<Secret>::namespaced(client.clone(), &parent_ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("cloud-init-{name}"), "ownerReferences": vm_owner,
                             "labels": {"dvp.deckhouse.io/cluster-uuid": CLUSTER_UUID, "dvp.deckhouse.io/hostname": name}},
                "type": "provisioning.virtualization.deckhouse.io/cloud-init",
                "stringData": {"userData": CLOUD_INIT},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let parent_disks = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &parent_ns,
        &overcast_cloud_dvp::api::virtual_disk(),
    );
    parent_disks
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
                "metadata": {"name": format!("{name}-boot"), "ownerReferences": vm_owner, "labels": {
                    "deckhouse.io/managed-by": "deckhouse", "virtualDiskName": format!("{name}-boot"),
                    "dvp.deckhouse.io/cluster-uuid": CLUSTER_UUID, "dvp.deckhouse.io/hostname": name,
                }},
                "spec": {
                    "persistentVolumeClaim": {"size": "1Gi"},
                    "dataSource": {"type": "ObjectRef", "objectRef": {"kind": "ClusterVirtualImage", "name": image}},
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let ip = wait_for("capdvp's VM running", Duration::from_secs(60), async || {
        let vm = parent_vms.get(name).await.ok()?;
        let s = &vm.data["status"];
        (s["phase"] == "Running")
            .then(|| s["ipAddress"].as_str().map(str::to_owned))
            .flatten()
    })
    .await;

    // What capdvp and CAPI left: the cluster with capdvp's finalizer, the machine as its
    // newest controller writes it (`initialization.provisioned`, no `ready`).
    let cluster = core_objects(&client, &ns, DVP, "dvp").await;
    put(
        &dynamic(&client, &ns, DVP.0, "DeckhouseCluster"),
        json!({
            "apiVersion": DVP.0, "kind": "DeckhouseCluster",
            "metadata": {"name": "dvp", "labels": {"app": "capdvp-controller-manager"},
                         "finalizers": [overcast_capi::crd::dvp::CAPDVP_CLUSTER_FINALIZER],
                         "ownerReferences": owner("Cluster", &cluster)},
            "spec": {"controlPlaneEndpoint": {"host": "10.222.0.1", "port": 443}},
            "status": {"initialization": {"provisioned": true}},
        }),
    )
    .await;
    let provider_id = format!("dvp://{name}");
    let machine = machine_of(&client, &ns, DVP, "dvp", name, &provider_id).await;
    node(&client, name, &provider_id).await;
    put(
        &dynamic(&client, &ns, DVP.0, "DeckhouseMachine"),
        json!({
            "apiVersion": DVP.0, "kind": "DeckhouseMachine",
            "metadata": {"name": name, "finalizers": ["deckhousemachine.infrastructure.cluster.x-k8s.io"], "ownerReferences": owner("Machine", &machine)},
            "spec": {
                "providerID": provider_id, "vmClassName": "generic",
                "cpu": {"cores": 2, "cpuFraction": "100%"}, "memory": "4Gi",
                "rootDiskSize": "1Gi", "rootDiskStorageClass": "",
                "bootDiskImageRef": {"kind": "ClusterVirtualImage", "name": image}, "bootloader": "EFI",
            },
            "status": {
                "addresses": addresses(name, &ip),
                "initialization": {"provisioned": true},
                "conditions": [{"type": "VirtualMachineReady", "status": "True", "reason": "VMRunning", "message": "VM is running and ready", "lastTransitionTime": "2026-11-01T10:00:00Z", "observedGeneration": 1}],
            },
        }),
    )
    .await;
    let vm_version = parent_vms.get(name).await.unwrap().resource_version();
    let disk_version = parent_disks
        .get(&format!("{name}-boot"))
        .await
        .unwrap()
        .resource_version();

    let dir = tempfile::tempdir().unwrap();
    let proxied = sim.api_proxy(dir.path()).await;
    let indented: String = std::fs::read_to_string(&proxied)
        .unwrap()
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect();
    let conf = dir.path().join("cloud-config");
    std::fs::write(
        &conf,
        format!("namespace: {parent_ns}\nkubeconfig: |\n{indented}"),
    )
    .unwrap();
    let (capi, metrics) = capi::spawn_dvp(&kubeconfig, &conf, &ns, CLUSTER_UUID);
    let dms: Api<DeckhouseMachine> = Api::namespaced(client.clone(), &ns);
    let adopted = wait_for(
        "the machine's `ready` written",
        Duration::from_secs(60),
        async || {
            dms.get(name)
                .await
                .ok()
                .filter(|d| d.status.as_ref().is_some_and(|s| s.ready))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        capi::parent_calls(metrics).await,
        0,
        "adoption called the parent"
    );
    assert_eq!(
        parent_vms.get(name).await.unwrap().resource_version(),
        vm_version,
        "the VM changed"
    );
    assert_eq!(
        parent_disks
            .get(&format!("{name}-boot"))
            .await
            .unwrap()
            .resource_version(),
        disk_version,
        "the boot disk changed"
    );
    assert_eq!(
        adopted.finalizers(),
        ["deckhousemachine.infrastructure.cluster.x-k8s.io"]
    );
    let s = adopted.status.unwrap();
    assert_eq!(s.addresses.len(), 4);
    let c = s
        .conditions
        .iter()
        .find(|c| c.type_ == "VirtualMachineReady")
        .unwrap();
    assert_eq!(
        (c.reason.as_str(), c.last_transition_time.as_str()),
        ("VMRunning", "2026-11-01T10:00:00Z")
    );
    assert!(Api::<Node>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
        .is_some());

    // Deleted as capdvp deletes: the VM, its boot disk and Secret, then the finalizer.
    dms.delete(name, &DeleteParams::default()).await.unwrap();
    gone(&dms, name, "the machine gone").await;
    gone(&parent_vms, name, "the VM gone").await;
    gone(&parent_disks, &format!("{name}-boot"), "the boot disk gone").await;
    gone(
        &Api::<Secret>::namespaced(client.clone(), &parent_ns),
        &format!("cloud-init-{name}"),
        "the cloud-init Secret gone",
    )
    .await;
    // The cluster deleted (CAPI does once its machines are gone): capdvp's finalizer
    // does not hold it.
    let dcs: Api<DeckhouseCluster> = Api::namespaced(client.clone(), &ns);
    dcs.delete("dvp", &DeleteParams::default()).await.unwrap();
    gone(&dcs, "dvp", "the DeckhouseCluster gone").await;
    drop(capi);
    let _ = Api::<Node>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<DynamicObject>::all_with(
        client.clone(),
        &overcast_cloud_dvp::api::cluster_virtual_image(),
    )
    .delete(&image, &DeleteParams::default())
    .await;
    drop(sim);
}
