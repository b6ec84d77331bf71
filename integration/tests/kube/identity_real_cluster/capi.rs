//! capi's accounts: `capi --cloud dvp` and `--cloud zvirt` as Cluster API providers, and
//! `--cloud openstack|vsphere` keeping node-manager's Secret alone — each with its own
//! token and its overlay's RBAC, refused nothing and every right it holds used.

use super::*;

const CAPI: &str = "overcast-capi";
const NODE_MANAGER_NS: &str = overcast_capi::api_calls::NODE_MANAGER_NAMESPACE;

/// `capi --cloud dvp` with its own account's token and the dvp overlay's RBAC, in
/// node-manager's namespace as the manifests run it: a machine made ready and deleted,
/// node-manager's two Secrets written, the Lease taken and renewed — refused nothing,
/// and every right it holds (in kube-system and in node-manager's namespace) used.
/// Needs `OVERCAST_TEST_KUBECONFIG`; the parent is the DVP simulator on the same kit.
#[tokio::test]
async fn capi_does_its_whole_job_with_its_own_account_and_uses_every_right_it_has() {
    use overcast_integration::capi;
    use overcast_integration::dvp_sim::{self, DvpSim};
    let Some(admin_path) = real::kubeconfig("the capi identity test") else {
        return;
    };
    let _serial = overcast_integration::real::cluster_turn().await;
    let (admin, admin_config, system_secrets) = capi_setup(
        &admin_path,
        "dvp",
        &[
            "d8-node-manager-cloud-provider",
            "d8-node-manager-cloud-provider-dvp",
        ],
    )
    .await;
    dvp_sim::install_crds(&admin).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pid = std::process::id();
    let parent_ns = format!("overcast-it-id-capi-{pid}");
    let sim = DvpSim::start(admin.clone(), &parent_ns, Duration::from_millis(100)).await;
    let image = format!("overcast-it-id-{pid}");
    sim.add_image("ClusterVirtualImage", &image, 1 << 29, true)
        .await;
    let indented: String = std::fs::read_to_string(&admin_path)
        .unwrap()
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect();
    let conf = d.join("cloud-config");
    std::fs::write(
        &conf,
        format!("namespace: {parent_ns}\nkubeconfig: |\n{indented}"),
    )
    .unwrap();
    // Cluster API's part: the Cluster, the DeckhouseCluster, a Machine and its Secret.
    let cluster = format!("id-dvp-{pid}");
    let machine = format!("id-w-{pid}");
    let dyn_api = |kind: &str, plural: &str| -> Api<DynamicObject> {
        Api::namespaced_with(admin.clone(), NODE_MANAGER_NS, &capi::core(kind, plural))
    };
    capi::cluster(&admin, NODE_MANAGER_NS, &capi::DVP, &cluster, json!({})).await;
    capi::mark_provisioned_named(&admin, NODE_MANAGER_NS, &cluster).await;
    let mut spec = capi::dvp_machine_spec(&image);
    spec["cpu"]["cores"] = json!(1);
    capi::machine(
        &admin,
        NODE_MANAGER_NS,
        &capi::DVP,
        &cluster,
        &machine,
        spec,
    )
    .await;
    let dcs: Api<overcast_capi::crd::dvp::DeckhouseCluster> =
        Api::namespaced(admin.clone(), NODE_MANAGER_NS);
    let dms: Api<overcast_capi::crd::dvp::DeckhouseMachine> =
        Api::namespaced(admin.clone(), NODE_MANAGER_NS);

    // --- capi, as overcast-capi.
    let run = CapiRun::start(
        &admin,
        &admin_config,
        d,
        "dvp",
        &conf,
        &["--cluster-uuid=id-test"],
    )
    .await;
    wait_for("the machine ready", Duration::from_secs(60), async || {
        dms.get(&machine).await.ok()?.status?.ready.then_some(())
    })
    .await;
    run.delete_machine_then_check(
        &admin,
        &admin_config,
        &dms,
        &machine,
        &system_secrets,
        &[
            "d8-node-manager-cloud-provider",
            "d8-node-manager-cloud-provider-dvp",
        ],
    )
    .await;
    for name in [&machine] {
        let _ = dyn_api("Machine", "machines")
            .delete(name, &DeleteParams::default())
            .await;
    }
    let _ = dcs.delete(&cluster, &DeleteParams::default()).await;
    let _ = dyn_api("Cluster", "clusters")
        .delete(&cluster, &DeleteParams::default())
        .await;
    drop(sim);
}

