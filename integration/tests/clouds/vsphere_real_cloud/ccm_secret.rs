//! The real `ccm --cloud vsphere` with upstream's YAML `vsphere.conf` naming its
//! credentials by `secretName` / `secretNamespace`: the Secret is read through the kit's API
//! server at each login, so a wrong password there keeps the node uninitialized and the
//! corrected Secret initializes it without a restart; a Secret deleted later leaves the
//! credentials last read in use (as upstream's cache), a session ended by the vCenter is
//! renewed with them.

use std::process::Stdio;

use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use overcast_integration::{free_port, http_get};
use serde_json::json;

use super::sim::{self, Guest};
use super::*;

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";
const NODE: &str = "overcast-it-vs-secret";
const SECRET: &str = "overcast-it-vs-credentials";

fn secret(password: &str) -> Secret {
    let data = [
        ("127.0.0.1.username", "user"),
        ("127.0.0.1.password", password),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

fn initialized(n: &Node) -> bool {
    !tainted(n, UNINITIALIZED)
}

fn metric(text: &str, line: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn the_ccm_logs_in_with_the_secret_that_vsphere_conf_names() {
    // This vcsim accepts one user and password (any other login is InvalidLogin).
    let Some((sim, kubeconfig, _kit)) = super::ccm::kit_and_vcsim(
        "ccm credentials from a Secret",
        &["-username", "user", "-password", "pass"],
    )
    .await
    else {
        return;
    };
    let client = overcast_integration::real::client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;

    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let vms = sim::vms(&admin).await;
    let vm = vms[0].1.clone();
    let guest = Guest {
        host_name: NODE,
        ip: "10.0.0.9",
        guest_id: "ubuntu64Guest",
        cpus: 2,
        memory_mb: 4096,
    };
    sim::reconfigure(&admin, &vm, &guest).await;
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &secret("wrong"))
        .await
        .unwrap();

    // Upstream's YAML form, no user or password in the file.
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("vsphere.yaml");
    std::fs::write(
        &conf,
        format!(
            "global:\n  port: {}\n  caFile: {}\n  secretName: {SECRET}\n  secretNamespace: default\n\
             vcenter:\n  sim:\n    server: 127.0.0.1\n    datacenters: [DC0]\n",
            sim.port,
            sim.ca_file.display()
        ),
    )
    .unwrap();
    let metrics_port = free_port();
    let log = dir.path().join("ccm.log");
    let _ccm = super::ccm::ccm(
        &conf,
        &kubeconfig,
        "overcast-it-vs-secret-ccm",
        metrics_port,
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );

    // The wrong password: logins are refused and the node stays uninitialized.
    let refused = wait("a refused login", 60, async || {
        let text = http_get(metrics_port, "/metrics").1;
        let n = metric(&text, "vsphere_api_request_errors_total{request=\"Login\"}");
        (n >= 1).then_some(text)
    })
    .await;
    assert!(
        !initialized(&nodes.get(NODE).await.unwrap()),
        "initialized with a wrong password: {refused}"
    );

    // The Secret corrected: the next login uses it, no restart.
    secrets
        .patch(
            SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"127.0.0.1.password": "pass"}})),
        )
        .await
        .unwrap();
    let got = wait("the node initialized", 90, async || {
        let n = nodes.get(NODE).await.ok()?;
        initialized(&n).then_some(n)
    })
    .await;
    assert!(got
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .is_some_and(|p| p.starts_with("vsphere://")));

    // The Secret deleted, then the session ended by the vCenter: the ccm logs in again
    // with what it last read, and sees the power-off through that session.
    secrets
        .delete(SECRET, &DeleteParams::default())
        .await
        .unwrap();
    let before = metric(
        &http_get(metrics_port, "/metrics").1,
        "vsphere_api_requests_total{request=\"Login\"}",
    );
    sim::terminate_other_sessions(&admin).await;
    sim::power_off(&admin, &vm).await;
    wait("the shutdown taint", 60, async || {
        tainted(&nodes.get(NODE).await.ok()?, SHUTDOWN_TAINT).then_some(())
    })
    .await;
    let after = metric(
        &http_get(metrics_port, "/metrics").1,
        "vsphere_api_requests_total{request=\"Login\"}",
    );
    assert!(
        after > before,
        "no login after the session ended ({before} → {after})"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("\"pass\"") && !text.contains("wrong"),
        "a password reached the log"
    );
    let _ = nodes.delete(NODE, &DeleteParams::default()).await;
}
