//! The Terraform layouts' master-node module, applied and destroyed by the real Terraform
//! with `terraform-provider-overcast`, for each cloud: the time of `apply` and `destroy`
//! and the cloud calls they make — next to the same resources made and removed in the
//! same run by the providers' own clients (the baseline: no Terraform, no plan, no
//! refresh).
//!
//! - zVirt, against the engine simulator (its default latencies): the VM cloned from the
//!   template, its boot disk grown, a NIC, a 10 GiB etcd disk attached, started, its
//!   address; baseline `EngineVms` (create, start: grow + NIC + start, address) and
//!   `EngineDisks` (create + attach the etcd disk), removed by `EngineVms::remove` and
//!   `delete_disk`.
//! - DVP, against the DVP simulator on the kit's API server (`OVERCAST_TEST_KUBECONFIG`;
//!   said skipped without): the VirtualMachine, its root disk from an image, its etcd
//!   disk, its VirtualMachineIPAddress and cloud-init Secret; baseline `ParentVms` (the
//!   Cluster API path: the VM, the root disk, one additional disk and the Secret — no
//!   VirtualMachineIPAddress), removed by `ParentVms::remove`.
//!
//! And the plan of the unchanged zVirt master (dhctl's converge check): its calls, beside
//! the baseline's reads of the same objects by the clients (`EngineVms::find`, the disks).
//!
//! Needs Terraform (`OVERCAST_TERRAFORM` or on the PATH) and the release provider:
//! `cargo build --release --bins && cargo bench -p overcast-integration --bench terraform`

use std::time::{Duration, Instant};

use overcast_cloud::{DiskSpec, Disks, Machines, VmPhase};
use overcast_cloud_zvirt::{EngineDisks, EngineVms, VmSpec, Waits};
use overcast_integration::figures::{median, ms};
use overcast_integration::terraform::{self, Workspace};
use overcast_integration::zvirt_sim::{self, Engine, Latency};
use serde_json::json;

const GIB: u64 = 1 << 30;
const RUNS: usize = 3;

fn row(what: &str, times: Vec<Duration>, calls: Vec<u64>) {
    let mean = calls.iter().sum::<u64>() as f64 / calls.len() as f64;
    println!("{what:<44} {:>10}   {mean:>6.1} calls", ms(median(times)));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(bin) = terraform::binary("the Terraform benchmark") else {
        return;
    };
    println!(
        "{:<44} {:>10}   {:>12}",
        "(median of 3)", "time", "cloud calls"
    );
    zvirt(&bin).await;
    dvp(&bin).await;
}

