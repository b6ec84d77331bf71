//! The provider conformance suite against the local cloud (root: real loop devices).

use super::*;
use async_trait::async_trait;
use overcast_cloud::conformance::{self, DiskHarness};
use std::time::Duration;

/// Detaches every loop device still backed by a file of `dir`, also when a check
/// panicked half-way.
struct Loops(PathBuf);

impl Drop for Loops {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.0) else {
            return;
        };
        for file in entries.flatten().map(|e| e.path()) {
            for index in loopdev::devices_backing(&file).unwrap_or_default() {
                let _ = loopdev::detach(index, &file);
            }
        }
    }
}

/// The local cloud's in-between states. A disk is recorded only once its file is
/// whole, so none is ever seen half-made or failed; the one it has is a delete that a
/// crash interrupted between the unlink and the record (`delete_disk`).
struct LocalStates(PathBuf);

#[async_trait]
impl conformance::DiskStates for LocalStates {
    async fn enter(&self, disk: &Disk, state: conformance::DiskState) -> bool {
        if state != conformance::DiskState::Deleting {
            return false;
        }
        let id = DiskId::parse(&disk.id).expect("a local disk id");
        std::fs::remove_file(self.0.join(id.file_name())).expect("unlink the disk's file");
        true
    }
    async fn release(&self, _disk: &Disk, _state: conformance::DiskState) {}
}

/// A local cloud in `dir` serving `node`, the harness for it (with `gone_node` as the
/// node that names no instance), and the guard that detaches what it leaves bound.
async fn harness(dir: &Path, node: &str, gone_node: &str) -> (DiskHarness, Loops) {
    let zone = Zone {
        region: "local".into(),
        zone: "local-a".into(),
    };
    let cloud = LocalCloud::open(LocalConfig {
        state_dir: dir.join("state"),
        node_name: node.into(),
        instances_file: None,
        zone: zone.clone(),
        max_attachments_per_node: 16,
    })
    .await
    .unwrap();
    let loops = Loops(cloud.disks_dir.clone());
    let disks_dir = cloud.disks_dir.clone();
    let harness = DiskHarness {
        disks: Arc::new(cloud),
        node: node.into(),
        gone_node: gone_node.into(),
        zone,
        parameters: BTreeMap::new(),
        prefix: "conformance-".into(),
        states: Some(Arc::new(LocalStates(disks_dir))),
        held_for: Duration::from_secs(2),
    };
    (harness, loops)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_cloud_passes_the_provider_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let (harness, _loops) = harness(dir.path(), "conformance-node", "no-such-node").await;
    conformance::disks(&harness).await;
    let instances =
        instances::LocalInstances::new("conformance-node".into(), harness.zone.clone(), None);
    conformance::instances(&instances, "conformance-node").await;
}

/// The suite can fail: a harness that calls a live node "gone" is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_catches_a_broken_rule() {
    let dir = tempfile::tempdir().unwrap();
    let (harness, _loops) = harness(dir.path(), "n", "n").await;
    let harness = Arc::new(harness);
    let h = Arc::clone(&harness);
    let outcome =
        tokio::spawn(async move { conformance::attach_to_a_gone_instance_is_not_found(&h).await })
            .await;
    assert!(outcome.unwrap_err().is_panic());
    // What the failed check left attached is detached before the directory goes.
    for d in harness.disks.list_disks().await.unwrap() {
        harness.disks.detach_disk(&d.id, "n").await.unwrap();
    }
}

/// Every machine of the local cloud is this one: a disk attaches to a machine the
/// instances file lists as to this host (a loop device here), survives a restart there,
/// and an instances file that cannot be read is no answer about a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_attaches_to_every_machine_the_instances_file_lists() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("instances.json");
    std::fs::write(&file, r#"[{"name": "second", "state": "running"}]"#).unwrap();
    let config = LocalConfig {
        state_dir: dir.path().join("state"),
        node_name: "first".into(),
        instances_file: Some(file.clone()),
        zone: Zone::default(),
        max_attachments_per_node: 16,
    };
    let cloud = LocalCloud::open(config.clone()).await.unwrap();
    let _loops = Loops(cloud.disks_dir.clone());
    let disk = cloud
        .create_disk(DiskSpec {
            name: "machines".into(),
            size_bytes: 16 << 20,
            zone: Zone::default(),
            parameters: BTreeMap::new(),
            metadata: BTreeMap::new(),
            source: None,
        })
        .await
        .unwrap();
    assert!(cloud.node_exists("second").await.unwrap());
    assert!(!cloud.node_exists("stranger").await.unwrap());
    let a = cloud.attach_disk(&disk.id, "second", false).await.unwrap();
    let device = a.publish_context[CTX_DEVICE_PATH].clone();
    assert!(Path::new(&device).exists(), "{device}");
    assert!(matches!(
        cloud.attach_disk(&disk.id, "stranger", false).await,
        Err(CloudError::NotFound { .. })
    ));
    // Opened again (a controller restart): the attachment keeps its device, which the
    // start-up repair would detach as a stray if it only knew this host's.
    drop(cloud);
    // The store's commit thread lets its lock go a moment after the cloud is dropped.
    let mut tries = 0;
    let cloud = loop {
        match LocalCloud::open(config.clone()).await {
            Ok(c) => break c,
            Err(e) if tries < 50 && e.to_string().contains("held by another process") => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    let again = cloud.disk(&disk.id).await.unwrap();
    assert_eq!(again.attachments.len(), 1);
    assert_eq!(
        again.attachments[0].publish_context[CTX_DEVICE_PATH],
        device
    );
    assert_eq!(again.condition, DiskCondition::Healthy);
    // The file gone: no answer (retried), never "no such node".
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(
        cloud.node_exists("second").await,
        Err(CloudError::Unavailable(_))
    ));
    assert!(cloud.node_exists("first").await.unwrap());
    cloud.detach_disk(&disk.id, "second").await.unwrap();
    assert!(
        !Path::new(&device).exists()
            || !loopdev::backs(
                device.trim_start_matches("/dev/loop").parse().unwrap(),
                &cloud
                    .disks_dir
                    .join(DiskId::parse(&disk.id).unwrap().file_name())
            )
    );
}
