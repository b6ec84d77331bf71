use super::*;

fn load(text: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.conf");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path))
}

/// The node plugin's two `[BlockStorage]` keys are read alone, from a file that may
/// hold no credentials at all.
#[test]
fn a_node_reads_its_block_storage_keys_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.conf");
    std::fs::write(
        &path,
        "[BlockStorage]\nnode-volume-attach-limit = 40\nrescan-on-resize = True\n",
    )
    .unwrap();
    assert_eq!(node_volume_attach_limit(Some(&path)), Some(40));
    assert!(rescan_on_resize(Some(&path)));
    std::fs::write(&path, "[BlockStorage]\nrescan-on-resize = false\n").unwrap();
    assert!(!rescan_on_resize(Some(&path)));
    assert_eq!(node_volume_attach_limit(Some(&path)), None);
    assert!(!rescan_on_resize(Some(&dir.path().join("missing"))));
}

#[test]
fn no_file_names_what_keystone_needs() {
    let e = Config::load(None).unwrap_err();
    let text = e.to_string();
    assert!(e.is_missing(), "{text}");
    for what in ["auth-url", "username or user-id", "password", "project-id"] {
        assert!(text.contains(what), "{text}");
    }
}

#[test]
fn occms_password_and_application_credential_files_read_unchanged() {
    let c = load(
        "[Global]\nauth-url = https://keystone:5000/v3\nusername = k8s\npassword = \"s3cr#t\"\n\
         user-domain-name = Default\nproject-id = 0123\nregion = RegionOne\nfancy = 1\n\
         [BlockStorage]\nnode-volume-attach-limit = 60\nrescan-on-resize = true\n\
         [LoadBalancer]\nuse-octavia = true\n[Mystery]\n",
    )
    .unwrap();
    assert_eq!(c.node_volume_attach_limit, 60);
    assert!(c.rescan_on_resize && !c.ignore_volume_az);
    assert_eq!(c.region.as_deref(), Some("RegionOne"));
    assert_eq!(
        c.unknown,
        vec![
            "[global] fancy (line 8)".to_owned(),
            "[mystery] (line 14)".to_owned()
        ]
    );
    assert!(matches!(&c.auth, Auth::Password { password, .. } if password == "s3cr#t"));
    assert!(!format!("{c:?}").contains("s3cr"));
    let c = load("[Global]\nauth-url=https://k/v3\napplication-credential-id=abc\napplication-credential-secret=xyz\n").unwrap();
    assert_eq!(c.node_volume_attach_limit, 256);
    assert!(matches!(c.auth, Auth::ApplicationCredential { .. }));
}

#[test]
fn users_projects_and_credentials_are_read_as_keystone_takes_them() {
    let c = load(
        "[Global]\nauth-url=https://k/v3\nusername=u\npassword=p\ndomain-name=D\n\
         project-name=P\ntenant-domain-id=td\n",
    )
    .unwrap();
    assert_eq!(
        c.auth,
        Auth::Password {
            user: Named::Name {
                name: "u".into(),
                domain: Domain::Name("D".into())
            },
            password: "p".into(),
            project: Named::Name {
                name: "P".into(),
                domain: Domain::Id("td".into())
            },
        }
    );
    let c = load(
        "[Global]\nauth-url=https://k/v3\nuser-id=uid\nusername=ignored\npassword=p\n\
         tenant-id=pid\nca-file=/etc/ca.pem\n",
    )
    .unwrap();
    assert!(
        matches!(&c.auth, Auth::Password { user: Named::Id(u), project: Named::Id(p), .. } if u == "uid" && p == "pid")
    );
    assert_eq!(c.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    let c = load(
        "[Global]\nauth-url=https://k/v3\napplication-credential-name=k8s\n\
         application-credential-secret=s\nusername=u\nuser-domain-id=default\n",
    )
    .unwrap();
    assert_eq!(
        c.auth,
        Auth::ApplicationCredential {
            credential: Credential::Name {
                name: "k8s".into(),
                user: Named::Name {
                    name: "u".into(),
                    domain: Domain::Id("default".into())
                }
            },
            secret: "s".into()
        }
    );
    let e = load("[Global]\nauth-url=https://k/v3\napplication-credential-name=k8s\napplication-credential-secret=s\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the user an application-credential-name belongs to"),
        "{e}"
    );
}