async fn zvirt(bin: &std::path::Path) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (by_id, files) = (root.join("by-id"), root.join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 1 << 45, Latency::default());
    let url = engine.start().await;
    // Its loop devices go however this ends.
    let _unplug = engine.unplug_on_drop();
    engine.add_template("ubuntu-2204", 10 * GIB);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    let domain = engine.storage_domain_id("data");
    engine.set_guest_ips_on_boot("tf-master-0", &["10.1.0.5"]);
    engine.set_guest_ips_on_boot("baseline", &["10.1.0.6"]);

    // Baseline: the providers' own clients.
    let config = overcast_cloud_zvirt::Config::load(None, &|k| match k {
        "ZVIRT_API_URL" => Some(url.clone()),
        "ZVIRT_USERNAME" => Some(zvirt_sim::USER.into()),
        "ZVIRT_PASSWORD" => Some(zvirt_sim::PASSWORD.into()),
        _ => None,
    })
    .unwrap();
    let client = overcast_cloud_zvirt::connect(&config, None).unwrap();
    let vms = EngineVms::new(client.clone());
    let disks = EngineDisks::new(client, "bench".into(), 16, Waits::default());
    let spec = VmSpec {
        cluster_id: zvirt_sim::CLUSTER_ID.into(),
        template: "ubuntu-2204".into(),
        sockets: 4,
        cores: 1,
        threads: 1,
        memory_mib: 8192,
        root_disk_gib: 40,
        nic_name: "nic1".into(),
        vnic_profile_id: profile.clone(),
        host_name: "baseline".into(),
    };
    let zone = disks.zones().await.unwrap().remove(0);
    let poll = Duration::from_millis(100);
    let (mut make, mut make_calls, mut remove, mut remove_calls) = (vec![], vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let before = engine.total_calls();
        let t = Instant::now();
        let vm = vms
            .create("baseline", &spec, b"#cloud-config\n")
            .await
            .unwrap();
        while vms.find("baseline").await.unwrap().unwrap().phase != VmPhase::Stopped {
            tokio::time::sleep(poll).await;
        }
        let data = disks
            .create_disk(DiskSpec {
                name: "baseline-kubernetes-data".into(),
                size_bytes: 10 * GIB,
                zone: zone.clone(),
                parameters: [("storageDomainName".to_owned(), "data".to_owned())].into(),
                metadata: Default::default(),
                source: None,
            })
            .await
            .unwrap();
        disks.attach_disk(&data.id, &vm.id, false).await.unwrap();
        vms.start(&vm, &spec, &[]).await.unwrap();
        while vms
            .addresses(&vm)
            .await
            .map(|a| a.is_empty())
            .unwrap_or(true)
        {
            tokio::time::sleep(poll).await;
        }
        make.push(t.elapsed());
        make_calls.push(engine.total_calls() - before);
        let before = engine.total_calls();
        let t = Instant::now();
        disks.detach_disk(&data.id, &vm.id).await.unwrap();
        vms.remove(&vm).await.unwrap();
        disks.delete_disk(&data.id).await.unwrap();
        remove.push(t.elapsed());
        remove_calls.push(engine.total_calls() - before);
        engine.finish_removals();
    }
    row("zVirt baseline: make (clients)", make, make_calls);
    // What a check of an unchanged master must read at least: the VM, its boot disk and
    // its etcd disk, once each, by the clients.
    let vm = vms
        .create("baseline", &spec, b"#cloud-config\n")
        .await
        .unwrap();
    while vms.find("baseline").await.unwrap().unwrap().phase != VmPhase::Stopped {
        tokio::time::sleep(poll).await;
    }
    let (mut read, mut read_calls) = (vec![], vec![]);
    for _ in 0..RUNS {
        let before = engine.total_calls();
        let t = Instant::now();
        vms.find("baseline").await.unwrap().unwrap();
        for d in disks.list_disks().await.unwrap() {
            std::hint::black_box(d);
        }
        read.push(t.elapsed());
        read_calls.push(engine.total_calls() - before);
    }
    vms.remove(&vm).await.unwrap();
    engine.finish_removals();
    row(
        "zVirt baseline: read the VM and disks (clients)",
        read,
        read_calls,
    );
    row("zVirt baseline: remove (clients)", remove, remove_calls);

    // The layout's master-node module.
    let layouts = terraform::copy_layouts("zvirt", root);
    let master = Workspace::module(
        bin,
        root,
        layouts.join("layouts/standard/master-node"),
        ("terraform-provider-ovirt", "ovirt"),
    );
    let vars = root.join("vars.json");
    let instance_class = json!({
        "numCPUs": 4, "memory": 8192, "rootDiskSizeGb": 40, "etcdDiskSizeGb": 10,
        "template": "ubuntu-2204", "vnicProfileID": profile, "storageDomainID": domain,
    });
    std::fs::write(
        &vars,
        json!({
            "clusterConfiguration": {"cloud": {"prefix": "tf"}},
            "providerClusterConfiguration": {
                "clusterID": zvirt_sim::CLUSTER_ID,
                "provider": {"server": url, "username": zvirt_sim::USER, "password": zvirt_sim::PASSWORD, "insecure": true},
                "masterNodeGroup": {"replicas": 1, "instanceClass": instance_class},
            },
            "nodeIndex": 0, "cloudConfig": "",
        })
        .to_string(),
    )
    .unwrap();
    let v = format!("-var-file={}", vars.display());
    tokio::task::block_in_place(|| master.init());
    let (mut apply, mut apply_calls, mut destroy, mut destroy_calls) =
        (vec![], vec![], vec![], vec![]);
    let (mut plan, mut plan_calls) = (vec![], vec![]);
    for _ in 0..RUNS {
        let before = engine.total_calls();
        let t = Instant::now();
        tokio::task::block_in_place(|| {
            master
                .run(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
                .ok()
        });
        apply.push(t.elapsed());
        apply_calls.push(engine.total_calls() - before);
        // dhctl's converge check of a master that has not changed: the refresh of every
        // resource and the data sources (the existing VM's topology and disk sizes too).
        let before = engine.total_calls();
        let t = Instant::now();
        let run = tokio::task::block_in_place(|| master.plan(&[&v]));
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        plan.push(t.elapsed());
        plan_calls.push(engine.total_calls() - before);
        let before = engine.total_calls();
        let t = Instant::now();
        tokio::task::block_in_place(|| {
            master
                .run(&["destroy", "-input=false", "-no-color", "-auto-approve", &v])
                .ok()
        });
        destroy.push(t.elapsed());
        destroy_calls.push(engine.total_calls() - before);
        engine.finish_removals();
    }
    row("zVirt master-node: terraform apply", apply, apply_calls);
    row(
        "zVirt master-node: terraform plan, unchanged",
        plan,
        plan_calls,
    );
    row(
        "zVirt master-node: terraform destroy",
        destroy,
        destroy_calls,
    );
}

