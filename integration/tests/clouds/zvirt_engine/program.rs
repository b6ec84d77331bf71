//! `overcast-sim zvirt` as docs/quickstart.md runs it: the program prints the cloud-config
//! and each VM's node flags, the real `csi` binary started with exactly those serves a
//! volume's life on it (a disk made by the engine's API, attached, its loop device
//! formatted and mounted), and stopping the program (SIGTERM) releases its loop devices.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use overcast_integration::{
    attach_request, create_request, loops_under, mount_cap, node_publish_request, stage_request,
    Csi, KillOnDrop,
};

use super::*;

#[tokio::test]
async fn the_program_prints_a_config_the_csi_driver_serves_volumes_with() {
    let dir = tempfile::tempdir().unwrap();
    let sim_dir = dir.path().join("zvirt");
    let port = overcast_integration::free_port();
    let mut sim = KillOnDrop(
        Command::new(overcast_integration::binary("overcast-sim"))
            .args([
                "zvirt",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--vm",
                "worker-0",
            ])
            .arg("--dir")
            .arg(&sim_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    // What it prints, up to its VM's line (the last).
    let mut printed = Vec::new();
    let mut lines = BufReader::new(sim.0.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next().transpose().unwrap() {
        let last = line.starts_with("# VM worker-0:");
        printed.push(line);
        if last {
            break;
        }
    }
    let text = printed.join("\n");
    let config = std::fs::read_to_string(sim_dir.join("cloud-config")).unwrap();
    assert!(
        config.contains(&format!("server: http://127.0.0.1:{port}/ovirt-engine/api")),
        "{config}"
    );
    for line in config.lines() {
        assert!(
            printed.iter().any(|p| p == line),
            "{line} not printed:\n{text}"
        );
    }
    let flags: Vec<String> = printed
        .last()
        .unwrap()
        .split(" runs with ")
        .nth(1)
        .unwrap_or_else(|| panic!("no node flags:\n{text}"))
        .split(' ')
        .map(str::to_owned)
        .collect();
    let vm = flags
        .iter()
        .find_map(|f| f.strip_prefix("--node-id="))
        .unwrap_or_else(|| panic!("no node id:\n{text}"))
        .to_owned();

    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.push("--cluster=overcast-it");
    let driver = Csi::start(&args).await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);
    // The StorageClass's parameter, naming the engine's storage domain.
    let mut create = create_request("from-the-program", 64 << 20);
    create
        .parameters
        .insert("storageDomainName".into(), "data".into());
    let volume = c
        .create_volume(create)
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let id = volume.volume_id;
    let context = c
        .controller_publish_volume(attach_request(&id, &vm, mount_cap("ext4")))
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
    std::fs::write(target.join("hello"), b"from the engine's disk").unwrap();
    assert_eq!(
        loops_under(&sim_dir).len(),
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

    // Stopped while the disk is still attached: its loop device goes with it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sim.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = sim.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        loops_under(&sim_dir),
        vec![],
        "the program left loop devices"
    );
}

/// `overcast-sim zvirt --dir sim_dir` on `port`, its stderr to `err`; its printed node
/// flags once it has printed them.
fn start_program(
    sim_dir: &std::path::Path,
    port: u16,
    err: &std::path::Path,
) -> (KillOnDrop, Vec<String>) {
    let mut sim = KillOnDrop(
        Command::new(overcast_integration::binary("overcast-sim"))
            .args(["zvirt", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--dir")
            .arg(sim_dir)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(err).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(sim.0.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next().transpose().unwrap() {
        if let Some(flags) = line.strip_prefix("# VM worker-0: the node plugin there runs with ") {
            let flags = flags.split(' ').map(str::to_owned).collect();
            // Kept open: the program may print more.
            std::thread::spawn(move || lines.for_each(drop));
            return (sim, flags);
        }
    }
    panic!(
        "the program printed no node flags; stderr:\n{}",
        std::fs::read_to_string(err).unwrap_or_default()
    );
}

/// The engine's state lives in memory (issue 71): killed (SIGKILL) with a disk attached,
/// the next start on the same directory releases the loop device it left and says so;
/// stopped (SIGTERM) while the guest still has a disk mounted, it says so, and the kernel
/// lets the device go once it is unmounted; a taken port or a cloud-config that cannot be
/// written is an error, not a panic.
#[tokio::test]
async fn a_killed_or_interrupted_program_leaves_no_loop_device_behind() {
    let dir = tempfile::tempdir().unwrap();
    let sim_dir = dir.path().join("zvirt");
    let err = |n: u32| dir.path().join(format!("run-{n}.err"));
    let said = |n: u32| std::fs::read_to_string(err(n)).unwrap_or_default();

    // Killed with a disk attached.
    let (mut first, flags) = start_program(&sim_dir, overcast_integration::free_port(), &err(1));
    let vm = flags
        .iter()
        .find_map(|f| f.strip_prefix("--node-id="))
        .unwrap()
        .to_owned();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.push("--cluster=overcast-it");
    let driver = Csi::start(&args).await;
    let mut c = driver.controller().await;
    let mut create = create_request("left-attached", 64 << 20);
    create
        .parameters
        .insert("storageDomainName".into(), "data".into());
    let id = c
        .create_volume(create)
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    c.controller_publish_volume(attach_request(&id, &vm, mount_cap("ext4")))
        .await
        .unwrap();
    assert_eq!(loops_under(&sim_dir).len(), 1, "attached: a loop device");
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    drop(driver);
    assert_eq!(loops_under(&sim_dir).len(), 1, "SIGKILL leaves it bound");

    // The next start releases it, and says so.
    let (mut second, flags) = start_program(&sim_dir, overcast_integration::free_port(), &err(2));
    assert_eq!(
        loops_under(&sim_dir),
        vec![],
        "released at the start; stderr:\n{}",
        said(2)
    );
    assert!(
        said(2).contains("left by a run that did not stop: released"),
        "{}",
        said(2)
    );

    // Stopped while the guest has a disk mounted.
    let vm = flags
        .iter()
        .find_map(|f| f.strip_prefix("--node-id="))
        .unwrap()
        .to_owned();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.push("--cluster=overcast-it");
    let driver = Csi::start(&args).await;
    let (mut c, mut n) = (driver.controller().await, driver.node().await);
    let mut create = create_request("left-mounted", 64 << 20);
    create
        .parameters
        .insert("storageDomainName".into(), "data".into());
    let id = c
        .create_volume(create)
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let context = c
        .controller_publish_volume(attach_request(&id, &vm, mount_cap("ext4")))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    let staging = driver.dir.path().join("staging");
    std::fs::create_dir_all(&staging).unwrap();
    n.node_stage_volume(stage_request(&id, &context, &staging, mount_cap("ext4")))
        .await
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(second.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = second.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        said(2).contains("is still in use"),
        "the stop says so:\n{}",
        said(2)
    );
    assert_eq!(
        loops_under(&sim_dir).len(),
        1,
        "not taken from under the mount"
    );
    n.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: id.clone(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .unwrap();
    assert!(
        overcast_integration::eventually(std::time::Duration::from_secs(10), || {
            loops_under(&sim_dir).is_empty()
        })
        .await,
        "released once unmounted: {:?}",
        loops_under(&sim_dir)
    );
    drop(driver);

    // A taken port; a cloud-config that cannot be written (a directory in its place).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = Command::new(overcast_integration::binary("overcast-sim"))
        .args([
            "zvirt",
            "--listen",
            &taken.local_addr().unwrap().to_string(),
        ])
        .arg("--dir")
        .arg(&sim_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an error, not a panic: {stderr}"
    );
    assert!(stderr.contains("--listen"), "{stderr}");
    let unwritable = dir.path().join("unwritable");
    std::fs::create_dir_all(unwritable.join("cloud-config")).unwrap();
    let out = Command::new(overcast_integration::binary("overcast-sim"))
        .args(["zvirt", "--listen", "127.0.0.1:0", "--dir"])
        .arg(&unwritable)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an error, not a panic: {stderr}"
    );
    assert!(stderr.contains("cloud-config"), "{stderr}");
}
