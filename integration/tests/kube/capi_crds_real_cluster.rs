//! The Cluster API kinds' CRDs as shipped in `deploy/crds/`, installed into the kit's real
//! API server: the objects Deckhouse's node-manager renders (and those Cluster API's
//! MachineSet makes from them) are accepted unchanged and defaulted as Deckhouse's CRDs
//! default them; objects Deckhouse's CRDs refuse are refused, naming the field. Needs
//! `OVERCAST_TEST_KUBECONFIG`; says it was skipped otherwise.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use overcast_capi::crd::{dvp, zvirt};
use serde_json::{json, Value};

/// node-manager's namespace for the machines it orders.
const NS: &str = "d8-cloud-instance-manager";

async fn install(client: &Client) {
    let mut crds = overcast_integration::capi::provider_crds("zvirt");
    crds.extend(overcast_integration::capi::provider_crds("dvp"));
    overcast_integration::capi::install(client, &crds).await;
    let ns: Api<Namespace> = Api::all(client.clone());
    let _ = ns
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await;
}

/// Creates `body` (kind `ar`), deleting a leftover of an earlier run first; the stored
/// object, or the API server's refusal.
async fn create(client: &Client, ar: &ApiResource, body: Value) -> Result<Value, String> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, ar);
    let obj: DynamicObject = serde_json::from_value(body).unwrap();
    let name = obj.name_any();
    let _ = api.delete(&name, &DeleteParams::default()).await;
    overcast_integration::real::wait_for("a leftover gone", Duration::from_secs(10), async || {
        api.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => {
            let _ = api.delete(&name, &DeleteParams::default()).await;
            Ok(serde_json::to_value(o).unwrap())
        }
        Err(kube::Error::Api(e)) => Err(format!("{} {}", e.code, e.message)),
        Err(e) => panic!("create {name}: {e}"),
    }
}

fn with(mut base: Value, path: &[&str], value: Option<Value>) -> Value {
    let (last, parents) = path.split_last().unwrap();
    let mut at = &mut base;
    for p in parents {
        at = &mut at[*p];
    }
    match value {
        Some(v) => at[*last] = v,
        None => {
            at.as_object_mut().unwrap().remove(*last);
        }
    }
    base
}

/// A ZvirtMachineTemplate as node-manager renders it from a ZvirtInstanceClass
/// (`capi/machine-template.yaml` of cloud-provider-zvirt: numCPUs → sockets, cores and
/// threads 1; memory, rootDiskSizeGb and nicName only when the class sets them).
fn zvirt_template(name: &str) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1",
        "kind": "ZvirtMachineTemplate",
        "metadata": {
            "name": name, "namespace": NS,
            "annotations": {"checksum/instance-class": "5d41402abc4b2a76", "helm.sh/resource-policy": "keep"},
            "labels": {"heritage": "deckhouse", "module": "cloud-provider-zvirt", "node-group": "worker"},
        },
        "spec": {"template": {"spec": {
            "template": "astra-1.7.5", "vnicProfileID": "411768ee-9d95-4d03-90b5-18bf4e4a78a0",
            "cpu": {"sockets": 2, "cores": 1, "threads": 1},
            "rootDiskSizeGb": 50,
        }}},
    })
}

/// A DeckhouseMachineTemplate as node-manager renders it from a DVPInstanceClass.
fn dvp_template(name: &str) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "DeckhouseMachineTemplate",
        "metadata": {"name": name, "namespace": NS, "labels": {"node-group": "worker"}},
        "spec": {"template": {"spec": {
            "vmClassName": "generic",
            "cpu": {"cores": 2, "cpuFraction": "50%"},
            "memory": "4Gi",
            "rootDiskSize": "20Gi",
            "rootDiskStorageClass": "linstor-thin-r1",
            "bootDiskImageRef": {"kind": "ClusterVirtualImage", "name": "ubuntu-2204"},
            "additionalDisks": [{"size": "10Gi", "storageClass": "linstor-thin-r1"}],
        }}},
    })
}

