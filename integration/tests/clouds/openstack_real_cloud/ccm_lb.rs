//! The real `ccm --cloud openstack` serving a `type: LoadBalancer` Service of the kit's
//! API server on the simulator's real Octavia: the Service gets the load balancer's
//! address and OCCM's annotations, the members follow the Ready nodes, an annotation
//! change reaches the listener, and deleting the Service deletes the load balancer
//! before the Service goes. Needs `OVERCAST_TEST_KUBECONFIG` besides the openrc.

use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::{Node, Service as KubeService};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use overcast_integration::{binary, free_port, KillOnDrop};

use super::ccm::{kubeconfig, wait};
use super::lb_help::*;
use super::*;

const NAME: &str = "overcast-it-lb-web";
const NODE_PREFIX: &str = "overcast-it-lb-";

/// A Node a kubelet keeps Ready, at `address`.
async fn ready_node(nodes: &Api<Node>, name: &str, address: &str) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
}

/// Removes what an earlier run left in the cluster: our nodes, and our Service (its
/// finalizer taken off, no ccm is running now to do it).
async fn clean(nodes: &Api<Node>, services: &Api<KubeService>) {
    for n in nodes.list(&Default::default()).await.expect("nodes") {
        let name = n.metadata.name.unwrap_or_default();
        if name.starts_with(NODE_PREFIX) {
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
        }
    }
    if services.get_opt(NAME).await.expect("service").is_some() {
        let _ = services
            .patch(
                NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = services.delete(NAME, &DeleteParams::default()).await;
    }
}

/// Runs [`clean`] when the test ends, however it ends: its Service (with the ccm's
/// finalizer) and its Ready nodes left in the kit's API server were met by the tests after
/// it in the cluster turn (CI18: Octavia stuck, this test failed, and the kube lane's ccm
/// tests reconciled its Service and counted its nodes).
struct CleanOnDrop(String);

impl Drop for CleanOnDrop {
    fn drop(&mut self) {
        let kubeconfig = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let client = overcast_integration::real::client(&kubeconfig).await;
                let nodes: Api<Node> = Api::all(client.clone());
                let services: Api<KubeService> = Api::namespaced(client, "default");
                clean(&nodes, &services).await;
            });
        })
        .join();
    }
}

#[tokio::test]
async fn the_ccm_gives_a_service_an_octavia_load_balancer_and_follows_its_nodes() {
    let _turn = CLOUD.lock().await;
    let _cluster = overcast_integration::real::cluster_turn().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    let Some(kubeconfig) = kubeconfig() else {
        return;
    };
    // Dropped before the cluster turn ends and after the ccm is killed.
    let _clean = CleanOnDrop(kubeconfig.clone());
    sweep(&cloud).await;
    let client = overcast_integration::real::client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let services: Api<KubeService> = Api::namespaced(client, "default");
    clean(&nodes, &services).await;
    ready_node(&nodes, "overcast-it-lb-a", "10.0.0.221").await;

    // The operator's cloud.conf, and the simulator's need for serial calls (lb_help).
    let dir = tempfile::tempdir().unwrap();
    let conf = cloud_conf_through_login_cache(&cloud.env, dir.path());
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str(&format!(
        "[LoadBalancer]\nsubnet-id = {}\nprovider-requires-serial-api-calls = true\n",
        cloud.env["OSSIM_SUBNET_ID"]
    ));
    std::fs::write(&conf, text).unwrap();
    let _ccm = KillOnDrop(
        Command::new(binary("ccm"))
            .arg("--cloud=openstack")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--cluster-name={CLUSTER}"))
            .arg("--controllers=service")
            .arg("--leader-elect-lease-name=overcast-it-os-lb")
            .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ccm"),
    );

    let svc: KubeService = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "annotations": {
            "service.beta.kubernetes.io/openstack-internal-load-balancer": "true"}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "none"},
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("service");
    let (ip, lb_id) = wait(
        "the Service's address and load-balancer-id",
        120,
        async || {
            let s = services.get(NAME).await.ok()?;
            let ip = s.status?.load_balancer?.ingress?.first()?.ip.clone()?;
            let id = s
                .metadata
                .annotations?
                .get("loadbalancer.openstack.org/load-balancer-id")?
                .clone();
            Some((ip, id))
        },
    )
    .await;
    let svc = services.get(NAME).await.unwrap();
    let node_port = svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
        .node_port
        .unwrap() as u64;
    let name = format!("kube_service_{CLUSTER}_default_{NAME}");
    let found = named(&cloud, &name).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["id"], lb_id.as_str());
    assert_eq!(found[0]["vip_address"], ip.as_str());
    assert_eq!(
        svc.metadata.annotations.as_ref().unwrap()
            ["loadbalancer.openstack.org/load-balancer-address"],
        ip
    );
    assert!(svc
        .metadata
        .finalizers
        .unwrap_or_default()
        .contains(&"service.kubernetes.io/load-balancer-cleanup".to_owned()));
    assert_eq!(
        members(&cloud, &lb_id, 80).await,
        vec![("overcast-it-lb-a".into(), "10.0.0.221".into(), node_port)]
    );

    // A second Ready node: a member of the pool.
    ready_node(&nodes, "overcast-it-lb-b", "10.0.0.222").await;
    wait("the second node as a member", 120, async || {
        (members(&cloud, &lb_id, 80).await.len() == 2).then_some(())
    })
    .await;

    // An annotation change reaches the listener.
    services
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "loadbalancer.openstack.org/timeout-client-data": "1234"}}})),
        )
        .await
        .expect("annotate");
    wait("the listener's new timeout", 120, async || {
        let l = listeners(&cloud, &lb_id).await;
        (l.len() == 1 && l[0]["timeout_client_data"] == 1234).then_some(())
    })
    .await;

    // Deleted: the load balancer first, then the Service lets go.
    services
        .delete(NAME, &DeleteParams::default())
        .await
        .expect("delete");
    wait("the Service gone", 180, async || {
        services.get_opt(NAME).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        named(&cloud, &name).await.is_empty(),
        "the Service went before its load balancer"
    );
    clean(&nodes, &services).await;
}