async fn dvp(bin: &std::path::Path) {
    use overcast_cloud_dvp::{Parent, ParentVms};
    use overcast_integration::dvp_sim::{self, DvpSim};
    use std::sync::atomic::Ordering;
    let Ok(kubeconfig) = std::env::var("OVERCAST_TEST_KUBECONFIG") else {
        println!("SKIPPED: set OVERCAST_TEST_KUBECONFIG (the kit's kube-up.sh) to measure the DVP layout");
        return;
    };
    let client = overcast_integration::real::client(&kubeconfig).await;
    dvp_sim::install_crds(&client).await;
    let ns = format!("overcast-bench-tf-{}", std::process::id());
    let sim = DvpSim::start(client, &ns, Duration::from_millis(100)).await;
    // Cluster-scoped: a name of this run.
    let image = format!("bench-tf-{}", std::process::id());
    sim.add_image("ClusterVirtualImage", &image, 1 << 30, true)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Both go through the simulator's proxy, which counts what they ask the parent.
    let proxy = sim.api_proxy(root).await;
    let calls = || sim.faults.proxied.load(Ordering::Relaxed);

    let kc = kube::config::Kubeconfig::read_from(&proxy).unwrap();
    let config = overcast_cloud_dvp::Config {
        namespace: ns.clone(),
        kubeconfig: kc,
        cluster_uuid: None,
        unknown_keys: Vec::new(),
    };
    let parent = Parent::connect(
        &config,
        std::sync::Arc::new(overcast_cloud_http::ApiMetrics::unregistered()),
    )
    .await
    .unwrap();
    let vms = ParentVms::new(parent, "bench");
    let spec = overcast_integration::capi::dvp_vm_spec(&image, 1);
    let poll = Duration::from_millis(100);
    let (mut make, mut make_calls, mut remove, mut remove_calls) = (vec![], vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let before = calls();
        let t = Instant::now();
        let vm = vms
            .create("baseline", &spec, b"#cloud-config\n")
            .await
            .unwrap();
        vms.start(&vm, &spec, b"#cloud-config\n").await.unwrap();
        while vms
            .addresses(&vm)
            .await
            .map(|a| a.is_empty())
            .unwrap_or(true)
        {
            tokio::time::sleep(poll).await;
        }
        make.push(t.elapsed());
        make_calls.push(calls() - before);
        let before = calls();
        let t = Instant::now();
        // A removal answers "not yet" (an error to retry) while the VM goes.
        while vms.remove(&vm).await.is_err() {
            tokio::time::sleep(poll).await;
        }
        remove.push(t.elapsed());
        remove_calls.push(calls() - before);
    }
    row("DVP baseline: make (ParentVms)", make, make_calls);
    row("DVP baseline: remove (ParentVms)", remove, remove_calls);

    let layouts = terraform::copy_layouts("dvp", root);
    let master = Workspace::module(
        bin,
        root,
        layouts.join("layouts/standard/master-node"),
        ("overcast", "dvp"),
    );
    let vars = root.join("vars.json");
    use base64::Engine as _;
    let instance_class = json!({
        "virtualMachine": {"cpu": {"cores": 2, "coreFraction": "100%"}, "memory": {"size": "4Gi"}, "virtualMachineClassName": "generic"},
        "rootDisk": {"size": "1Gi", "image": {"kind": "ClusterVirtualImage", "name": image}},
        "etcdDisk": {"size": "512Mi"},
    });
    std::fs::write(
        &vars,
        json!({
            "clusterConfiguration": {"cloud": {"prefix": "tf"}},
            "providerClusterConfiguration": {
                "layout": "Standard",
                "provider": {"kubeconfigDataBase64": base64::engine::general_purpose::STANDARD.encode(std::fs::read(&proxy).unwrap()), "namespace": ns},
                "masterNodeGroup": {"replicas": 1, "instanceClass": instance_class},
            },
            "clusterUUID": "bench", "nodeIndex": 0, "cloudConfig": "",
        })
        .to_string(),
    )
    .unwrap();
    let v = format!("-var-file={}", vars.display());
    tokio::task::block_in_place(|| master.init());
    let (mut apply, mut apply_calls, mut destroy, mut destroy_calls) =
        (vec![], vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let before = calls();
        let t = Instant::now();
        tokio::task::block_in_place(|| {
            master
                .run(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
                .ok()
        });
        apply.push(t.elapsed());
        apply_calls.push(calls() - before);
        let before = calls();
        let t = Instant::now();
        tokio::task::block_in_place(|| {
            master
                .run(&["destroy", "-input=false", "-no-color", "-auto-approve", &v])
                .ok()
        });
        destroy.push(t.elapsed());
        destroy_calls.push(calls() - before);
    }
    row("DVP master-node: terraform apply", apply, apply_calls);
    row("DVP master-node: terraform destroy", destroy, destroy_calls);
}
