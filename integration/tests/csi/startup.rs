//! The `csi` process ended while it starts, as a pod killed during start-up is (issue 71):
//! whatever the moment, it leaves no socket behind, and once the socket is there the
//! end is a clean one.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use overcast_integration::*;

/// `csi --mode all` on the local cloud in `dir`, its log in `dir/csi.log`.
fn spawn(dir: &Path, extra: &[String]) -> Child {
    let log = std::fs::File::create(dir.join("csi.log")).expect("log");
    let node_dir = (!extra.iter().any(|a| a.starts_with("--node-state-dir=")))
        .then(|| format!("--node-state-dir={}", dir.join("node").display()));
    Command::new(binary("csi"))
        .arg(format!(
            "--endpoint=unix://{}",
            dir.join("csi.sock").display()
        ))
        .arg(format!("--state-dir={}", dir.join("state").display()))
        .args(node_dir)
        .arg(format!("--sysfs-dir={}", dir.join("sys").display()))
        .arg(format!("--zone={ZONE}"))
        .arg(format!("--node-id={NODE_ID}"))
        .args(extra)
        .env_remove("CSI_ENDPOINT")
        .env_remove("CLOUD_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn csi")
}

fn wait_exit(child: &mut Child, dir: &Path) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "csi still runs 15 s after SIGTERM; log:\n{}",
                std::fs::read_to_string(dir.join("csi.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The socket files left in `dir` (the socket, or the temporary name it is bound under).
fn sockets_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".sock"))
        .collect()
}

#[test]
fn sigterm_at_any_moment_of_start_up_leaves_no_socket() {
    binary("csi");
    let mut after_the_socket = 0;
    for round in 0..16u64 {
        let dir = tempfile::Builder::new()
            .prefix("overcast-it-start-")
            .tempdir()
            .expect("tempdir");
        let socket = dir.path().join("csi.sock");
        let mut child = spawn(dir.path(), &[]);
        let started = Instant::now();
        // Even rounds: a moment after the spawn, 0 to 42 ms (before `main`, the runtime
        // starting, the cloud opening, the bind). Odd rounds: as soon as the socket appears.
        if round % 2 == 0 {
            std::thread::sleep(Duration::from_millis(round * 3));
        } else {
            while !socket.exists() {
                assert!(
                    started.elapsed() < Duration::from_secs(15),
                    "no socket after 15 s; log:\n{}",
                    std::fs::read_to_string(dir.path().join("csi.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let socket_was_there = socket.exists();
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
        let status = wait_exit(&mut child, dir.path());
        let log = std::fs::read_to_string(dir.path().join("csi.log")).unwrap_or_default();
        assert_eq!(
            sockets_in(dir.path()),
            Vec::<String>::new(),
            "round {round}: no socket left (signalled {:?} after the spawn, the socket {}); \
             exit {status}; log:\n{log}",
            started.elapsed(),
            if socket_was_there {
                "there"
            } else {
                "not yet there"
            },
        );
        if socket_was_there {
            after_the_socket += 1;
            assert!(
                status.success(),
                "round {round}: a SIGTERM once the socket is there is a clean end, not \
                 the signal's default action: {status} (signal {:?}); log:\n{log}",
                status.signal()
            );
        } else {
            // Before `main` only the signal's default action can end it (143, nothing
            // bound yet); from `main` on, a clean end.
            assert!(
                status.success() || status.signal() == Some(Signal::SIGTERM as i32),
                "round {round}: {status}; log:\n{log}"
            );
        }
    }
    assert!(
        after_the_socket >= 8,
        "the socket's rounds were run: {after_the_socket}"
    );
}

#[test]
fn a_start_that_fails_after_the_bind_leaves_no_socket() {
    let dir = tempfile::Builder::new()
        .prefix("overcast-it-start-")
        .tempdir()
        .expect("tempdir");
    // The node's state directory cannot be made: a file stands where its parent would.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"").unwrap();
    let mut child = spawn(
        dir.path(),
        &[format!(
            "--node-state-dir={}",
            blocker.join("node").display()
        )],
    );
    let status = wait_exit(&mut child, dir.path());
    let log = std::fs::read_to_string(dir.path().join("csi.log")).unwrap_or_default();
    assert!(!status.success(), "{status}; log:\n{log}");
    assert!(
        log.contains("open node state in"),
        "the error is said: {log}"
    );
    assert_eq!(
        sockets_in(dir.path()),
        Vec::<String>::new(),
        "the socket bound before the failure is removed; log:\n{log}"
    );
}
