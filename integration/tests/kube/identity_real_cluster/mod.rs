//! One identity per program, checked on a real API server with the RBAC `deploy/` ships.
//! Runs only when `OVERCAST_TEST_KUBECONFIG` names a disposable cluster's admin
//! kubeconfig (the test applies the local overlay's ServiceAccounts, roles and bindings,
//! and makes and deletes objects named `overcast-it-id-*` and the discoverer's and ccm's
//! own objects); otherwise it says clearly that it was skipped.
//!
//! Each of `ccm`, `discoverer` and `rbac-proxy` runs with a token of its own ServiceAccount
//! (TokenRequest) through a loopback recorder in front of the API server — the audit of the
//! run. Both sides are checked:
//! - its whole job works, and the server answered none of its requests 401 or 403;
//! - every right the server grants its account (SelfSubjectRulesReview, minus what every
//!   authenticated account has) was used by some request of the run.
//!
//! The discoverer starts facing the attack of issue 13: its Secret already exists, made as a
//! `kubernetes.io/service-account-token` for the ccm's account. It must replace it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::SelfSubjectRulesReview;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret, Service, ServiceAccount};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, Config};
use overcast_integration::fake_api::Seen;
use overcast_integration::real::{
    self, anonymous, apply_rbac, as_account, recorder, token, token_kubeconfig, wait_for, Heard, NS,
};
use overcast_integration::{binary, free_port, self_signed_cert, KillOnDrop};
use serde_json::json;

mod capi;
mod vsphere;

use vsphere::drop_vsphere_binding;

const CCM: &str = "overcast-cloud-controller-manager";
const DISCOVERER: &str = "overcast-discoverer";
const PROXY: &str = "overcast-rbac-proxy";
const SCRAPER: &str = "overcast-it-id-scraper";
const NOBODY: &str = "overcast-it-id-nobody";
const SECRET: &str = "d8-cloud-provider-discovery-data";
const CONDITIONS: &str = "d8-cloud-provider-conditions";
const CATALOG: &str = "for-cluster-autoscaler";

/// Rights used only on a path a run cannot be made to take on demand, each with the test
/// that does take it: (account, (group, resource, verb, name), why).
type StaticRight = (&'static str, &'static str, &'static str, &'static str);

const RARE: &[(&str, StaticRight, &str)] = &[(
    CCM,
    ("", "nodes", "get", ""),
    "re-reads a node after a 409 conflict; services/ccm/src/nodes/tests.rs drives that path",
)];

fn right_of(r: &StaticRight) -> Right {
    (r.0.into(), r.1.into(), r.2.into(), r.3.into())
}

/// (group, resource, verb, name or "") for every resource right the account has.
type Right = (String, String, String, String);

async fn rights(c: &Client) -> BTreeSet<Right> {
    rights_in(c, NS).await
}

/// [`rights`] in namespace `ns`.
async fn rights_in(c: &Client, ns: &str) -> BTreeSet<Right> {
    let api: Api<SelfSubjectRulesReview> = Api::all(c.clone());
    let review: SelfSubjectRulesReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": ns}
    }))
    .unwrap();
    let status = api
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(
        !status.incomplete,
        "the rules review is incomplete: {status:?}"
    );
    let mut out = BTreeSet::new();
    for r in status.resource_rules {
        let names = r.resource_names.clone().unwrap_or_default();
        let names = if names.is_empty() {
            vec![String::new()]
        } else {
            names
        };
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    for n in &names {
                        out.insert((g.clone(), res.clone(), v.clone(), n.clone()));
                    }
                }
            }
        }
    }
    out
}

