//! What a simulator that stopped mid-test leaves behind, let go of.

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume};
use kube::api::DeleteParams;
use kube::{Api, Client, ResourceExt};
use overcast_cloud_dvp::api::{self, VirtualDisk, VirtualMachine, Vmbda};

use super::{delete_nodes, remove_finalizer, SIM_LABEL};

/// Lets go of what a simulator that stopped mid-test (a failed test) left in namespaces
/// named `<prefix><run>` (`run` a process id, digits only): its finalizers, then the
/// namespaces. Nothing else acts on them. Only digits: a test's prefix may begin
/// another's (`…-takeover-` and `…-takeover-base-`), and a bare `starts_with` swept a
/// running neighbour's namespace from under it.
pub async fn sweep(client: &Client, prefix: &str) {
    sweep_where(client, prefix, |n| a_run_of(prefix, n)).await
}

/// Whether namespace `name` is `<prefix><digits>`.
fn a_run_of(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|run| !run.is_empty() && run.bytes().all(|b| b.is_ascii_digit()))
}

/// [`sweep`] of the one namespace `namespace` (`overcast-sim dvp` at its start and stop:
/// its disks' files are gone with the process that made them).
pub async fn sweep_namespace(client: &Client, namespace: &str) {
    sweep_where(client, namespace, |n| n == namespace).await
}

async fn sweep_where(client: &Client, prefix: &str, chosen: impl Fn(&str) -> bool) {
    let ns: Api<Namespace> = Api::all(client.clone());
    let Ok(list) = ns.list(&Default::default()).await else {
        return;
    };
    for n in list
        .items
        .iter()
        .map(|n| n.name_any())
        .filter(|n| chosen(n))
    {
        let disks: Api<VirtualDisk> =
            Api::namespaced_with(client.clone(), &n, &api::virtual_disk());
        let vmbdas: Api<Vmbda> = Api::namespaced_with(client.clone(), &n, &api::vmbda());
        let vms: Api<VirtualMachine> =
            Api::namespaced_with(client.clone(), &n, &api::virtual_machine());
        for v in vms
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let _ = remove_finalizer(&vms, &v).await;
        }
        for v in vmbdas
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let _ = remove_finalizer(&vmbdas, &v).await;
            let _ = vmbdas.delete(&v.name_any(), &DeleteParams::default()).await;
        }
        let snapshots: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), &n, &api::virtual_disk_snapshot());
        for s in snapshots
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let _ = remove_finalizer(&snapshots, &s).await;
            let _ = snapshots
                .delete(&s.name_any(), &DeleteParams::default())
                .await;
        }
        for d in disks
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let _ = remove_finalizer(&disks, &d).await;
            let _ = disks.delete(&d.name_any(), &DeleteParams::default()).await;
        }
        let _ = ns.delete(&n, &DeleteParams::default()).await;
    }
    delete_nodes(client, prefix).await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for pv in pvs
        .list(&kube::api::ListParams::default().labels(SIM_LABEL))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if pv.labels().get(SIM_LABEL).is_some_and(|ns| chosen(ns)) {
            let _ = pvs.delete(&pv.name_any(), &DeleteParams::default()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::a_run_of;

    #[test]
    fn a_prefix_sweeps_its_own_runs_and_not_a_longer_test_s() {
        let p = "overcast-it-tf-takeover-";
        assert!(a_run_of(p, "overcast-it-tf-takeover-20084"));
        assert!(!a_run_of(p, "overcast-it-tf-takeover-base-20084"));
        assert!(!a_run_of(p, "overcast-it-tf-takeover-"));
        assert!(!a_run_of(p, "overcast-it-tf-upgrade-20084"));
    }
}
