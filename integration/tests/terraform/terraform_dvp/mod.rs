//! `deploy/terraform/dvp/layouts/standard` run as dhctl runs it, with the real Terraform
//! and `terraform-provider-overcast` installed as the `dvp` provider, against the DVP
//! simulator on the kit's API server: the master-node module's `init -plugin-dir`,
//! `plan -detailed-exitcode` (2), `apply` of the plan, `output -json` (the address its
//! VirtualMachineIPAddress got, the etcd disk's path), a second plan with no change, the
//! VM deleted out of band planned and made again, `destroy` leaving nothing in the parent
//! namespace; a static node; wrong credentials; the parent's API down during an apply;
//! `terraform import` of an existing disk. Every object is named as Deckhouse's layouts
//! name it ([`deckhouse`]); [`takeover`] switches what those layouts made. Needs
//! `OVERCAST_TEST_KUBECONFIG` and Terraform; says it was skipped without them.

use std::time::Duration;

use base64::Engine as _;
use kube::api::{Api, DynamicObject, ListParams};
use kube::ResourceExt;
use overcast_cloud_dvp::api;
use overcast_integration::dvp_sim::{self, DvpSim};
use overcast_integration::real;
use overcast_integration::terraform::{self, expect, tf, Workspace};
use serde_json::json;

mod deckhouse;
mod made;
mod takeover;
mod upgrade;

const PROVIDER: (&str, &str) = ("overcast", "dvp");

/// The shape of dhctl's variables.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Inputs {
    /// A DVPClusterConfiguration (`providerClusterConfiguration`), as up to 1.76.
    ClusterConfiguration,
    /// Deckhouse 1.77's for a cluster moved to ModuleConfig version 2.
    ModuleConfig,
}

/// What the test's instance class and cluster configuration carry beyond the basics.
#[derive(Clone, Debug, Default)]
struct Extras {
    /// The node's static address (`ipAddresses[index]`); `None`: `Auto`.
    address: Option<String>,
    /// Additional disks of the class (1Gi each, the parent's default storage class).
    additional_disks: u32,
    /// The class's `virtualMachine.additionalLabels`, `additionalAnnotations` (null: none).
    labels: serde_json::Value,
    annotations: serde_json::Value,
    /// The cluster's `additionalVMLabels` (null: none).
    cluster_labels: serde_json::Value,
    /// The class's `virtualMachine.runPolicy` (none: left out).
    run_policy: Option<&'static str>,
}

struct World {
    sim: DvpSim,
    kubeconfig_b64: String,
    /// The kit's API server (for a kubeconfig with wrong credentials).
    server: String,
    image: String,
    dir: tempfile::TempDir,
}