/// The rights a run used: each recorded request as RBAC sees it. A server-side apply
/// answered 201 created the object, and the server authorized that as a create too.
fn used(heard: &[Heard]) -> Vec<Right> {
    let mut out = Vec::new();
    for h in heard {
        let seen = Seen {
            method: h.method.clone(),
            path: h.path.clone(),
            watch: h.watch,
            body: serde_json::Value::Null,
        };
        let Some(r) = seen.rbac() else {
            continue; // discovery and other non-resource paths
        };
        let name = r.name.clone().unwrap_or_default();
        out.push((
            r.group.clone(),
            r.resource.clone(),
            r.verb.clone(),
            name.clone(),
        ));
        if h.method == "PATCH" && h.status == 201 {
            out.push((r.group, r.resource, "create".into(), name));
        }
    }
    out
}

fn covered(right: &Right, uses: &[Right]) -> bool {
    uses.iter().any(|u| {
        u.0 == right.0 && u.1 == right.1 && u.2 == right.2 && (right.3.is_empty() || u.3 == right.3)
    })
}

fn catalogs(c: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("deckhouse.io", "v1alpha1", "InstanceTypesCatalog"),
        "instancetypescatalogs",
    );
    Api::all_with(c.clone(), &resource)
}

fn curl(port: u16, ca: &Path, token: &str) -> (u16, String) {
    overcast_integration::curl_metrics(port, ca, Some(token))
}

fn node(name: &str, tainted: bool) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"taints": if tainted { json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]) } else { json!([]) }},
    }))
    .unwrap()
}

