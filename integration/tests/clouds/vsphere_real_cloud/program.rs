//! `overcast-sim vsphere` as docs/quickstart.md runs it: the program prints the
//! vsphere.conf and each VM's node flags; the real `csi` binary started with exactly those
//! serves a volume's life (a CNS volume made, attached — a disk on the VM, a loop device
//! for the guest — formatted and mounted); `overcastctl`'s words for the publish context
//! (vSphere's `type` holds spaces) stage it; stopping the program (SIGTERM) releases its
//! loop devices and links.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use overcast_integration::{loops_under, Csi, KillOnDrop};

#[tokio::test]
async fn the_vsphere_program_prints_what_the_csi_driver_serves_volumes_with() {
    let Ok(vcsim) = std::env::var(overcast_integration::vcsim::ENV) else {
        overcast_integration::say_skipped(
            "set OVERCAST_TEST_VCSIM to the vcsim binary to run overcast-sim vsphere",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sim_dir = dir.path().join("vsphere");
    let mut sim = KillOnDrop(
        Command::new(overcast_integration::binary("overcast-sim"))
            .args(["vsphere", "--vcsim", &vcsim])
            .arg("--dir")
            .arg(&sim_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    // What it prints, up to the default inventory's last VM.
    let mut printed = Vec::new();
    let mut lines = BufReader::new(sim.0.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next().transpose().unwrap() {
        let last = line.starts_with("# VM DC0_H0_VM1:");
        printed.push(line);
        if last {
            break;
        }
    }
    let text = printed.join("\n");
    let files = sim_dir.join("files");
    // However this ends, before the program is killed: none of its loop devices stays.
    let _unplug = Unplug(files.clone());
    let conf = std::fs::read_to_string(sim_dir.join("vsphere.conf")).unwrap();
    for line in conf.lines() {
        assert!(
            printed.iter().any(|p| p == line),
            "{line} not printed:\n{text}"
        );
    }
    let flags: Vec<String> = printed
        .iter()
        .find(|l| l.starts_with("# VM DC0_H0_VM0:"))
        .unwrap_or_else(|| panic!("no DC0_H0_VM0:\n{text}"))
        .split(" runs with ")
        .nth(1)
        .unwrap()
        .split(' ')
        .map(str::to_owned)
        .collect();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.push("--cluster=overcast-it");
    let driver = Csi::start(&args).await;

    // Driven as the quickstart drives it: overcastctl, its publish context as printed.
    let ctl = |args: &[&str]| {
        let out = Command::new(overcast_integration::binary("overcastctl"))
            .arg(format!("--endpoint=unix://{}", driver.socket.display()))
            .arg("-q")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "overcastctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let id = ctl(&[
        "controller",
        "create",
        "demo",
        "--size",
        "64Mi",
        "--fs",
        "ext4",
    ]);
    let context = ctl(&["controller", "publish", &id, "--node", "DC0_H0_VM0"]);
    assert!(
        context.contains("type=vSphere CNS Block Volume"),
        "{context}"
    );
    let staging = driver.dir.path().join("staging");
    let target = driver.dir.path().join("target");
    std::fs::create_dir_all(&staging).unwrap();
    let mut stage = vec![
        "node",
        "stage",
        &id,
        "--staging",
        staging.to_str().unwrap(),
        "--fs",
        "ext4",
        "--context",
    ];
    // As an unquoted $CTX reaches it: split at every space.
    stage.extend(context.split(' '));
    ctl(&stage);
    ctl(&[
        "node",
        "publish",
        &id,
        "--staging",
        staging.to_str().unwrap(),
        "--target",
        target.to_str().unwrap(),
        "--fs",
        "ext4",
    ]);
    std::fs::write(target.join("hello"), b"from a CNS volume").unwrap();
    let attached = loops_under(&files);
    assert_eq!(attached.len(), 1, "the guest's loop device");
    ctl(&[
        "node",
        "unpublish",
        &id,
        "--target",
        target.to_str().unwrap(),
    ]);
    ctl(&[
        "node",
        "unstage",
        &id,
        "--staging",
        staging.to_str().unwrap(),
    ]);

    // A deleted volume takes its file with it (the host made it at the attach).
    let second = ctl(&[
        "controller",
        "create",
        "demo-2",
        "--size",
        "64Mi",
        "--fs",
        "ext4",
    ]);
    ctl(&["controller", "publish", &second, "--node", "DC0_H0_VM0"]);
    let file = files.join(format!("{second}.img"));
    assert!(file.exists(), "the attached volume's file");
    ctl(&["controller", "unpublish", &second, "--node", "DC0_H0_VM0"]);
    ctl(&["controller", "delete", &second]);
    assert!(!file.exists(), "the deleted volume's file stayed");

    // Stopped while the volume is still attached: its loop device and link go with it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sim.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = sim.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(loops_under(&files), vec![], "the program left loop devices");
    assert_eq!(
        std::fs::read_dir(sim_dir.join("by-id")).unwrap().count(),
        0,
        "the program left the guest's links"
    );

    // Killed (SIGKILL: nothing of it runs again), its vcsim goes with it.
    let mut again = KillOnDrop(
        Command::new(overcast_integration::binary("overcast-sim"))
            .args(["vsphere", "--vcsim", &vcsim])
            .arg("--dir")
            .arg(&sim_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    BufReader::new(again.0.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let vcsim_addr = first
        .split("vcsim at ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no vcsim address: {first}"))
        .to_owned();
    assert!(
        std::net::TcpStream::connect(&vcsim_addr).is_ok(),
        "vcsim serves"
    );
    again.0.kill().unwrap();
    again.0.wait().unwrap();
    let gone = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(&vcsim_addr).is_ok() {
        assert!(
            std::time::Instant::now() < gone,
            "vcsim at {vcsim_addr} still serves 10 s after the program was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
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
