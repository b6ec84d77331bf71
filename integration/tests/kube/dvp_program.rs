//! `overcast-sim dvp` as docs/quickstart.md runs it, on the kit's API server: the program
//! installs the virtualization CRDs, prints the cloud-config's place and each VM's node
//! flags; the real `csi` binary started with exactly those serves a volume's life (a
//! VirtualDisk made, attached through a VMBDA, its loop device formatted and mounted);
//! stopping the program (SIGTERM) releases its loop devices and lets go of its namespace.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use kube::api::Api;
use overcast_cloud_dvp::api::{self as dvp_api, VirtualDisk};
use overcast_integration::dvp_sim::PARENT;
use overcast_integration::{
    attach_request, create_request, csi_v1 as csi, loops_under, mount_cap, node_publish_request,
    real, stage_request, Csi, KillOnDrop,
};

const VM: &str = "overcast-it-dvp-program";

#[tokio::test]
async fn the_dvp_program_prints_what_the_csi_driver_serves_volumes_with() {
    let _parent = PARENT.lock().await;
    let _cluster = real::cluster_turn().await;
    let Some(kubeconfig) = real::kubeconfig("overcast-sim dvp") else {
        return;
    };
    let client = real::client(&kubeconfig).await;
    // What a run that failed left (its program killed, its finalizers kept).
    overcast_integration::dvp_sim::sweep(&client, "overcast-it-dvp-program-").await;
    let ns = format!("overcast-it-dvp-program-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cloud.yaml");

    // A cloud-config that cannot be written (a directory in its place) is said before
    // anything is made on the parent: an error, not a panic, and no namespace.
    let unwritable = dir.path().join("unwritable.yaml");
    std::fs::create_dir(&unwritable).unwrap();
    let out = Command::new(overcast_integration::binary("overcast-sim"))
        .args(["dvp", "--kubeconfig", &kubeconfig, "--namespace", &ns])
        .arg("--crds")
        .arg(overcast_integration::dvp_sim::crd_dir())
        .arg("--cloud-config")
        .arg(&unwritable)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an error, not a panic: {stderr}"
    );
    assert!(stderr.contains("--cloud-config"), "{stderr}");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    assert!(
        namespaces.get_opt(&ns).await.unwrap().is_none(),
        "no namespace made"
    );
    // What a run killed with a disk attached leaves in its --dir: a loop device bound to
    // a disk's file, which the next run releases and says so.
    let sim_dir = dir.path().join("sim");
    let _unplug = Unplug(sim_dir.clone());
    std::fs::create_dir_all(sim_dir.join("disks")).unwrap();
    let left = sim_dir.join("disks/left-by-a-killed-run.img");
    std::fs::File::create(&left)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    overcast_cloud_local::loopdev::attach(&left, false, "overcast-it").unwrap();
    assert_eq!(loops_under(&sim_dir).len(), 1);
    let err = dir.path().join("sim.err");
    let mut sim = KillOnDrop(
        Command::new(overcast_integration::binary("overcast-sim"))
            .args(["dvp", "--kubeconfig", &kubeconfig, "--namespace", &ns])
            .arg("--crds")
            .arg(overcast_integration::dvp_sim::crd_dir())
            .arg("--cloud-config")
            .arg(&config)
            .arg("--dir")
            .arg(&sim_dir)
            .args(["--vm", VM])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut printed = Vec::new();
    let mut lines = BufReader::new(sim.0.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next().transpose().unwrap() {
        let last = line.starts_with(&format!("# VM {VM}"));
        printed.push(line);
        if last {
            break;
        }
    }
    let text = printed.join("\n");
    let said = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(
        loops_under(&sim_dir),
        vec![],
        "released at the start: {said}"
    );
    assert!(
        said.contains("left by a run that did not stop: released"),
        "{said}"
    );
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.starts_with(&format!("namespace: {ns}\nkubeconfig: |\n")),
        "{written}"
    );
    let flags: Vec<String> = printed
        .last()
        .unwrap()
        .split(" runs with ")
        .nth(1)
        .unwrap_or_else(|| panic!("no node flags:\n{text}"))
        .split(' ')
        .map(str::to_owned)
        .collect();
    let by_id = flags
        .iter()
        .find_map(|f| f.strip_prefix("--device-by-id-dir="))
        .unwrap_or_else(|| panic!("no by-id dir:\n{text}"))
        .to_owned();
    let files = std::path::Path::new(&by_id).parent().unwrap().to_owned();
    // However this ends, before the program is killed: no loop device of its is left.
    let _unplug = Unplug(files.clone());

    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.push("--cluster=overcast-it");
    let driver = Csi::start(&args).await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);
    let id = c
        .create_volume(create_request("from-the-dvp-program", 64 << 20))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let disks: Api<VirtualDisk> =
        Api::namespaced_with(client.clone(), &ns, &dvp_api::virtual_disk());
    assert!(disks.get_opt(&id).await.unwrap().is_some(), "a VirtualDisk");
    let context = c
        .controller_publish_volume(attach_request(&id, VM, mount_cap("ext4")))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    let staging = driver.dir.path().join("staging");
    let target = driver.dir.path().join("target");
    std::fs::create_dir_all(&staging).unwrap();
    n.node_stage_volume(stage_request(&id, &context, &staging, mount_cap("ext4")))
        .await
        .unwrap();
    n.node_publish_volume(node_publish_request(
        &id,
        &context,
        &staging,
        &target,
        mount_cap("ext4"),
    ))
    .await
    .unwrap();
    std::fs::write(target.join("hello"), b"from the parent's disk").unwrap();
    let attached = loops_under(&files);
    assert_eq!(
        attached.len(),
        1,
        "the attached disk is a loop device of the program's"
    );
    n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: id.clone(),
        target_path: target.display().to_string(),
    })
    .await
    .unwrap();
    n.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: id.clone(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .unwrap();

    // Stopped while the disk is still attached: its loop device goes, and its namespace
    // is let go of (no object kept by the simulator's finalizer).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sim.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = sim.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // Asked for by number: the device, not its file, is what must be gone.
    for (index, file) in &attached {
        let bound = std::fs::read_to_string(format!("/sys/block/loop{index}/loop/backing_file"))
            .unwrap_or_default();
        assert!(
            !bound.starts_with(file.to_str().unwrap()),
            "the program left loop{index} on {}",
            file.display()
        );
    }
    let left = disks.list(&Default::default()).await.unwrap().items;
    assert!(left.is_empty(), "left in {ns}: {left:?}");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
    assert!(
        nodes.get_opt(VM).await.unwrap().is_none(),
        "its Node deleted"
    );
}

/// Detaches, when dropped, the loop devices backed by files under its directory.
struct Unplug(std::path::PathBuf);

impl Drop for Unplug {
    fn drop(&mut self) {
        for (index, file) in loops_under(&self.0) {
            let _ = overcast_cloud_local::loopdev::detach(index, &file);
        }
    }
}