fn lb(name: &str, ip: Option<&str>) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "selector": {"app": "none"},
                 "ports": [{"port": free_port(), "protocol": "TCP"}], "loadBalancerIP": ip},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_program_does_its_whole_job_with_its_own_account_and_uses_every_right_it_has() {
    let Some(admin_path) = real::kubeconfig("the identity test") else {
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
    // What another overlay's test bound to these accounts (the vsphere overlay's
    // credentials Role) is not the local overlay's.
    drop_vsphere_binding(&admin).await;
    apply_rbac(&admin).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // Accounts of the test's own: a scraper bound to the shipped metrics-reader role, and
    // one with nothing, whose rights are what every authenticated account has.
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    for name in [SCRAPER, NOBODY] {
        let _ = sas
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
            )
            .await;
    }
    let bindings: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
        )),
    );
    bindings
        .patch(
            SCRAPER,
            &PatchParams::apply("overcast-identity-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": SCRAPER},
                "subjects": [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": NS}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "overcast-metrics-reader"},
            })),
        )
        .await
        .unwrap();

    // The state each run starts from: the discoverer's objects absent (so it creates
    // them) but for the attack Secret; the ccm's Lease absent; the ccm's test nodes.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), NS);
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;
    let _ = configmaps
        .delete(CONDITIONS, &DeleteParams::default())
        .await;
    let _ = catalogs(&admin)
        .delete(CATALOG, &DeleteParams::default())
        .await;
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": SECRET, "annotations": {"kubernetes.io/service-account.name": CCM}},
                "type": "kubernetes.io/service-account-token",
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin.clone(), NS);
    let _ = leases.delete(CCM, &DeleteParams::default()).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    for (name, tainted) in [
        ("overcast-it-id-new", true),
        ("overcast-it-id-gone", false),
        ("overcast-it-id-off", false),
    ] {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
        nodes
            .create(&PostParams::default(), &node(name, tainted))
            .await
            .unwrap();
    }
    let services: Api<Service> = Api::namespaced(admin.clone(), "default");
    for s in ["overcast-it-id-lb", "overcast-it-id-dup"] {
        let _ = services
            .patch(
                s,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = services.delete(s, &DeleteParams::default()).await;
    }

    // --- discoverer, as overcast-discoverer.
    let (port, discoverer_heard) = recorder(anonymous(&admin_config)).await;
    let discoverer_token = token(&admin, DISCOVERER).await;
    std::fs::create_dir_all(d.join("disks")).unwrap();
    let metrics_port = free_port();
    let discoverer = KillOnDrop(
        Command::new(binary("discoverer"))
            .arg(format!(
                "--kubeconfig={}",
                token_kubeconfig(d, "discoverer", port, &discoverer_token)
            ))
            .arg(format!("--state-dir={}", d.display()))
            .args(["--zone=zone-a", "--discovery-period=1"])
            .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let published = wait_for(
        "the discovery Secret, Opaque",
        Duration::from_secs(30),
        async || {
            let s = secrets.get_opt(SECRET).await.ok()??;
            (s.type_.as_deref() == Some("Opaque")).then_some(s)
        },
    )
    .await;
    assert!(
        published
            .metadata
            .annotations
            .unwrap_or_default()
            .is_empty(),
        "nothing of the attack Secret is left"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&published.data.unwrap()["discovery-data.json"].0).unwrap();
    assert_eq!(doc["zones"], json!(["zone-a"]));
    wait_for(
        "the conditions ConfigMap",
        Duration::from_secs(30),
        async || configmaps.get_opt(CONDITIONS).await.ok()?,
    )
    .await;
    wait_for(
        "the instance types catalog",
        Duration::from_secs(30),
        async || catalogs(&admin).get_opt(CATALOG).await.ok()?,
    )
    .await;

    // --- rbac-proxy, as overcast-rbac-proxy, in front of the discoverer's metrics.
    self_signed_cert(d, "tls");
    let (port, proxy_heard) = recorder(anonymous(&admin_config)).await;
    let proxy_token = token(&admin, PROXY).await;
    let (proxy, proxy_port) = real::rbac_proxy_as(d, metrics_port, port, &proxy_token);
    let ca = d.join("tls.crt");
    let scraper = token(&admin, SCRAPER).await;
    let nobody = token(&admin, NOBODY).await;
    let (code, body) = wait_for("the proxy", Duration::from_secs(20), async || {
        let r = curl(proxy_port, &ca, &scraper);
        (r.0 != 0).then_some(r)
    })
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("cloud_data_discovery_"), "{body}");
    assert_eq!(
        curl(proxy_port, &ca, &nobody).0,
        403,
        "an account without the metrics role"
    );
    assert_eq!(curl(proxy_port, &ca, "not-a-token").0, 401);

    // --- ccm, as overcast-cloud-controller-manager, on its shipped Lease.
    let instances = d.join("instances.json");
    std::fs::write(
        &instances,
        json!([
            {"name": "overcast-it-id-new", "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]},
            {"name": "overcast-it-id-off", "state": "shutdown"},
        ])
        .to_string(),
    )
    .unwrap();
    let (port, ccm_heard) = recorder(anonymous(&admin_config)).await;
    let ccm_token = token(&admin, CCM).await;
    let ccm_metrics = free_port();
    let ccm = KillOnDrop(
        Command::new(binary("ccm"))
            .arg(format!(
                "--kubeconfig={}",
                token_kubeconfig(d, "ccm", port, &ccm_token)
            ))
            .arg(format!("--instances-file={}", instances.display()))
            .args([
                "--node-name=overcast-it-id-host",
                "--zone=zone-a",
                "--region=region-1",
            ])
            .args([
                "--lb-pool=127.244.0.0/24",
                "--node-deletion-max-percent=100",
            ])
            .args([
                "--service-retry-min-delay=1s",
                "--service-retry-max-delay=2s",
            ])
            .arg(format!("--metrics-address=127.0.0.1:{ccm_metrics}"))
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    wait_for("initialization", Duration::from_secs(30), async || {
        let n = nodes.get("overcast-it-id-new").await.ok()?;
        (n.spec?.provider_id.as_deref() == Some("local://overcast-it-id-new")).then_some(())
    })
    .await;
    wait_for(
        "the gone node deleted",
        Duration::from_secs(30),
        async || {
            nodes
                .get_opt("overcast-it-id-gone")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    wait_for("the shutdown taint", Duration::from_secs(30), async || {
        nodes
            .get("overcast-it-id-off")
            .await
            .ok()?
            .spec?
            .taints?
            .iter()
            .any(|t| t.key == "node.cloudprovider.kubernetes.io/shutdown")
            .then_some(())
    })
    .await;
    services
        .create(&PostParams::default(), &lb("overcast-it-id-lb", None))
        .await
        .unwrap();
    let ip = wait_for("an ingress address", Duration::from_secs(30), async || {
        services
            .get("overcast-it-id-lb")
            .await
            .ok()?
            .status?
            .load_balancer?
            .ingress?
            .first()?
            .ip
            .clone()
    })
    .await;
    // A balancer that fails again and again: its repeated Warning is one Event patched.
    services
        .create(&PostParams::default(), &lb("overcast-it-id-dup", Some(&ip)))
        .await
        .unwrap();
    wait_for(
        "the repeated failure patched into its Event",
        Duration::from_secs(30),
        async || {
            ccm_heard
                .lock()
                .unwrap()
                .iter()
                .any(|h| h.method == "PATCH" && h.path.contains("/events/"))
                .then_some(())
        },
    )
    .await;
    for s in ["overcast-it-id-lb", "overcast-it-id-dup"] {
        services.delete(s, &DeleteParams::default()).await.unwrap();
    }
    wait_for(
        "the finalizers released",
        Duration::from_secs(30),
        async || {
            for s in ["overcast-it-id-lb", "overcast-it-id-dup"] {
                if services.get_opt(s).await.ok()?.is_some() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    // The Lease was created, then read and renewed by name.
    lease_renewed(&ccm_heard, CCM).await;
    drop((ccm, proxy, discoverer));

    // Both sides, per account.
    let baseline = rights(&as_account(&admin_config, &nobody).await).await;
    for (account, token, heard) in [
        (DISCOVERER, &discoverer_token, &discoverer_heard),
        (PROXY, &proxy_token, &proxy_heard),
        (CCM, &ccm_token, &ccm_heard),
    ] {
        let heard = heard.lock().unwrap().clone();
        assert!(heard.len() > 2, "{account}: the recorder heard {heard:?}");
        let refused: Vec<&Heard> = heard
            .iter()
            .filter(|h| h.status == 401 || h.status == 403)
            .collect();
        assert!(refused.is_empty(), "{account} was refused: {refused:?}");
        let uses = used(&heard);
        let granted = rights(&as_account(&admin_config, token).await).await;
        for (who, right, why) in RARE {
            assert!(
                *who != account || granted.contains(&right_of(right)),
                "{account}: the rarely used right {right:?} ({why}) is no longer granted: drop it from RARE"
            );
        }
        let unused: Vec<&Right> = granted
            .difference(&baseline)
            .filter(|r| !covered(r, &uses))
            .filter(|r| {
                !RARE
                    .iter()
                    .any(|(who, right, _)| *who == account && right_of(right) == **r)
            })
            .collect();
        assert!(
            unused.is_empty(),
            "{account} holds rights its whole job never used: {unused:?}"
        );
        let extra: Vec<&Right> = granted.difference(&baseline).collect();
        assert!(
            !extra.is_empty(),
            "{account} was granted nothing of its own"
        );
    }

    for name in ["overcast-it-id-new", "overcast-it-id-off"] {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
    let _ = bindings.delete(SCRAPER, &DeleteParams::default()).await;
    for name in [SCRAPER, NOBODY] {
        let _ = sas.delete(name, &DeleteParams::default()).await;
    }
}

/// Waits until the Lease `name` has been renewed (a PUT of it heard).
async fn lease_renewed(heard: &std::sync::Mutex<Vec<Heard>>, name: &str) {
    wait_for("a Lease renewal", Duration::from_secs(30), async || {
        heard
            .lock()
            .unwrap()
            .iter()
            .any(|h| h.method == "PUT" && h.path.ends_with(&format!("/leases/{name}")))
            .then_some(())
    })
    .await;
}
