//! Upgrades of the Cluster API provider with machines running, one cloud each: an earlier
//! release's `capi` (that commit's binary, built by `.ci/run`; none of this release's code
//! writes its objects) with that release's CRDs makes a machine; it is stopped as its pod
//! is on an upgrade (SIGTERM); this release's CRDs and `capi` take over the same objects.

use std::fmt::Debug;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use overcast_integration::real::wait_for;
use serde::de::DeserializeOwned;
use serde_json::json;

mod dvp;
mod zvirt;

/// The release that made the machines: before capi's CRDs took Cluster API v1beta2's
/// `initialization` for zVirt, before its DVP machines at rest were read from
/// `initialization` and capdvp's finalizer released, and before its reconciles were
/// counted by kind.
const RELEASE: &str = "688adc9";

/// However a test ends: the finalizers of its objects (in each namespace, of each kind)
/// released and the objects and namespaces deleted (kubectl), so that nothing a stopped
/// capi or the parent's simulator holds is left for a later test that deletes the CRDs to
/// wait on for good.
struct Cleanup {
    kubeconfig: String,
    namespaces: Vec<(String, &'static [&'static str])>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let kubectl = |args: &[&str]| {
            std::process::Command::new("kubectl")
                .arg(format!("--kubeconfig={}", self.kubeconfig))
                .args(args)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        for (ns, kinds) in &self.namespaces {
            for kind in *kinds {
                for object in kubectl(&["-n", ns, "get", kind, "-o", "name"]).lines() {
                    kubectl(&[
                        "-n",
                        ns,
                        "patch",
                        object,
                        "--type=merge",
                        "-p",
                        r#"{"metadata":{"finalizers":null}}"#,
                    ]);
                }
                kubectl(&["-n", ns, "delete", kind, "--all", "--wait=false"]);
            }
            kubectl(&["delete", "namespace", ns, "--wait=false"]);
        }
    }
}

/// `capi_reconciles_total{kind}` and `capi_reconcile_errors_total{kind}` on `port`, once
/// the metrics answer.
async fn reconciles(port: u16, kind: &str) -> (u64, u64) {
    wait_for("capi's metrics", Duration::from_secs(30), async || {
        let (code, text) = overcast_integration::http_get(port, "/metrics");
        (code == 200).then(|| {
            let of = |name: &str| {
                text.lines()
                    .filter(|l| l.starts_with(&format!("{name}{{kind=\"{kind}\"}}")))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                    .sum::<u64>()
            };
            (
                of("capi_reconciles_total"),
                of("capi_reconcile_errors_total"),
            )
        })
    })
    .await
}

/// This release's capi (metrics on `port`) has reconciled the machine and the cluster
/// (`kinds`: the machine's, the cluster's); then, the machine `name` touched (an
/// annotation), it reconciles it again, a few of its polls' worth, without an error.
async fn taken_over<K>(port: u16, machines: &Api<K>, name: &str, kinds: (&str, &str))
where
    K: Clone + DeserializeOwned + Debug,
{
    wait_for(
        "this release's capi reconciled the machine and the cluster",
        Duration::from_secs(60),
        async || {
            let (machine, _) = reconciles(port, kinds.0).await;
            let (cluster, _) = reconciles(port, kinds.1).await;
            (machine >= 1 && cluster >= 1).then_some(())
        },
    )
    .await;
    machines
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"overcast.dev/it-touched": "1"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        reconciles(port, kinds.0).await.1,
        0,
        "this release failed to reconcile the earlier release's machine"
    );
}
