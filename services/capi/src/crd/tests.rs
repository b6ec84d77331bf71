use serde_json::{json, Value};

use super::*;

fn schema(family: Family, kind: &str) -> Value {
    let crd = crds(family)
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    let v = serde_json::to_value(&crd.spec.versions[0]).unwrap();
    v["schema"]["openAPIV3Schema"].clone()
}

fn required(v: &Value) -> Vec<&str> {
    v["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn the_zvirt_kinds_require_and_default_what_deckhouse_s_crds_do() {
    let machine = schema(Family::Zvirt, "ZvirtMachine");
    let spec = &machine["properties"]["spec"];
    assert_eq!(
        required(spec),
        [
            "cpu",
            "nicName",
            "rootDiskSizeGb",
            "template",
            "vnicProfileID"
        ]
    );
    let p = &spec["properties"];
    assert_eq!(p["memory"]["default"], 8192);
    assert_eq!(p["rootDiskSizeGb"]["default"], 20);
    assert_eq!(p["nicName"]["default"], "nic1");
    assert_eq!(p["cpu"]["properties"]["sockets"]["default"], 4);
    assert_eq!(p["cpu"]["properties"]["threads"]["default"], 1);
    assert_eq!(required(&p["cpu"]), ["cores", "sockets", "threads"]);
    assert!(p.get("providerID").is_some() && p.get("id").is_some());
    let status = &machine["properties"]["status"]["properties"];
    assert_eq!(
        required(&status["conditions"]["items"]),
        ["lastTransitionTime", "status", "type"]
    );

    let template = schema(Family::Zvirt, "ZvirtMachineTemplate");
    let tspec = &template["properties"]["spec"]["properties"]["template"]["properties"]["spec"];
    assert_eq!(
        required(tspec),
        ["rootDiskSizeGb", "template", "vnicProfileID"]
    );
    let cluster = schema(Family::Zvirt, "ZvirtCluster");
    assert!(cluster["properties"]["spec"]["properties"]["id"].is_object());
}

#[test]
fn the_dvp_kinds_validate_what_deckhouse_s_crds_do() {
    let machine = schema(Family::Dvp, "DeckhouseMachine");
    let spec = &machine["properties"]["spec"];
    assert_eq!(
        required(spec),
        [
            "bootDiskImageRef",
            "cpu",
            "memory",
            "rootDiskSize",
            "rootDiskStorageClass",
            "vmClassName"
        ]
    );
    let p = &spec["properties"];
    assert_eq!(
        p["cpu"]["properties"]["cpuFraction"]["pattern"],
        "^100%$|^[1-9][0-9]?%$"
    );
    assert_eq!(
        p["cpu"]["properties"]["cores"]["minimum"].as_f64(),
        Some(1.0)
    );
    assert_eq!(p["cpu"]["properties"]["cores"]["default"], 4);
    assert_eq!(p["memory"]["default"], "8Gi");
    assert_eq!(p["memory"]["x-kubernetes-int-or-string"], true);
    assert_eq!(
        p["bootloader"]["enum"],
        json!(["BIOS", "EFI", "EFIWithSecureBoot"])
    );
    assert_eq!(p["bootloader"]["default"], "EFI");
    assert_eq!(
        p["bootDiskImageRef"]["properties"]["kind"]["enum"],
        json!(["ClusterVirtualImage", "VirtualImage", "VirtualDiskSnapshot"])
    );
    let status = &machine["properties"]["status"]["properties"];
    assert_eq!(status["initialization"]["minProperties"], 1);
    assert_eq!(
        required(&status["conditions"]["items"]),
        ["lastTransitionTime", "message", "reason", "status", "type"]
    );
    let template = schema(Family::Dvp, "DeckhouseMachineTemplate");
    let tspec = &template["properties"]["spec"]["properties"]["template"]["properties"]["spec"];
    assert!(tspec["properties"].get("providerID").is_none());
    assert_eq!(required(tspec).len(), 6);
}

#[test]
fn each_crd_carries_its_contract_label_and_a_status_subresource_where_upstream_has_one() {
    for (family, contract, version) in [
        (Family::Zvirt, "cluster.x-k8s.io/v1beta1", "v1"),
        (Family::Dvp, "cluster.x-k8s.io/v1beta2", "v1alpha1"),
    ] {
        for crd in crds(family) {
            let labels = crd.metadata.labels.clone().unwrap();
            assert_eq!(labels[contract], version, "{}", crd.spec.names.kind);
            assert_eq!(crd.spec.group, "infrastructure.cluster.x-k8s.io");
            assert_eq!(crd.spec.scope, "Namespaced");
            let v = &crd.spec.versions[0];
            assert_eq!(v.name, version);
            let has_status = v.subresources.as_ref().is_some_and(|s| s.status.is_some());
            assert_eq!(
                has_status,
                !crd.spec.names.kind.ends_with("Template"),
                "{}",
                crd.spec.names.kind
            );
        }
    }
}

#[test]
fn the_manifest_reads_back_as_the_crds() {
    for family in [Family::Zvirt, Family::Dvp] {
        let text = manifest(family);
        let docs: Vec<Value> = text
            .split("\n---\n")
            .skip(1)
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        let want: Vec<Value> = crds(family)
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        assert_eq!(docs, want);
    }
}

/// `deploy/crds/` is what `capi crds` prints; regenerate with
/// `cargo run -p overcast-capi -- crds --cloud zvirt > deploy/crds/zvirt/capi-zvirt.yaml` (dvp
/// likewise).
#[test]
fn deploy_holds_the_generated_crds() {
    let dir =
        std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
            .join("../../deploy/crds");
    for family in [Family::Zvirt, Family::Dvp] {
        let path = dir
            .join(family.provider())
            .join(format!("capi-{}.yaml", family.provider()));
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == manifest(family),
            "{} is not what `capi crds --cloud {}` prints: regenerate it",
            path.display(),
            family.provider()
        );
    }
}
