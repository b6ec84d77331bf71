//! Loop devices bound by a controller whose mount namespace is gone (a replaced
//! controller pod): the kernel then names their files from that mount's root, and the
//! next controller must still know them as its disks' — adopted, never bound twice.
//! `csi --mode controller` runs in a mount namespace of its own, seeing the state
//! directory through a bind mount at another path, as a controller pod sees its hostPath.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use overcast_integration::csi_v1 as csi;
use overcast_integration::*;

use super::lost_state::{devices_of, volume};

/// `csi --mode controller` inside its own mount namespace, seeing the state directory
/// at another path through a bind mount (a controller pod's view of the hostPath).
pub struct NamespacedController {
    pub child: Child,
    socket: PathBuf,
}

impl NamespacedController {
    pub async fn start(dir: &Path, state: &Path) -> Self {
        Self::start_with(&binary("csi"), dir, state).await
    }

    /// The same with the `csi` binary `csi` (an earlier release's).
    pub async fn start_with(csi: &Path, dir: &Path, state: &Path) -> Self {
        let view = dir.join("view");
        std::fs::create_dir_all(&view).unwrap();
        let socket = dir.join("ns-controller.sock");
        // An earlier one's, left by its kill.
        let _ = std::fs::remove_file(&socket);
        // Other tests' disks, copied in with this machine's mounts, let go first: the
        // copies would hold them busy while this controller lives.
        let script = format!(
            "sh {drop} && mount --bind {state} {view} && exec {csi} --mode=controller --state-dir={view} --endpoint=unix://{socket} --node-id={NODE_ID} --zone={ZONE} --region={REGION}",
            drop = package_dir().join("scripts/drop-loop-mounts.sh").display(),
            state = state.display(),
            view = view.display(),
            csi = csi.display(),
            socket = socket.display(),
        );
        let log = std::fs::File::create(dir.join("ns-controller.log")).unwrap();
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("unshare");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(channel) = connect(&socket).await {
                let mut identity = csi::identity_client::IdentityClient::new(channel);
                if identity
                    .probe(csi::ProbeRequest {})
                    .await
                    .is_ok_and(|r| r.into_inner().ready == Some(true))
                {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the namespaced controller did not come up: {}",
                std::fs::read_to_string(dir.join("ns-controller.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { child, socket }
    }

    pub async fn controller(&self) -> ControllerClient {
        csi::controller_client::ControllerClient::new(connect(&self.socket).await.unwrap())
    }
}

impl Drop for NamespacedController {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A disk a test beside mounted before this controller's namespace was made is free once
/// that test unmounts it, while the controller runs (the namespace's copy of the mount is
/// dropped at its start; kept, it held the device busy until the controller ended).
#[tokio::test]
async fn a_namespaced_controller_holds_no_disk_of_a_test_beside_it() {
    let mut neighbour = neighbour::NeighbourMount::new();
    let dir = tempfile::Builder::new()
        .prefix("overcast-it-ns-")
        .tempdir()
        .unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let mut ns = NamespacedController::start(dir.path(), &state).await;
    assert!(
        neighbour.unmounted_is_free(Duration::from_secs(2)),
        "the controller's mount namespace keeps the disk busy"
    );
    // Still serving: its own bind mount is there.
    ns.controller()
        .await
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap();
    let _ = ns.child.kill();
}

/// The controller that bound a volume's loop device is replaced after its mount
/// namespace went (the kernel now shows the file as `/disks/vol-….img`): the new one
/// adopts that device — one disk, one device — and the volume then grows online, the
/// device and the filesystem with it. (Before: a second device was bound to the file
/// while the first was mounted, and the growth reached only the second.)
#[tokio::test]
async fn a_replaced_controller_adopts_the_device_bound_in_a_gone_mount_namespace() {
    let dir = tempfile::Builder::new()
        .prefix("overcast-it-ns-")
        .tempdir()
        .unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let state = std::fs::canonicalize(&state).unwrap();
    let mut ns = NamespacedController::start(dir.path(), &state).await;
    let mut c = ns.controller().await;
    let Mounted {
        id,
        ctx,
        file,
        node: _node,
        mut n,
        staging,
        target,
    } = mounted(&mut c, &state, "pvc-grows", 320 * MIB, "xfs").await;
    assert_eq!(devices_of(&file).len(), 1);
    std::fs::write(target.join("data"), b"before the replacement").unwrap();

    // The controller's pod goes, and its mount namespace with it.
    let _ = ns.child.kill();
    let _ = ns.child.wait();
    drop(ns);
    let shown = std::fs::read_to_string(format!(
        "/sys/block/{}/loop/backing_file",
        devices_of(&file)[0].trim_start_matches("/dev/")
    ))
    .unwrap();
    assert_eq!(
        shown.trim(),
        format!("/disks/{id}.img"),
        "the kernel names the file from the gone mount's root"
    );

    let controller = Csi::start(&[
        "--mode=controller",
        &format!("--state-dir={}", state.display()),
    ])
    .await;
    assert_eq!(
        devices_of(&file).len(),
        1,
        "one disk, one loop device: {:?}",
        devices_of(&file)
    );
    let mut c = controller.controller().await;
    let again = c
        .controller_publish_volume(publish_request(&id, false))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    assert_eq!(
        again["devicePath"], ctx["devicePath"],
        "publish answers the device the mount is on"
    );
    // kubelet stages again with the new controller's context: the same mount.
    n.node_stage_volume(stage_request(&id, &again, &staging, mount_cap("xfs")))
        .await
        .expect("the node finds the device by the file's identity");

    let grown = 640 * MIB;
    c.controller_expand_volume(expand_request(&id, grown))
        .await
        .unwrap();
    let index: u32 = again["devicePath"]
        .trim_start_matches("/dev/loop")
        .parse()
        .unwrap();
    assert_eq!(
        block_size_bytes(index) as i64,
        grown,
        "the mounted device grew"
    );
    let got = n
        .node_expand_volume(csi::NodeExpandVolumeRequest {
            volume_id: id.clone(),
            volume_path: target.display().to_string(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: grown,
                limit_bytes: 0,
            }),
            staging_target_path: staging.display().to_string(),
            volume_capability: Some(mount_cap("xfs")),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.capacity_bytes, grown);
    let st = nix::sys::statvfs::statvfs(&target).unwrap();
    assert!(
        st.blocks() as u64 * st.fragment_size() as u64 > 500 << 20,
        "the filesystem grew"
    );
    assert_eq!(
        std::fs::read(target.join("data")).unwrap(),
        b"before the replacement"
    );

    unmounted_and_deleted(&mut n, &mut c, &id, &staging, &target, &file).await;
}

/// The release whose controller binds a file twice when it is restarted under an attached
/// disk (its start-up matched loop devices by their path alone, and a device a gone mount
/// namespace bound shows another path): a downgrade to it, or any restart of its
/// controller pod, leaves that.
const DOUBLE_BINDER: &str = "688adc9";

/// State 688adc9 itself leaves: its controller pod, in a namespace of its own, attaches a
/// volume the node stages and mounts; the pod is replaced twice, and the second start
/// binds the file to a second device (that release's own binary, run to show it). This
/// release's controller then starts on that state: one device per disk again — the one
/// the mount is on, recorded and answered by publish — the other detached; then the
/// volume's life goes on to its delete.
#[tokio::test]
async fn a_disk_688adc9_bound_twice_is_kept_on_the_device_in_use() {
    let what = "the repair of a disk an earlier release bound twice";
    let Some(old) = overcast_integration::release::get(DOUBLE_BINDER, what) else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("overcast-it-ns2-")
        .tempdir()
        .unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let state = std::fs::canonicalize(&state).unwrap();
    let mut ns = NamespacedController::start_with(&old.bin("csi"), dir.path(), &state).await;
    let mut c = ns.controller().await;
    let Mounted {
        id,
        ctx,
        file,
        node: _node,
        mut n,
        staging,
        target,
    } = mounted(&mut c, &state, "pvc-twice", 64 * MIB, "ext4").await;
    std::fs::write(target.join("data"), b"written through the first device").unwrap();
    let mounted = ctx["devicePath"].clone();

    // Its pod replaced, twice: the second start binds the file again.
    let _ = ns.child.kill();
    let _ = ns.child.wait();
    drop(ns);
    let mut again = NamespacedController::start_with(&old.bin("csi"), dir.path(), &state).await;
    let doubled = devices_of(&file);
    let _ = again.child.kill();
    let _ = again.child.wait();
    drop(again);
    assert_eq!(
        doubled.len(),
        2,
        "{DOUBLE_BINDER}'s restarted controller bound the file a second time: {doubled:?}"
    );

    // This release: one device, the one in use.
    let controller = Csi::start(&[
        "--mode=controller",
        &format!("--state-dir={}", state.display()),
    ])
    .await;
    assert_eq!(
        devices_of(&file),
        vec![mounted.clone()],
        "the device the mount is on kept, the other detached"
    );
    let mut c = controller.controller().await;
    let answered = c
        .controller_publish_volume(publish_request(&id, false))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    assert_eq!(
        answered["devicePath"], mounted,
        "publish answers the device in use"
    );
    assert_eq!(
        std::fs::read(target.join("data")).unwrap(),
        b"written through the first device"
    );
    unmounted_and_deleted(&mut n, &mut c, &id, &staging, &target, &file).await;
}

/// A volume made and attached by the controller `c`, staged (`fs`) and published by a
/// node plugin of this release on `state`.
struct Mounted {
    id: String,
    ctx: HashMap<String, String>,
    file: PathBuf,
    /// The node plugin, serving while this lives.
    node: Csi,
    n: NodeClient,
    staging: PathBuf,
    target: PathBuf,
}

async fn mounted(
    c: &mut ControllerClient,
    state: &Path,
    name: &str,
    bytes: i64,
    fs: &str,
) -> Mounted {
    let id = volume(c, name, bytes).await;
    let ctx = c
        .controller_publish_volume(publish_request(&id, false))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    let file = state.join("disks").join(format!("{id}.img"));
    let node = Csi::start(&["--mode=node", &format!("--state-dir={}", state.display())]).await;
    let mut n = node.node().await;
    let staging = node.dir.path().join("staging");
    let target = node.dir.path().join("target");
    std::fs::create_dir_all(&staging).unwrap();
    n.node_stage_volume(stage_request(&id, &ctx, &staging, mount_cap(fs)))
        .await
        .unwrap();
    n.node_publish_volume(node_publish_request(
        &id,
        &ctx,
        &staging,
        &target,
        mount_cap(fs),
    ))
    .await
    .unwrap();
    Mounted {
        id,
        ctx,
        file,
        node,
        n,
        staging,
        target,
    }
}

/// The volume unpublished, unstaged, detached — no loop device left — and deleted.
async fn unmounted_and_deleted(
    n: &mut NodeClient,
    c: &mut ControllerClient,
    id: &str,
    staging: &Path,
    target: &Path,
    file: &Path,
) {
    n.node_unpublish_volume(node_unpublish_request(id, target))
        .await
        .unwrap();
    n.node_unstage_volume(unstage_request(id, staging))
        .await
        .unwrap();
    detach_as_the_attacher(c, id).await;
    assert!(devices_of(file).is_empty());
    c.delete_volume(delete_request(id)).await.unwrap();
}