/// capi as overcast-capi (its own token, through a recorder of what it asks the API
/// server) in node-manager's namespace, polling each second.
struct CapiRun {
    process: KillOnDrop,
    heard: std::sync::Arc<std::sync::Mutex<Vec<Heard>>>,
    token: String,
}

impl CapiRun {
    async fn start(
        admin: &Client,
        admin_config: &Config,
        dir: &Path,
        cloud: &str,
        conf: &Path,
        extra: &[&str],
    ) -> Self {
        let (port, heard) = recorder(anonymous(admin_config)).await;
        let token = token(admin, CAPI).await;
        let process = KillOnDrop(
            Command::new(binary("capi"))
                .arg(format!("--cloud={cloud}"))
                .arg(format!("--cloud-config={}", conf.display()))
                .arg(format!(
                    "--kubeconfig={}",
                    token_kubeconfig(dir, &format!("capi-{cloud}"), port, &token)
                ))
                .arg(format!("--namespace={NODE_MANAGER_NS}"))
                .arg("--poll-interval=1")
                .args(extra)
                .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        Self {
            process,
            heard,
            token,
        }
    }

    /// node-manager's `secrets` written, `machine` deleted and gone, capi's Lease renewed
    /// since; then capi stopped and its rights checked against what it was heard to do.
    #[allow(clippy::too_many_arguments)]
    async fn delete_machine_then_check<K>(
        self,
        admin: &Client,
        admin_config: &Config,
        machines: &Api<K>,
        machine: &str,
        system_secrets: &Api<Secret>,
        secrets: &[&str],
    ) where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        wait_for(
            "node-manager's Secrets",
            Duration::from_secs(30),
            async || {
                for s in secrets {
                    system_secrets.get_opt(s).await.ok()??;
                }
                Some(())
            },
        )
        .await;
        machines
            .delete(machine, &DeleteParams::default())
            .await
            .unwrap();
        wait_for("the machine removed", Duration::from_secs(60), async || {
            machines
                .get_opt(machine)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
        lease_renewed(&self.heard, CAPI).await;
        drop(self.process);
        let heard = self.heard.lock().unwrap().clone();
        check_capi_rights(admin, admin_config, &self.token, &heard, true).await;
    }
}

/// capi was refused nothing, and used every right it holds in kube-system and in
/// node-manager's namespace beyond what every account has; with `provider` false (its
/// Secret alone) it holds nothing of its own in node-manager's namespace.
async fn check_capi_rights(
    admin: &Client,
    admin_config: &Config,
    token_: &str,
    heard: &[Heard],
    provider: bool,
) {
    let refused: Vec<&Heard> = heard
        .iter()
        .filter(|h| h.status == 401 || h.status == 403)
        .collect();
    assert!(refused.is_empty(), "capi was refused: {refused:?}");
    let uses = used(heard);
    let account = as_account(admin_config, token_).await;
    let nobody = {
        let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
        let _ = sas
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": NOBODY}})).unwrap(),
            )
            .await;
        as_account(admin_config, &token(admin, NOBODY).await).await
    };
    for ns in [NS, NODE_MANAGER_NS] {
        let baseline = rights_in(&nobody, ns).await;
        let granted = rights_in(&account, ns).await;
        let unused: Vec<&Right> = granted
            .difference(&baseline)
            .filter(|r| !covered(r, &uses))
            .collect();
        assert!(
            unused.is_empty(),
            "capi holds rights in {ns} its whole job never used: {unused:?}"
        );
        let own = granted.difference(&baseline).next().is_some();
        if provider || ns == NS {
            assert!(own, "capi was granted nothing of its own in {ns}");
        } else {
            assert!(
                !own,
                "capi keeping node-manager's Secret alone holds rights in {ns}"
            );
        }
    }
}

/// `capi --cloud zvirt` likewise, with the zvirt overlay's RBAC and the engine simulator:
/// a machine made ready and deleted, node-manager's Secret written, the Lease renewed.
#[tokio::test]
async fn capi_on_zvirt_does_its_whole_job_with_its_own_account_and_uses_every_right_it_has() {
    use overcast_integration::capi;
    use overcast_integration::zvirt_sim::{Engine, Latency};
    let Some(admin_path) = real::kubeconfig("the capi identity test on zVirt") else {
        return;
    };
    let _serial = overcast_integration::real::cluster_turn().await;
    let (admin, admin_config, system_secrets) =
        capi_setup(&admin_path, "zvirt", &["d8-node-manager-cloud-provider"]).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (by_id, files) = (d.join("by-id"), d.join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = Engine::new(&files, &by_id, 1 << 40, Latency::default());
    engine.start().await;
    // Its loop devices go however this ends.
    let _unplug = engine.unplug_on_drop();
    engine.add_template("ubuntu-2204", 1 << 33);
    let profile = engine.add_vnic_profile("ovirtmgmt");
    let machine = format!("id-z-{}", std::process::id());
    engine.set_guest_ips_on_boot(&machine, &["10.1.0.77"]);
    let conf = engine.cloud_config(d);
    let config = overcast_cloud_zvirt::Config::load(Some(&conf), &|_| None).unwrap();
    let e = overcast_cloud_zvirt::connect(&config, None).unwrap();
    let engine_cluster = e
        .json("it", http::Method::GET, "/clusters", None)
        .await
        .unwrap()["cluster"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // An earlier run's Cluster "zvirt" (the helpers' name) goes first.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        NODE_MANAGER_NS,
        &capi::core("Cluster", "clusters"),
    );
    let zcs: Api<overcast_capi::crd::zvirt::ZvirtCluster> =
        Api::namespaced(admin.clone(), NODE_MANAGER_NS);
    let _ = zcs.delete("zvirt", &DeleteParams::default()).await;
    let _ = clusters.delete("zvirt", &DeleteParams::default()).await;
    capi::zvirt_cluster(&admin, NODE_MANAGER_NS, &engine_cluster).await;
    capi::mark_provisioned(&admin, NODE_MANAGER_NS).await;
    capi::zvirt_machine(&admin, NODE_MANAGER_NS, &machine, &profile).await;

    let run = CapiRun::start(&admin, &admin_config, d, "zvirt", &conf, &[]).await;
    let zms: Api<overcast_capi::crd::zvirt::ZvirtMachine> =
        Api::namespaced(admin.clone(), NODE_MANAGER_NS);
    wait_for("the machine ready", Duration::from_secs(90), async || {
        zms.get(&machine).await.ok()?.status?.ready.then_some(())
    })
    .await;
    run.delete_machine_then_check(
        &admin,
        &admin_config,
        &zms,
        &machine,
        &system_secrets,
        &["d8-node-manager-cloud-provider"],
    )
    .await;
    let machines: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        NODE_MANAGER_NS,
        &capi::core("Machine", "machines"),
    );
    let _ = machines.delete(&machine, &DeleteParams::default()).await;
    let _ = zcs.delete("zvirt", &DeleteParams::default()).await;
    let _ = clusters.delete("zvirt", &DeleteParams::default()).await;
}

/// What each capi identity test starts from, as the admin: node-manager's namespace,
/// Cluster API's core CRDs and `cloud`'s, only `cloud`'s overlay RBAC bound to capi, and
/// node-manager's Secrets `secrets` and capi's Lease absent (so the run creates them).
/// Answers the admin, its config and the Secrets of kube-system.
async fn capi_setup(
    admin_path: &str,
    cloud: &str,
    secrets: &[&str],
) -> (Client, Config, Api<Secret>) {
    use overcast_integration::capi;
    let admin = real::client(admin_path).await;
    let admin_config = Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(admin_path).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NODE_MANAGER_NS}})).unwrap(),
        )
        .await;
    let mut crds = capi::core_crds();
    if ["zvirt", "dvp"].contains(&cloud) {
        crds.extend(capi::provider_crds(cloud));
    }
    capi::install(&admin, &crds).await;
    unbind_capi(&admin).await;
    real::apply_rbac_of(&admin, cloud).await;
    let system_secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    for s in secrets {
        let _ = system_secrets.delete(s, &DeleteParams::default()).await;
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin.clone(), NS);
    let _ = leases.delete(CAPI, &DeleteParams::default()).await;
    (admin, admin_config, system_secrets)
}

