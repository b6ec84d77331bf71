//! The vsphere overlay's credentials Role: the ccm and the discoverer read upstream's
//! `vsphere-cloud-secret` with their own accounts, and no other Secret.

use super::*;

const VS_SECRET: (&str, &str) = overcast_cloud_vsphere::credentials::UPSTREAM_SECRET;
const VS_NODE: &str = "overcast-it-id-vsphere";

/// The vsphere overlay's credentials Role, proven: the ccm and the discoverer, each with
/// its own account's token and the overlay's RBAC, log in to vcsim with upstream's
/// `vsphere-cloud-secret` read through the API (the node initialized, the discovery data
/// published), are refused nothing, use that one right — and hold no right to read any
/// other Secret. Runs when both `OVERCAST_TEST_KUBECONFIG` and `OVERCAST_TEST_VCSIM` are
/// set; says it was skipped otherwise.
#[tokio::test]
async fn vsphere_credentials_are_read_with_the_one_secret_the_overlay_grants() {
    let Some(admin_path) = real::kubeconfig("the vSphere identity test") else {
        return;
    };
    let Some(sim) = overcast_integration::vcsim::Vcsim::start(
        "the vSphere identity test",
        &["-username", "user", "-password", "pass"],
    ) else {
        return;
    };
    let _serial = overcast_integration::real::cluster_turn().await;
    let admin = real::client(&admin_path).await;
    let admin_config = Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&admin_path).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    real::apply_rbac_of(&admin, "vsphere").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let secrets: Api<Secret> = Api::namespaced(admin.clone(), VS_SECRET.0);
    let _ = secrets.delete(VS_SECRET.1, &DeleteParams::default()).await;
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": VS_SECRET.1},
                "stringData": {"127.0.0.1.username": "user", "127.0.0.1.password": "pass"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin.clone(), NS);
    let _ = leases.delete(CCM, &DeleteParams::default()).await;
    // A node VM: its guest reports the Node's name.
    let vc = {
        let mut settings = overcast_cloud_http::HttpSettings::new("vsphere");
        settings.ca_pem = Some(std::fs::read_to_string(&sim.ca_file).unwrap());
        overcast_cloud_vsphere::session::Vcenter::new(
            overcast_cloud_vsphere::session::Target {
                server: "127.0.0.1".into(),
                port: sim.port,
                login: overcast_cloud_vsphere::session::Login::Password(
                    overcast_cloud_vsphere::credentials::Credential {
                        user: "user".into(),
                        password: "pass".into(),
                    },
                ),
                keepalive: Duration::ZERO,
            },
            settings,
            None,
        )
        .unwrap()
    };
    let vm = overcast_integration::vcsim::vms(&vc).await[0].1.clone();
    overcast_integration::vcsim::set_host_name(&vc, &vm, VS_NODE).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let _ = nodes.delete(VS_NODE, &DeleteParams::default()).await;
    nodes
        .create(&PostParams::default(), &node(VS_NODE, true))
        .await
        .unwrap();
    // Upstream's INI, the credentials named, not given.
    let conf = d.join("vsphere.conf");
    std::fs::write(
        &conf,
        format!(
            "[Global]\nport = {}\nca-file = {}\nsecret-name = {}\nsecret-namespace = {}\n\
             [VirtualCenter \"127.0.0.1\"]\ndatacenters = DC0\n",
            sim.port,
            sim.ca_file.display(),
            VS_SECRET.1,
            VS_SECRET.0
        ),
    )
    .unwrap();

    let (port, ccm_heard) = recorder(anonymous(&admin_config)).await;
    let ccm_token = token(&admin, CCM).await;
    let ccm = KillOnDrop(
        Command::new(binary("ccm"))
            .arg("--cloud=vsphere")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!(
                "--kubeconfig={}",
                token_kubeconfig(d, "ccm", port, &ccm_token)
            ))
            .arg("--node-sync-period=2")
            .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    wait_for("initialization", Duration::from_secs(60), async || {
        let n = nodes.get(VS_NODE).await.ok()?;
        n.spec?.provider_id?.starts_with("vsphere://").then_some(())
    })
    .await;
    let (port, discoverer_heard) = recorder(anonymous(&admin_config)).await;
    let discoverer_token = token(&admin, DISCOVERER).await;
    let discoverer = KillOnDrop(
        Command::new(binary("discoverer"))
            .arg("--cloud=vsphere")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!(
                "--kubeconfig={}",
                token_kubeconfig(d, "discoverer", port, &discoverer_token)
            ))
            .arg("--discovery-period=1")
            .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let published: Api<Secret> = Api::namespaced(admin.clone(), NS);
    wait_for(
        "the vSphere discovery data",
        Duration::from_secs(60),
        async || {
            let s = published.get_opt(SECRET).await.ok()??;
            let doc: serde_json::Value =
                serde_json::from_slice(&s.data?.get("discovery-data.json")?.0).ok()?;
            (doc["kind"] == "VsphereCloudDiscoveryData").then_some(())
        },
    )
    .await;
    drop((ccm, discoverer));

    let read = (
        String::new(),
        "secrets".to_owned(),
        "get".to_owned(),
        VS_SECRET.1.to_owned(),
    );
    for (account, token, heard) in [
        (CCM, &ccm_token, &ccm_heard),
        (DISCOVERER, &discoverer_token, &discoverer_heard),
    ] {
        let heard = heard.lock().unwrap().clone();
        let refused: Vec<&Heard> = heard
            .iter()
            .filter(|h| h.status == 401 || h.status == 403)
            .collect();
        assert!(refused.is_empty(), "{account} was refused: {refused:?}");
        assert!(
            covered(&read, &used(&heard)),
            "{account} never read {VS_SECRET:?}: {heard:?}"
        );
        // SelfSubjectRulesReview answers for one namespace: kube-system's rights.
        let granted = rights(&as_account(&admin_config, token).await).await;
        assert!(granted.contains(&read), "{account}: {granted:?}");
        let other_secrets: Vec<&Right> = granted
            .iter()
            .filter(|r| r.1 == "secrets" && r.2 == "get")
            .filter(|r| {
                r.3 != VS_SECRET.1 && r.3 != SECRET && r.3 != "d8-provider-cluster-configuration"
            })
            .collect();
        assert!(
            other_secrets.is_empty(),
            "{account} may read other Secrets: {other_secrets:?}"
        );
    }
    let _ = nodes.delete(VS_NODE, &DeleteParams::default()).await;
    let _ = secrets.delete(VS_SECRET.1, &DeleteParams::default()).await;
    drop_vsphere_binding(&admin).await;
}

/// Unbinds the vsphere overlay's credentials Role from the ccm and the discoverer.
pub(crate) async fn drop_vsphere_binding(admin: &Client) {
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), NS);
    let _ = bindings
        .delete("overcast-vsphere-credentials", &DeleteParams::default())
        .await;
}