impl World {
    async fn new(what: &str, test: &str) -> Option<(Self, std::path::PathBuf)> {
        let bin = terraform::binary(what)?;
        let path = real::kubeconfig(what)?;
        let client = real::client(&path).await;
        let server = kube::config::Kubeconfig::read_from(&path)
            .ok()
            .and_then(|k| k.clusters.first()?.cluster.as_ref()?.server.clone())
            .expect("the kit's server");
        dvp_sim::install_crds(&client).await;
        dvp_sim::sweep(&client, &format!("overcast-it-tf-{test}-")).await;
        let ns = format!("overcast-it-tf-{test}-{}", std::process::id());
        let sim = DvpSim::start(client, &ns, Duration::from_millis(100)).await;
        // Cluster-scoped: a name of this test and run.
        let image = format!("tf-{test}-{}", std::process::id());
        sim.add_image("ClusterVirtualImage", &image, 1 << 30, true)
            .await;
        let dir = tempfile::tempdir().unwrap();
        // Through the simulator's proxy, where a test can take the parent's API down.
        let kubeconfig = sim.api_proxy(dir.path()).await;
        let kubeconfig_b64 =
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(kubeconfig).unwrap());
        Some((
            Self {
                sim,
                kubeconfig_b64,
                server,
                image,
                dir,
            },
            bin,
        ))
    }

    /// dhctl's `-var-file` for node `index` of `group` ("master" for a master).
    fn vars(&self, index: u32, group: &str, kubeconfig_b64: &str) -> String {
        self.vars_as(index, group, kubeconfig_b64, Inputs::ClusterConfiguration)
    }

    /// The same, in the shape `inputs` says.
    fn vars_as(&self, index: u32, group: &str, kubeconfig_b64: &str, inputs: Inputs) -> String {
        self.vars_with(index, group, kubeconfig_b64, inputs, &Extras::default())
    }

    /// The same with `extras` in the class and the cluster's configuration.
    fn vars_with(
        &self,
        index: u32,
        group: &str,
        kubeconfig_b64: &str,
        inputs: Inputs,
        extras: &Extras,
    ) -> String {
        let addresses = match &extras.address {
            // The node's own at its index (the test's nodes are one per group).
            Some(a) => json!((0..=index)
                .map(|i| if i == index { a.clone() } else { "Auto".into() })
                .collect::<Vec<String>>()),
            None => json!(["Auto"]),
        };
        let mut instance_class = json!({
            "virtualMachine": {
                "cpu": {"cores": 2, "coreFraction": "50%"}, "memory": {"size": "4Gi"},
                "virtualMachineClassName": "generic", "ipAddresses": addresses,
            },
            "rootDisk": {"size": "10Gi", "image": {"kind": "ClusterVirtualImage", "name": self.image}},
            "etcdDisk": {"size": "2Gi"},
        });
        if !extras.labels.is_null() {
            instance_class["virtualMachine"]["additionalLabels"] = extras.labels.clone();
        }
        if !extras.annotations.is_null() {
            instance_class["virtualMachine"]["additionalAnnotations"] = extras.annotations.clone();
        }
        if let Some(p) = extras.run_policy {
            instance_class["virtualMachine"]["runPolicy"] = json!(p);
        }
        if extras.additional_disks > 0 {
            instance_class["additionalDisks"] = json!((0..extras.additional_disks)
                .map(|_| json!({"size": "1Gi"}))
                .collect::<Vec<_>>());
        }
        let mut body = json!({
            "clusterConfiguration": {
                "apiVersion": "deckhouse.io/v1", "kind": "ClusterConfiguration",
                "clusterType": "Cloud", "cloud": {"provider": "DVP", "prefix": "tf"},
            },
            "providerClusterConfiguration": {
                "apiVersion": "deckhouse.io/v1", "kind": "DVPClusterConfiguration",
                "layout": "Standard", "sshPublicKey": "ssh-ed25519 AAAA test",
                "provider": {"kubeconfigDataBase64": kubeconfig_b64, "namespace": self.sim.namespace},
                "masterNodeGroup": {"replicas": 1, "instanceClass": instance_class},
                "nodeGroups": [{"name": "worker", "replicas": 1, "instanceClass": instance_class}],
            },
            "clusterUUID": "5c4e1a7e-1111-4222-8333-944444444444",
            "nodeIndex": index,
            "nodeGroupName": group,
            "cloudConfig": base64::engine::general_purpose::STANDARD.encode("runcmd:\n- echo bootstrap\n"),
        });
        if !extras.cluster_labels.is_null() {
            // Where Deckhouse's layouts read them (`lookup(var.providerClusterConfiguration,
            // "additionalVMLabels", {})`, @b2e479d3 and @0907b049).
            body["providerClusterConfiguration"]["additionalVMLabels"] =
                extras.cluster_labels.clone();
        }
        if inputs == Inputs::ModuleConfig {
            // What dhctl passes from 1.77 for a cluster moved to ModuleConfig version 2
            // (`modules/030-cloud-provider-dvp/candi/terraform-modules/migration/
            // locals.tf` @1cd21b95 reads these): the module's settings, the NodeGroups
            // and DVPInstanceClasses by name, the credential Secret; no configuration.
            let pcc = body["providerClusterConfiguration"].take();
            let mut class = instance_class.clone();
            class["virtualMachine"]
                .as_object_mut()
                .unwrap()
                .remove("ipAddresses");
            let group_of = |name: &str| {
                json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": name},
                    "spec": {"nodeType": "CloudPermanent", "cloudInstances": {"minPerZone": 1, "maxPerZone": 1,
                        "classReference": {"kind": "DVPInstanceClass", "name": format!("{name}-class")}}}})
            };
            let class_of = |name: &str| {
                json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "DVPInstanceClass",
                    "metadata": {"name": format!("{name}-class")}, "spec": class})
            };
            body["providerClusterConfiguration"] = serde_json::Value::Null;
            body["settings"] = json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "ModuleConfig",
                "metadata": {"name": "cloud-provider-dvp"},
                "spec": {"enabled": true, "version": 2, "settings": {
                    "provider": {"parameters": {"namespace": pcc["provider"]["namespace"]}},
                    "nodes": {"parameters": {"sshPublicKey": pcc["sshPublicKey"],
                        "ipAddresses": {"master": ["Auto"], "worker": ["Auto"]}}}}}});
            body["settings"]["spec"]["settings"]["nodes"]["parameters"]["ipAddresses"][group] =
                addresses;
            if !extras.cluster_labels.is_null() {
                // Where the module's validator reads them.
                body["settings"]["spec"]["settings"]["nodes"]["parameters"]["additionalVMLabels"] =
                    extras.cluster_labels.clone();
            }
            body["nodeGroups"] =
                json!({"master": group_of("master"), "worker": group_of("worker")});
            body["instanceClasses"] =
                json!({"master-class": class_of("master"), "worker-class": class_of("worker")});
            body["secrets"] = json!({"d8-credentials": {"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "d8-credentials", "namespace": pcc["provider"]["namespace"]},
                "type": "cloud-provider.deckhouse.io/credentials",
                "stringData": {"authScheme": "kubeconfig", "secret": kubeconfig_b64}}});
        }
        let text = body.to_string();
        let f = self.dir.path().join(format!(
            "vars-{group}-{index}-{inputs:?}-{:x}.json",
            md5::compute(&text)
        ));
        std::fs::write(&f, text).unwrap();
        format!("-var-file={}", f.display())
    }

    /// Node `index` of `group` as [`World::vars`] describes it, for Deckhouse's names.
    fn node(&self, group: &'static str, index: u32) -> deckhouse::Node<'_> {
        deckhouse::Node {
            prefix: "tf",
            group,
            index,
            image: ("ClusterVirtualImage", &self.image),
            root_storage_class: None,
            etcd: (group == "master").then_some(None),
            cores: 2,
            core_fraction: "50%",
            memory: "4Gi",
            ssh_key: "ssh-ed25519 AAAA test",
            since_1_77: false,
            address: "Auto",
            additional_disks: 0,
        }
    }

    /// The address the VirtualMachineIPAddress `name` leased.
    async fn leased(&self, name: &str) -> String {
        let vmip = self
            .api(&api::virtual_machine_ip_address())
            .get(name)
            .await
            .unwrap();
        assert_eq!(vmip.data["status"]["phase"], "Attached", "{vmip:?}");
        vmip.data["status"]["address"].as_str().unwrap().to_owned()
    }

    fn api(&self, ar: &kube::discovery::ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.sim.client.clone(), &self.sim.namespace, ar)
    }

    /// The names of what is in the parent namespace: VMs, disks, addresses, Secrets.
    async fn objects(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (kind, ar) in [
            ("vm", api::virtual_machine()),
            ("vd", api::virtual_disk()),
            ("vmip", api::virtual_machine_ip_address()),
        ] {
            for o in self
                .api(&ar)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
            {
                out.push(format!("{kind}/{}", o.name_any()));
            }
        }
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.sim.client.clone(), &self.sim.namespace);
        for s in secrets.list(&ListParams::default()).await.unwrap().items {
            if s.type_.as_deref() == Some("provisioning.virtualization.deckhouse.io/cloud-init") {
                out.push(format!("secret/{}", s.name_any()));
            }
        }
        out.sort();
        out
    }

    /// Every VM's, disk's and address's name with its resourceVersion: a write to any shows.
    async fn resource_versions(&self) -> Vec<String> {
        let mut out = Vec::new();
        for ar in [
            api::virtual_machine(),
            api::virtual_disk(),
            api::virtual_machine_ip_address(),
        ] {
            for o in self
                .api(&ar)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
            {
                out.push(format!(
                    "{}={}",
                    o.name_any(),
                    o.resource_version().unwrap()
                ));
            }
        }
        out.sort();
        out
    }

    fn layout(&self, module: &str) -> std::path::PathBuf {
        let root = self.dir.path();
        if !root.join("dvp").exists() {
            terraform::copy_layouts("dvp", root);
        }
        root.join("dvp/layouts/standard").join(module)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_layout_makes_a_master_and_a_node_as_dhctl_runs_it() {
    let Some((w, bin)) = World::new("the DVP Terraform layout test", "layout").await else {
        return;
    };
    let root = w.dir.path().to_owned();
    let v = w.vars(0, "master", &w.kubeconfig_b64);

    let base = Workspace::module(&bin, &root, w.layout("base-infrastructure"), PROVIDER);
    tf(|| base.init());
    tf(|| {
        base.run(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    let out = tf(|| base.outputs());
    assert_eq!(
        out["cloud_discovery_data"]["value"]["kind"],
        "DVPCloudDiscoveryData"
    );
    assert_eq!(
        out["cloud_discovery_data"]["value"]["zones"],
        json!(["default"])
    );

    let master = Workspace::module(&bin, &root, w.layout("master-node"), PROVIDER);
    tf(|| master.init());
    let plan = tf(|| master.plan(&[&v, "-out=tfplan"]));
    expect(&plan, 2, "the master's first plan");
    assert!(
        !plan.stdout.contains(&w.kubeconfig_b64),
        "the kubeconfig was printed"
    );
    tf(|| {
        master
            .run(&["apply", "-input=false", "-no-color", "tfplan"])
            .ok()
    });
    let out = tf(|| master.outputs());
    // Deckhouse's names: the address `<hostname>-auto`, the rest ending in their hashes.
    let m = w.node("master", 0);
    assert_eq!(m.vmip("Auto"), "tf-master-0-auto");
    let address = w.leased(&m.vmip("Auto")).await;
    assert!(address.starts_with("10.66.20."), "{address}");
    assert_eq!(
        out["master_ip_address_for_ssh"]["value"],
        address.as_str(),
        "{out}"
    );
    assert_eq!(out["node_internal_ip_address"]["value"], address.as_str());
    // DVP's serial for a disk is md5(its uid), as the guest's udev links it.
    let etcd = w
        .api(&api::virtual_disk())
        .get(&m.etcd_disk())
        .await
        .unwrap();
    assert_eq!(
        out["kubernetes_data_device_path"]["value"],
        format!(
            "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_{:x}",
            md5::compute(etcd.metadata.uid.as_deref().unwrap())
        )
    );
    let vm_name = m.vm(&address);
    let vm = w.api(&api::virtual_machine()).get(&vm_name).await.unwrap();
    assert_eq!(
        vm.data["spec"]["cpu"],
        json!({"cores": 2, "coreFraction": "50%"})
    );
    assert_eq!(
        vm.data["spec"]["blockDeviceRefs"],
        json!([{"kind": "VirtualDisk", "name": m.root_disk()},
               {"kind": "VirtualDisk", "name": m.etcd_disk()}])
    );
    // As Deckhouse's layout leaves it: no bootloader given, DVP's default.
    assert_eq!(vm.data["spec"]["bootloader"], "BIOS");
    assert_eq!(vm.data["spec"]["terminationGracePeriodSeconds"], 90);
    assert_eq!(
        vm.data["spec"]["disruptions"],
        json!({"restartApprovalMode": "Automatic"})
    );
    let labels = vm.labels();
    assert_eq!(labels["dvp.deckhouse.io/hostname"], "tf-master-0");
    assert_eq!(labels["dvp.deckhouse.io/node-group"], "master");
    assert_eq!(labels["dvp.deckhouse.io/cluster-prefix"], "tf");
    assert_eq!(labels["deckhouse.io/managed-by"], "deckhouse");
    let mut want = vec![
        format!("secret/{}", m.secret(&address)),
        format!("vd/{}", m.etcd_disk()),
        format!("vd/{}", m.root_disk()),
        format!("vm/{vm_name}"),
        format!("vmip/{}", m.vmip("Auto")),
    ];
    want.sort();
    assert_eq!(w.objects().await, want);
    expect(&tf(|| master.plan(&[&v])), 0, "the master's second plan");

    // The VM deleted behind Terraform's back: planned again, made again.
    w.sim.delete_vm(&vm_name).await;
    real::wait_for("the VM gone", Duration::from_secs(30), async || {
        w.api(&api::virtual_machine())
            .get_opt(&vm_name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let replan = tf(|| master.plan(&[&v]));
    expect(&replan, 2, "the plan after the VM was deleted out of band");
    assert!(
        replan
            .stdout
            .contains("dvp_virtual_machine.node will be created"),
        "{}",
        replan.stdout
    );
    tf(|| {
        master
            .run(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    assert_eq!(
        tf(|| master.outputs())["master_ip_address_for_ssh"]["value"],
        address.as_str()
    );
    expect(&tf(|| master.plan(&[&v])), 0, "the plan after the re-run");

    let node = Workspace::module(&bin, &root, w.layout("static-node"), PROVIDER);
    // The worker's class labels and annotates its VMs, the cluster labels every VM.
    let extras = Extras {
        labels: json!({"app": "postgres"}),
        annotations: json!({"owner": "dba-team"}),
        cluster_labels: json!({"team": "infra"}),
        ..Extras::default()
    };
    let nv = w.vars_with(
        0,
        "worker",
        &w.kubeconfig_b64,
        Inputs::ClusterConfiguration,
        &extras,
    );
    tf(|| node.init());
    tf(|| {
        node.run(&["apply", "-input=false", "-no-color", "-auto-approve", &nv])
            .ok()
    });
    // Like Deckhouse's static-node layout, ours has no outputs: the node is in the parent.
    let worker = w.node("worker", 0);
    let worker_address = w.leased(&worker.vmip("Auto")).await;
    assert!(worker_address.starts_with("10.66.20.") && worker_address != address);
    let vm = w
        .api(&api::virtual_machine())
        .get(&worker.vm(&worker_address))
        .await
        .unwrap();
    assert_eq!(
        vm.data["spec"]["blockDeviceRefs"],
        json!([{"kind": "VirtualDisk", "name": worker.root_disk()}])
    );
    assert_eq!(vm.labels()["dvp.deckhouse.io/node-group"], "worker");
    assert_eq!(vm.labels()["app"], "postgres");
    assert_eq!(vm.labels()["team"], "infra");
    assert_eq!(
        vm.annotations().get("owner").map(String::as_str),
        Some("dba-team")
    );
    expect(&tf(|| node.plan(&[&nv])), 0, "the node's second plan");

    tf(|| {
        node.run(&["destroy", "-input=false", "-no-color", "-auto-approve", &nv])
            .ok()
    });
    tf(|| {
        master
            .run(&["destroy", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    assert_eq!(
        w.objects().await,
        Vec::<String>::new(),
        "destroy left objects"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_an_outage_and_an_import() {
    let Some((w, bin)) = World::new("the DVP Terraform faults test", "faults").await else {
        return;
    };
    let root = w.dir.path().to_owned();
    let master = Workspace::module(&bin, &root, w.layout("master-node"), PROVIDER);
    tf(|| master.init());

    // A kubeconfig whose token the parent refuses: a diagnostic, the token never printed.
    let wrong = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: {}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: not-a-token-7f3a\ncontexts:\n- name: c\n  context: {{cluster: p, user: u}}\ncurrent-context: c\n",
        w.server
    );
    let wv = w.vars(
        0,
        "master",
        &base64::engine::general_purpose::STANDARD.encode(wrong),
    );
    let refused = tf(|| master.run(&["apply", "-input=false", "-no-color", "-auto-approve", &wv]));
    assert_eq!(refused.code, 1, "{}\n{}", refused.stdout, refused.stderr);
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert!(said.contains("Failed to create"), "{said}");
    assert!(
        !said.contains("not-a-token-7f3a"),
        "the token was printed: {said}"
    );
    assert!(w.objects().await.is_empty());

    // The parent's API down while the VM starts: a clear diagnostic, the state names what
    // was made, a re-run once it is back converges.
    let v = w.vars(0, "master", &w.kubeconfig_b64);
    let apply = master
        .command(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    real::wait_for("the VM made", Duration::from_secs(60), async || {
        let vms = w.api(&api::virtual_machine());
        let listed = vms.list(&ListParams::default()).await.ok()?;
        (!listed.items.is_empty()).then_some(())
    })
    .await;
    w.sim
        .faults
        .api_down
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let out = tf(|| apply.wait_with_output().unwrap());
    w.sim
        .faults
        .api_down
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "the apply succeeded through an outage: {said}"
    );
    assert!(
        said.contains("503") || said.to_lowercase().contains("unavailable"),
        "{said}"
    );
    let list = tf(|| master.run(&["state", "list"]).ok());
    assert!(
        list.stdout.contains("dvp_virtual_machine.node"),
        "{}",
        list.stdout
    );
    tf(|| {
        master
            .run(&["apply", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    expect(&tf(|| master.plan(&[&v])), 0, "the plan after the re-run");

    // An existing disk imported by name: in the state as the parent has it.
    let imported = Workspace::new(
        &bin,
        &root,
        "import",
        PROVIDER,
        &[(
            "main.tf",
            "terraform {\n  required_providers {\n    dvp = { source = \"overcast/dvp\" }\n  }\n}\nvariable \"kubeconfig\" { type = string }\nvariable \"namespace\" { type = string }\nprovider \"dvp\" {\n  kubeconfig_base64 = var.kubeconfig\n  namespace = var.namespace\n}\nresource \"dvp_virtual_disk\" \"data\" {\n  name = var.name\n  size = \"2Gi\"\n}\nvariable \"name\" { type = string }\n",
        )],
    );
    let etcd = w.node("master", 0).etcd_disk();
    let iv = [
        format!("-var=kubeconfig={}", w.kubeconfig_b64),
        format!("-var=namespace={}", w.sim.namespace),
        format!("-var=name={etcd}"),
    ];
    tf(|| imported.init());
    let run = tf(|| {
        imported.run(&[
            "import",
            "-input=false",
            "-no-color",
            &iv[0],
            &iv[1],
            &iv[2],
            "dvp_virtual_disk.data",
            &etcd,
        ])
    });
    expect(&run, 0, "the import");
    let shown = tf(|| {
        imported
            .run(&["state", "show", "-no-color", "dvp_virtual_disk.data"])
            .ok()
    });
    assert!(shown.stdout.contains("\"2Gi\""), "{}", shown.stdout);
    let bad = tf(|| {
        imported.run(&[
            "import",
            "-input=false",
            "-no-color",
            &iv[0],
            &iv[1],
            &iv[2],
            "dvp_virtual_disk.data",
            "../etc",
        ])
    });
    assert_ne!(bad.code, 0);

    tf(|| {
        master
            .run(&["destroy", "-input=false", "-no-color", "-auto-approve", &v])
            .ok()
    });
    assert!(w.objects().await.is_empty(), "{:?}", w.objects().await);
}