/// Unbinds what any overlay bound to capi beyond its kube-system basics (its provider's
/// kinds, node-manager's namespace, vSphere's credentials): each test applies its own.
async fn unbind_capi(admin: &Client) {
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(admin.clone(), NODE_MANAGER_NS);
    for name in ["overcast-capi-zvirt", "overcast-capi-dvp", CAPI] {
        let _ = bindings.delete(name, &DeleteParams::default()).await;
    }
    drop_vsphere_binding(admin).await;
}

/// `capi --cloud openstack` and `--cloud vsphere`, which keep node-manager's Secret alone,
/// each with its own token and its overlay's RBAC: the Secret written (vSphere's with the
/// credentials read from upstream's Secret), the Lease renewed — refused nothing, every
/// right it holds in kube-system used, and nothing of its own in node-manager's namespace.
#[tokio::test]
async fn capi_keeping_node_manager_s_secret_alone_uses_every_right_it_has() {
    let Some(admin_path) = real::kubeconfig("the capi registration identity test") else {
        return;
    };
    let _serial = overcast_integration::real::cluster_turn().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for cloud in ["openstack", "vsphere"] {
        let (admin, admin_config, system_secrets) =
            capi_setup(&admin_path, cloud, &["d8-node-manager-cloud-provider"]).await;
        let _ = system_secrets
            .delete(
                "d8-provider-cluster-configuration",
                &DeleteParams::default(),
            )
            .await;
        let (conf, record) = if cloud == "openstack" {
            (
                "[Global]\nauth-url = https://keystone.example:5000/v3\nusername = k8s\npassword = p\ntenant-name = k8s\ndomain-name = Default\nregion = RegionOne\n",
                json!({"internalNetworkNames": ["k8s-int"], "zones": ["nova"]}),
            )
        } else {
            // Upstream's credentials Secret, this server's keys added to what it holds.
            let creds = json!({"data": {
                "vc.overcast-it.username": base64_of("k8s@vsphere.local"),
                "vc.overcast-it.password": base64_of("from-secret"),
            }});
            if system_secrets
                .patch(
                    "vsphere-cloud-secret",
                    &PatchParams::default(),
                    &Patch::Merge(&creds),
                )
                .await
                .is_err()
            {
                let mut body = creds.clone();
                body["metadata"] = json!({"name": "vsphere-cloud-secret"});
                system_secrets
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(body).unwrap(),
                    )
                    .await
                    .unwrap();
            }
            (
                "[Global]\nsecret-name = \"vsphere-cloud-secret\"\nsecret-namespace = \"kube-system\"\n\n[VirtualCenter \"vc.overcast-it\"]\ndatacenters = \"dc-1\"\n",
                json!({}),
            )
        };
        system_secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": "d8-provider-cluster-configuration"},
                    "stringData": {
                        "cloud-provider-cluster-configuration.yaml": "region: r1\nzones: [z1]\n",
                        "cloud-provider-discovery-data.json": record.to_string(),
                    },
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        let path = d.join(format!("{cloud}.conf"));
        std::fs::write(&path, conf).unwrap();
        let (port, heard) = recorder(anonymous(&admin_config)).await;
        let capi_token = token(&admin, CAPI).await;
        let process = KillOnDrop(
            Command::new(binary("capi"))
                .arg(format!("--cloud={cloud}"))
                .arg(format!("--cloud-config={}", path.display()))
                .arg(format!(
                    "--kubeconfig={}",
                    token_kubeconfig(d, &format!("capi-{cloud}"), port, &capi_token)
                ))
                .arg("--registration-period=1")
                .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let written = wait_for(
            "node-manager's Secret",
            Duration::from_secs(30),
            async || {
                system_secrets
                    .get_opt("d8-node-manager-cloud-provider")
                    .await
                    .ok()??
                    .data
            },
        )
        .await;
        assert_eq!(written["type"].0, cloud.as_bytes());
        if cloud == "vsphere" {
            let object: serde_json::Value = serde_json::from_slice(&written["vsphere"].0).unwrap();
            assert_eq!(object["password"], "from-secret");
        }
        lease_renewed(&heard, CAPI).await;
        drop(process);
        let heard = heard.lock().unwrap().clone();
        check_capi_rights(&admin, &admin_config, &capi_token, &heard, false).await;
        let _ = system_secrets
            .delete(
                "d8-provider-cluster-configuration",
                &DeleteParams::default(),
            )
            .await;
        let _ = system_secrets
            .delete("d8-node-manager-cloud-provider", &DeleteParams::default())
            .await;
    }
}

/// `s` as a Secret's `data` holds it (base64).
fn base64_of(s: &str) -> serde_json::Value {
    serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec())).unwrap()
}
