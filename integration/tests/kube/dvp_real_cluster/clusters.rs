//! One parent namespace, several clusters (issue 70): with the cluster's UUID configured,
//! what this cluster lists and reports is its own volumes — every spelling dvp-csi-driver
//! left them in — and never another cluster's, read through selectors, not filtered from
//! the namespace's every disk.

use super::*;
use overcast_cloud_dvp::machines::CLUSTER_UUID_LABEL;

pub(super) const OURS: &str = "6b4e0b5c-1d0a-4f6e-9a43-2f4b7f0c9d11";
pub(super) const THEIRS: &str = "0e9d2c4a-7b1f-4c3e-8d5a-93f1a2b4c6e8";

/// A volume disk as dvp-csi-driver makes it, its labels verbatim from dvp-common's
/// `DiskService.CreateDisk`: deckhouse/deckhouse
/// `modules/030-cloud-provider-dvp/images/dvp-common/api/disk.go`@010dec91 (the cluster's
/// UUID, empty when the driver was given none, and the host name empty: the CSI passes
/// `""`), and the earlier one that wrote `virtualDiskName` alone (`CreateDisk(ctx,
/// diskName, diskSize, diskStorageClass)`, before the cluster's UUID was passed).
pub(super) fn upstream_disk(name: &str, cluster: Option<&str>) -> VirtualDisk {
    let labels = match cluster {
        Some(uuid) => serde_json::json!({
            "deckhouse.io/managed-by": "deckhouse",
            "dvp.deckhouse.io/cluster-uuid": uuid,
            "dvp.deckhouse.io/hostname": "",
            "virtualDiskName": name,
        }),
        None => serde_json::json!({"virtualDiskName": name}),
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "virtualization.deckhouse.io/v1alpha2",
        "kind": "VirtualDisk",
        "metadata": {"name": name, "labels": labels},
        "spec": {"persistentVolumeClaim": {"size": "1Gi"}},
    }))
    .unwrap()
}

/// This cluster's volumes, made by us (labelled with the UUID) and by each dvp-csi-driver
/// (labelled with it, with it empty, without it), are listed — whole and a page of one at
/// a time — beside 6 volumes of another cluster in the same namespace that no read of
/// ours returns; every read of the disks goes with a selector. A provider given no UUID
/// lists the namespace's every volume disk, as before.
#[tokio::test]
async fn another_cluster_s_volumes_in_the_namespace_are_never_read() {
    let _turn = PARENT.lock().await;
    let Some(world) = World::new("the DVP clusters-in-one-namespace test", "clusters").await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (parent, _) = world.proxied(work.path()).await;
    let disks = DvpDisks::new(
        parent.clone().for_cluster(OURS),
        64,
        waits(Duration::from_secs(30)),
    );
    disks.create_disk(spec("pvc-ours")).await.expect("create");
    let made = world.parent.disks().get("pvc-ours").await.unwrap();
    assert_eq!(
        made.labels().get(CLUSTER_UUID_LABEL).map(String::as_str),
        Some(OURS),
        "{:?}",
        made.labels()
    );
    let mut theirs = Vec::new();
    let mut upstream = vec![
        upstream_disk("pvc-upstream-labelled", Some(OURS)),
        upstream_disk("pvc-upstream-empty", Some("")),
        upstream_disk("pvc-upstream-earlier", None),
    ];
    for i in 0..6 {
        let name = format!("pvc-theirs-{i}");
        upstream.push(upstream_disk(&name, Some(THEIRS)));
        theirs.push(name);
    }
    for vd in &upstream {
        world
            .parent
            .disks()
            .create(&PostParams::default(), vd)
            .await
            .expect("an upstream disk");
    }
    let ours = [
        "pvc-ours",
        "pvc-upstream-earlier",
        "pvc-upstream-empty",
        "pvc-upstream-labelled",
    ];
    world.sim.faults.reads.lock().unwrap().clear();

    let ids = |listed: &[overcast_cloud::Disk]| -> Vec<String> {
        listed.iter().map(|d| d.id.clone()).collect()
    };
    let listed = disks.list_disks().await.expect("list");
    assert_eq!(ids(&listed), ours, "{listed:?}");
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, more) = disks
            .list_disks_page(after.as_deref(), 1)
            .await
            .expect("a page");
        assert!(page.len() <= 1, "{page:?}");
        paged.extend(ids(&page));
        after = paged.last().cloned();
        if !more {
            break;
        }
        assert!(paged.len() <= ours.len(), "{paged:?}");
    }
    assert_eq!(paged, ours);
    let disk_reads: Vec<String> = std::mem::take(&mut *world.sim.faults.reads.lock().unwrap())
        .into_iter()
        .filter(|r| r.contains("/virtualdisks"))
        .collect();
    assert!(!disk_reads.is_empty());
    let unselected: Vec<&String> = disk_reads
        .iter()
        .filter(|r| !r.contains("cluster-uuid"))
        .collect();
    assert!(
        unselected.is_empty(),
        "the namespace's every volume disk was read: {unselected:?}"
    );

    // Given no UUID: every volume disk of the namespace, another cluster's too.
    let unconfigured = DvpDisks::new(parent, 64, waits(Duration::from_secs(30)));
    let all = ids(&unconfigured.list_disks().await.expect("list"));
    assert_eq!(all.len(), ours.len() + theirs.len(), "{all:?}");
    world.finish().await;
}