#[tokio::test]
async fn the_kinds_accept_what_node_manager_renders_and_refuse_what_deckhouse_s_crds_refuse() {
    let Some(kubeconfig) = overcast_integration::real::kubeconfig("the Cluster API CRDs") else {
        return;
    };
    let client = overcast_integration::real::client(&kubeconfig).await;
    install(&client).await;
    let zt = ApiResource::erase::<zvirt::ZvirtMachineTemplate>(&());
    let zm = ApiResource::erase::<zvirt::ZvirtMachine>(&());
    let zc = ApiResource::erase::<zvirt::ZvirtCluster>(&());
    let dt = ApiResource::erase::<dvp::DeckhouseMachineTemplate>(&());
    let dm = ApiResource::erase::<dvp::DeckhouseMachine>(&());
    let dc = ApiResource::erase::<dvp::DeckhouseCluster>(&());

    // zVirt: the template as rendered, defaulted where the class said nothing.
    let stored = create(&client, &zt, zvirt_template("it-worker-1a2b3c"))
        .await
        .expect("node-manager's ZvirtMachineTemplate");
    let spec = &stored["spec"]["template"]["spec"];
    assert_eq!(spec["memory"], 8192);
    assert_eq!(spec["nicName"], "nic1");
    assert_eq!(spec["cpu"]["sockets"], 2);
    assert_eq!(spec["rootDiskSizeGb"], 50);
    let typed: zvirt::ZvirtMachineTemplate = serde_json::from_value(stored).unwrap();
    assert_eq!(typed.spec.template.spec.template, "astra-1.7.5");

    // The ZvirtMachine Cluster API's MachineSet makes from it: the template's spec.
    let machine = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1", "kind": "ZvirtMachine",
        "metadata": {"name": "it-worker-1a2b3c-x7k2p", "namespace": NS,
            "labels": {"cluster.x-k8s.io/cluster-name": "zvirt", "node-group": "worker"}},
        "spec": zvirt_template("x")["spec"]["template"]["spec"].clone(),
    });
    let stored = create(&client, &zm, machine.clone())
        .await
        .expect("a ZvirtMachine from the template");
    assert_eq!(stored["spec"]["memory"], 8192);
    let typed: zvirt::ZvirtMachine = serde_json::from_value(stored).unwrap();
    assert_eq!(typed.spec.cpu.sockets, 2);
    create(
        &client,
        &zc,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1", "kind": "ZvirtCluster",
               "metadata": {"name": "zvirt", "namespace": NS},
               "spec": {"id": "b3bc4a29-1ac3-4f1c-a4c1-4c1e6b9e0c0d"}}),
    )
    .await
    .expect("node-manager's ZvirtCluster");

    // What Deckhouse's zVirt CRDs refuse.
    for (what, ar, body, field) in [
        (
            "a template without the VM template",
            &zt,
            with(
                zvirt_template("it-bad-1"),
                &["spec", "template", "spec", "template"],
                None,
            ),
            "spec.template.spec.template",
        ),
        (
            "a template without the vNIC profile",
            &zt,
            with(
                zvirt_template("it-bad-2"),
                &["spec", "template", "spec", "vnicProfileID"],
                None,
            ),
            "spec.template.spec.vnicProfileID",
        ),
        (
            "a machine without its CPU",
            &zm,
            with(
                with(
                    machine.clone(),
                    &["metadata", "name"],
                    Some(json!("it-bad-3")),
                ),
                &["spec", "cpu"],
                None,
            ),
            "spec.cpu",
        ),
        (
            "sockets that are not a number",
            &zm,
            with(
                with(
                    machine.clone(),
                    &["metadata", "name"],
                    Some(json!("it-bad-4")),
                ),
                &["spec", "cpu", "sockets"],
                Some(json!("four")),
            ),
            "spec.cpu.sockets",
        ),
    ] {
        let err = create(&client, ar, body)
            .await
            .expect_err(&format!("{what} was accepted"));
        assert!(
            err.starts_with("422") && err.contains(field),
            "{what}: {err}"
        );
    }

    // DVP: the template as rendered, the bootloader defaulted.
    let stored = create(&client, &dt, dvp_template("it-dvp-worker"))
        .await
        .expect("node-manager's DeckhouseMachineTemplate");
    let spec = &stored["spec"]["template"]["spec"];
    assert_eq!(spec["bootloader"], "EFI");
    assert_eq!(spec["cpu"]["cpuFraction"], "50%");
    let typed: dvp::DeckhouseMachineTemplate = serde_json::from_value(stored).unwrap();
    assert_eq!(typed.spec.template.spec.additional_disks.len(), 1);

    let machine = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "DeckhouseMachine",
        "metadata": {"name": "it-dvp-worker-x7k2p", "namespace": NS},
        "spec": with(dvp_template("x")["spec"]["template"]["spec"].clone(), &["memory"], None),
    });
    let stored = create(&client, &dm, machine.clone())
        .await
        .expect("a DeckhouseMachine from the template");
    assert_eq!(stored["spec"]["memory"], "8Gi");
    assert_eq!(stored["spec"]["runPolicy"], "AlwaysOnUnlessStoppedManually");
    assert!(stored["spec"].get("liveMigrationPolicy").is_none());
    let typed: dvp::DeckhouseMachine = serde_json::from_value(stored).unwrap();
    assert_eq!(typed.spec.machine.bootloader, dvp::Bootloader::Efi);
    // Newer capdvp's policies, as a newer node-manager renders them.
    let mut newer = machine.clone();
    newer["metadata"]["name"] = json!("it-dvp-master-0");
    newer["spec"]["runPolicy"] = json!("AlwaysOn");
    newer["spec"]["liveMigrationPolicy"] = json!("AlwaysSafe");
    let stored = create(&client, &dm, newer)
        .await
        .expect("a DeckhouseMachine with its policies");
    let typed: dvp::DeckhouseMachine = serde_json::from_value(stored).unwrap();
    assert_eq!(typed.spec.machine.run_policy, dvp::RunPolicy::AlwaysOn);
    assert_eq!(
        typed.spec.machine.live_migration_policy,
        Some(dvp::LiveMigrationPolicy::AlwaysSafe)
    );
    create(
        &client,
        &dc,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "DeckhouseCluster",
               "metadata": {"name": "dvp", "namespace": NS},
               "spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}}),
    )
    .await
    .expect("a DeckhouseCluster");

    let spec = |name: &str, path: &[&str], value: Option<Value>| {
        let full: Vec<&str> = ["spec", "template", "spec"]
            .into_iter()
            .chain(path.iter().copied())
            .collect();
        with(dvp_template(name), &full, value)
    };
    for (what, body, field) in [
        (
            "a CPU fraction of 0%",
            spec("it-dvp-bad-1", &["cpu", "cpuFraction"], Some(json!("0%"))),
            "spec.template.spec.cpu.cpuFraction",
        ),
        (
            "no cores",
            spec("it-dvp-bad-2", &["cpu", "cores"], Some(json!(0))),
            "spec.template.spec.cpu.cores",
        ),
        (
            "an unknown bootloader",
            spec("it-dvp-bad-3", &["bootloader"], Some(json!("UEFI"))),
            "spec.template.spec.bootloader",
        ),
        (
            "an image of an unknown kind",
            spec(
                "it-dvp-bad-4",
                &["bootDiskImageRef", "kind"],
                Some(json!("Image")),
            ),
            "spec.template.spec.bootDiskImageRef.kind",
        ),
        (
            "no root disk StorageClass",
            spec("it-dvp-bad-5", &["rootDiskStorageClass"], None),
            "spec.template.spec.rootDiskStorageClass",
        ),
        (
            "a root disk size that is no quantity",
            spec("it-dvp-bad-6", &["rootDiskSize"], Some(json!("twenty"))),
            "spec.template.spec.rootDiskSize",
        ),
        (
            "an unknown run policy",
            spec("it-dvp-bad-7", &["runPolicy"], Some(json!("Sometimes"))),
            "spec.template.spec.runPolicy",
        ),
        (
            "an unknown live migration policy",
            spec(
                "it-dvp-bad-8",
                &["liveMigrationPolicy"],
                Some(json!("Whenever")),
            ),
            "spec.template.spec.liveMigrationPolicy",
        ),
    ] {
        let err = create(&client, &dt, body)
            .await
            .expect_err(&format!("{what} was accepted"));
        assert!(
            err.starts_with("422") && err.contains(field),
            "{what}: {err}"
        );
    }
}