#[test]
fn clouds_yaml_is_read_for_use_clouds_or_os_cloud_and_cloud_conf_wins() {
    let dir = tempfile::tempdir().unwrap();
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(
        &clouds,
        "clouds:\n  prod:\n    auth:\n      auth_url: https://k:5000/v3\n      username: k8s\n\
         \x20     password: from-yaml\n      user_domain_name: Default\n      project_id: p1\n\
         \x20   region_name: R1\n    verify: false\n  other:\n    auth:\n      auth_url: https://o/v3\n",
    )
    .unwrap();
    let env = |k: &str| match k {
        "OS_CLOUD" => Some("prod".to_owned()),
        "OS_CLIENT_CONFIG_FILE" => Some(clouds.display().to_string()),
        _ => None,
    };
    // No cloud.conf, OS_CLOUD set.
    let c = Config::load_with_env(None, &env).unwrap();
    assert_eq!(c.auth_url, "https://k:5000/v3");
    assert_eq!(c.region.as_deref(), Some("R1"));
    assert!(c.tls_insecure);
    assert!(
        matches!(&c.auth, Auth::Password { password, project: Named::Id(p), .. } if password == "from-yaml" && p == "p1")
    );
    // cloud.conf with use-clouds: its own keys win.
    let conf = dir.path().join("cloud.conf");
    std::fs::write(
        &conf,
        format!(
            "[Global]\nuse-clouds = true\nclouds-file = {}\ncloud = prod\npassword = from-conf\n",
            clouds.display()
        ),
    )
    .unwrap();
    let c = Config::load_with_env(Some(&conf), &|_| None).unwrap();
    assert!(matches!(&c.auth, Auth::Password { password, .. } if password == "from-conf"));
    assert!(c.unknown.is_empty(), "{:?}", c.unknown);
    // A cloud the file lacks, and no file at all, are named.
    std::fs::write(
        &conf,
        format!(
            "[Global]\nuse-clouds=true\nclouds-file={}\ncloud=nope\n",
            clouds.display()
        ),
    )
    .unwrap();
    let e = Config::load_with_env(Some(&conf), &|_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no cloud \"nope\""), "{e}");
    let e = Config::load_with_env(None, &|k| (k == "OS_CLOUD").then(|| "prod".to_owned()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("clouds.yaml not found"), "{e}");
}

#[test]
fn what_is_missing_or_wrong_is_named() {
    let e = load("[Global]\nauth-url = https://k/v3\nusername = k8s\nproject-name = p\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("password") && e.contains("user's domain") && e.contains("project's domain"),
        "{e}"
    );
    let e = load("[Global]\nauth-url=https://k/v3\napplication-credential-id=abc\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("application-credential-secret"), "{e}");
    let e = load("[Global]\nauth-url=https://k/v3\nuser-id=u\npassword=p\nproject-id=x\n[BlockStorage]\nnode-volume-attach-limit = lots\n")
        .unwrap_err();
    assert!(e.to_string().contains("line 7"), "{e}");
    let e = load("[Global]\nauth-url = \"open\n").unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
}

/// `[Networking]` as OCCM reads it: network names repeat, the sort order is a comma list
/// of CIDRs; a sort item that is not a CIDR is refused with its line (OCCM skips it,
/// reordering every node's addresses without a word).
#[test]
fn the_networking_section_is_read_as_occm_reads_it() {
    let base = "[Global]\nauth-url=https://k/v3\napplication-credential-id=a\napplication-credential-secret=s\n";
    let c = load(&format!(
        "{base}[Networking]\npublic-network-name = public\npublic-network-name = ext2\n\
         internal-network-name = k8s\nipv6-support-disabled = true\n\
         address-sort-order = 10.0.0.0/8, 192.168.0.0/16\n"
    ))
    .unwrap();
    assert_eq!(c.networking.public_networks, ["public", "ext2"]);
    assert_eq!(c.networking.internal_networks, ["k8s"]);
    assert!(c.networking.ipv6_disabled);
    let order: Vec<String> = c
        .networking
        .address_sort_order
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(order, ["10.0.0.0/8", "192.168.0.0/16"]);
    assert!(c.unknown.is_empty(), "{:?}", c.unknown);
    let e = load(&format!(
        "{base}[Networking]\naddress-sort-order = 10.0.0.0/8, nonsense\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("nonsense") && e.contains("line 6"), "{e}");
    assert_eq!(load(base).unwrap().networking, Networking::default());
}
