use super::*;

fn load_env(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vsphere.conf");
    std::fs::write(&path, text).unwrap();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::load_with(Some(&path), &move |k| {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
}

fn load(text: &str) -> Result<Config, ConfigError> {
    load_env(text, &[])
}

#[test]
fn ini_global_defaults_fill_each_vcenter_and_secrets_stay_hidden() {
    let c = load(
        "[Global]\nuser = admin@vsphere.local\npassword = \"pa ss\"\ninsecure-flag = 1\nport = 8443\n\
         [VirtualCenter \"vc1\"]\ndatacenters = dc1, dc2\n\
         [VirtualCenter \"tenant\"]\nserver = 10.0.0.2\nsecret-name = vc2-creds\ndatacenters = dc3\nuser=\npassword=\n\
         [Labels]\nregion = k8s-region\nzone = k8s-zone\n\
         [Nodes]\ninternal-network-subnet-cidr = 10.0.0.0/24\nexclude-external-network-subnet-cidr = 192.0.2.0/24,fe80::1/128\n\
         internal-vm-network-name = \"VM Network\"\n",
    )
    .unwrap();
    assert_eq!(c.vcenters.len(), 2);
    let vc1 = &c.vcenters[0];
    assert_eq!((vc1.server.as_str(), vc1.port), ("vc1", 8443));
    assert_eq!(vc1.datacenters, vec!["dc1", "dc2"]);
    assert!(vc1.insecure);
    assert_eq!(vc1.ip_family, vec![IpFamily::V4]);
    let vc2 = &c.vcenters[1];
    assert_eq!(
        (vc2.name.as_str(), vc2.server.as_str()),
        ("tenant", "10.0.0.2")
    );
    assert_eq!(
        vc2.credentials,
        Credentials::Secret {
            name: "vc2-creds".into(),
            namespace: "kube-system".into()
        }
    );
    assert_eq!(c.zone_category.as_deref(), Some("k8s-zone"));
    assert_eq!(c.nodes.internal_subnets.len(), 1);
    assert_eq!(c.nodes.exclude_external_subnets.len(), 2);
    assert_eq!(c.nodes.internal_network_name.as_deref(), Some("VM Network"));
    assert!(!format!("{c:?}").contains("pa ss"));
    assert!(c.unknown.is_empty(), "{:?}", c.unknown);
}

#[test]
fn yaml_reads_as_upstream_and_unknown_keys_are_listed() {
    let c = load(
        "global:\n  port: 443\n  insecureFlag: true\n  user: u\n  password: secret-pw\n\
         vcenter:\n  main:\n    server: 127.0.0.1\n    port: 8989\n    datacenters:\n      - DC0\n    ipFamily: [ipv6, ipv4]\n\
         \x20 second:\n    server: vc2.example.com\n    user: own\n    password: own-pw\n    datacenters: [DC1]\n    caFile: /etc/ca.pem\n    insecure-flag: true\n\
         labels:\n  zone: k8s-zone\n  region: k8s-region\n  Zone: x\n\
         nodes:\n  externalVmNetworkName: public\n  internalNetworkSubnetCidr: 10.1.0.0/16\n\
         spelledWrong: 1\n",
    )
    .unwrap();
    assert_eq!(c.vcenters.len(), 2);
    let main = &c.vcenters[0];
    assert_eq!(
        (main.name.as_str(), main.server.as_str(), main.port),
        ("main", "127.0.0.1", 8989)
    );
    assert!(main.insecure);
    assert_eq!(main.ip_family, vec![IpFamily::V6, IpFamily::V4]);
    assert_eq!(
        main.credentials,
        Credentials::Inline {
            user: "u".into(),
            password: "secret-pw".into()
        }
    );
    let second = &c.vcenters[1];
    assert_eq!(second.port, 443);
    assert_eq!(second.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert!(matches!(&second.credentials, Credentials::Inline { user, .. } if user == "own"));
    assert_eq!(c.region_category.as_deref(), Some("k8s-region"));
    assert_eq!(c.nodes.external_network_name.as_deref(), Some("public"));
    // Each level's keys checked against its type's (an INI spelling in YAML is unknown).
    assert_eq!(
        c.unknown,
        vec![
            "spelledWrong",
            "vcenter.second.insecure-flag",
            "labels.Zone"
        ]
    );
    assert!(!format!("{c:?}").contains("secret-pw"));
}

#[test]
fn the_environment_wins_and_can_name_the_vcenter_alone() {
    let c = load_env(
        "",
        &[
            ("VSPHERE_VCENTER", "vc.example.com"),
            ("VSPHERE_USER", "u"),
            ("VSPHERE_PASSWORD", "p"),
            ("VSPHERE_DATACENTER", "DC0"),
            ("VSPHERE_INSECURE", "true"),
            ("VSPHERE_LABEL_ZONE", "zones"),
            ("VSPHERE_NODES_INTERNAL_VM_NETWORK_NAME", "inner"),
        ],
    )
    .unwrap();
    assert_eq!(c.vcenters.len(), 1);
    assert_eq!(c.vcenters[0].server, "vc.example.com");
    assert!(c.vcenters[0].insecure);
    assert_eq!(c.zone_category.as_deref(), Some("zones"));
    assert_eq!(c.nodes.internal_network_name.as_deref(), Some("inner"));
    let over = load_env(
        "[Global]\nuser = file-user\npassword = p\n[VirtualCenter \"vc\"]\ndatacenters = d\n",
        &[("VSPHERE_USER", "env-user")],
    )
    .unwrap();
    assert!(
        matches!(&over.vcenters[0].credentials, Credentials::Inline { user, .. } if user == "env-user")
    );
}

#[test]
fn what_is_missing_or_wrong_is_named() {
    let e = Config::load_with(None, &|_| None).unwrap_err().to_string();
    assert!(
        e.contains("lacks credentials or settings") && e.contains("a vCenter"),
        "{e}"
    );
    let e = load("[VirtualCenter \"vc1\"]\nuser = u\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("password for vCenter \"vc1\"") && e.contains("datacenters for vCenter \"vc1\""),
        "{e}"
    );
    let e = load("[VirtualCenter]\nuser = u\n").unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("needs its host"), "{e}");
    let e = load("[Global]\nport = many\n").unwrap_err().to_string();
    assert!(e.contains("port") && !e.contains("many\n"), "{e}");
    let e = load(
        "[VirtualCenter \"v\"]\nuser = u\npassword = p\ndatacenters = d\n[Nodes]\ninternal-network-subnet-cidr = 10.0.0.0/99\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("internal-network-subnet-cidr"), "{e}");
    let e = load("vcenter: [not, a, map]\n").unwrap_err().to_string();
    assert!(e.contains("nor YAML"), "{e}");
    let e = load(
        "vcenter:\n  v:\n    user: u\n    password: p\n    datacenters: [d]\n    ipFamily: [ipv5]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("ipv5"), "{e}");
}

#[test]
fn topology_keys_follow_the_labels_form_upstream_read() {
    let vc = "[Global]\nuser = u\npassword = p\n[VirtualCenter \"vc\"]\ndatacenters = DC0\n";
    // The newer form: a key per category under vsphere-csi-driver's domain.
    let c = load(&format!(
        "{vc}[Labels]\nzone = k8s-zone\nregion = k8s-region\ntopology-categories = k8s-region, k8s-zone\n"
    ))
    .unwrap();
    assert!(c.unknown.is_empty(), "{:?}", c.unknown);
    assert_eq!(c.topology_categories, ["k8s-region", "k8s-zone"]);
    assert_eq!(
        c.topology_aliases(),
        (
            vec!["topology.csi.vmware.com/k8s-zone".to_owned()],
            vec!["topology.csi.vmware.com/k8s-region".to_owned()]
        )
    );
    // Zone and region alone: the beta failure-domain keys; a zone alone: none.
    let c = load(&format!("{vc}[Labels]\nzone = z\nregion = r\n")).unwrap();
    assert_eq!(
        c.topology_aliases(),
        (
            vec![LEGACY_ZONE_KEY.to_owned()],
            vec![LEGACY_REGION_KEY.to_owned()]
        )
    );
    let c = load(&format!("{vc}[Labels]\nzone = z\n")).unwrap();
    assert!(c.zoned());
    assert_eq!(c.topology_aliases(), (vec![], vec![]));
    assert!(!load(vc).unwrap().zoned());
    // YAML's camelCase key.
    let c = load(
        "global:\n  user: u\n  password: p\nvcenter:\n  vc:\n    server: vc\n    datacenters: [DC0]\n\
         labels:\n  zone: z\n  region: r\n  topologyCategories: z\n",
    )
    .unwrap();
    assert_eq!(c.topology_aliases().0, ["topology.csi.vmware.com/z"]);
    // A category that is neither, or categories with no zone and region to say which.
    for (labels, says) in [
        (
            "zone = z\nregion = r\ntopology-categories = r,z,rack",
            "\"rack\"",
        ),
        (
            "topology-categories = k8s-zone",
            "needs zone = and region =",
        ),
    ] {
        let e = load(&format!("{vc}[Labels]\n{labels}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{e}");
    }
}

/// vsphere-csi-driver's `csi-vsphere.conf` as its users carry it over: its `[Global]`
/// `cluster-id` (quoted, as its docs write it) is read; `cluster-distribution` is known
/// (recorded upstream, filtering nothing); neither belongs in a vCenter's section.
#[test]
fn csi_vsphere_conf_s_cluster_id_is_read_and_bounded() {
    let c = load(
        "[Global]\ncluster-id = \"demo-cluster-id\"\ncluster-distribution = \"Openshift\"\n\
         [VirtualCenter \"1.1.1.1\"]\ninsecure-flag = \"true\"\nuser = \"Administrator@vsphere.local\"\n\
         password = \"password\"\nport = \"443\"\ndatacenters = \"datacenter\"\n",
    )
    .unwrap();
    assert_eq!(c.cluster_id.as_deref(), Some("demo-cluster-id"));
    assert!(c.unknown.is_empty(), "{:?}", c.unknown);
    let c = load("[Global]\nuser = u\npassword = p\n[VirtualCenter \"vc\"]\ndatacenters = d\n")
        .unwrap();
    assert_eq!(c.cluster_id, None);
    let c = load("[Global]\nuser = u\npassword = p\n[VirtualCenter \"vc\"]\ndatacenters = d\ncluster-id = x\n")
        .unwrap();
    assert!(
        c.unknown.len() == 1 && c.unknown[0].contains("cluster-id"),
        "{:?}",
        c.unknown
    );
    let long = "x".repeat(65);
    let e = load(&format!(
        "[Global]\ncluster-id = {long}\nuser = u\npassword = p\n[VirtualCenter \"vc\"]\ndatacenters = d\n"
    ))
    .unwrap_err();
    assert!(e.to_string().contains("64 characters"), "{e}");
}

/// vsphere-csi-driver's `[Snapshot]` section (its `csi-vsphere.conf`,
/// pkg/common/config/types.go): the per-volume limit read; its granular per-datastore keys
/// warned about as unknown; a limit that is not a number refused.
#[test]
fn ini_snapshot_section_sets_the_per_volume_limit() {
    let base = "[Global]\ncluster-id = c1\n[VirtualCenter \"vc1\"]\nuser = u\npassword = p\ndatacenters = dc1\n";
    let c = load(&format!(
        "{base}[Snapshot]\nglobal-max-snapshots-per-block-volume = 5\ngranular-max-snapshots-per-block-volume-vsan = 7\n"
    ))
    .unwrap();
    assert_eq!(c.max_snapshots, 5);
    assert!(
        c.unknown
            .iter()
            .any(|k| k.contains("granular-max-snapshots-per-block-volume-vsan")),
        "{:?}",
        c.unknown
    );
    assert_eq!(
        load(base).unwrap().max_snapshots,
        0,
        "unset: upstream's default"
    );
    assert!(load(&format!(
        "{base}[Snapshot]\nglobal-max-snapshots-per-block-volume = many\n"
    ))
    .is_err());
}
