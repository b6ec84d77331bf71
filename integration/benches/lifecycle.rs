//! The whole volume lifecycle through the real `csi` binary — create → attach → stage
//! (mkfs.ext4) → publish → unpublish → unstage → detach → delete, 16 MiB — against a
//! raw baseline doing the same kernel work with the standard tools (truncate, losetup,
//! mkfs.ext4, mount, mount --bind, umount, losetup -d, rm), interleaved in one run.
//!
//! `cargo build --release --bins && cargo bench -p overcast-integration --bench lifecycle`

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use overcast_integration::*;

const SIZE: i64 = 16 * MIB;

fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect("spawn");
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn baseline(dir: &Path, i: usize) -> Duration {
    let file = dir.join(format!("raw-{i}.img"));
    let staging = dir.join("raw-staging");
    let target = dir.join("raw-target");
    std::fs::create_dir_all(&staging).expect("staging");
    std::fs::create_dir_all(&target).expect("target");
    let (f, s, t) = (
        file.to_str().expect("utf8"),
        staging.to_str().expect("utf8"),
        target.to_str().expect("utf8"),
    );
    let started = Instant::now();
    sh("truncate", &["-s", "16M", f]);
    let dev = sh("losetup", &["-f", "--show", f]);
    sh("mkfs.ext4", &["-q", "-F", &dev]);
    sh("mount", &["-t", "ext4", &dev, s]);
    sh("mount", &["--bind", s, t]);
    sh("umount", &[t]);
    sh("umount", &[s]);
    sh("losetup", &["-d", &dev]);
    sh("rm", &[f]);
    started.elapsed()
}

async fn driver(c: &mut ControllerClient, n: &mut NodeClient, dir: &Path, i: usize) -> Duration {
    let started = Instant::now();
    volume_lifecycle(c, n, &format!("life-{i}"), SIZE, mount_cap("ext4"), dir).await;
    started.elapsed()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = if std::env::args().any(|a| a == "--quick") {
        10
    } else {
        60
    };
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let mut n = csi.node().await;
    let work = tempfile::tempdir().expect("tempdir");
    // One of each first, unmeasured: page cache, tool binaries, connection.
    driver(&mut c, &mut n, work.path(), 0).await;
    baseline(work.path(), 0);
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for i in 1..=runs {
        ours.push(driver(&mut c, &mut n, work.path(), i).await);
        raw.push(baseline(work.path(), i));
    }
    ours.sort();
    raw.sort();
    println!("## Volume lifecycle, 16 MiB ext4 ({runs} runs each, interleaved)\n");
    println!("| | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| csi driver (8 gRPC calls) | {} | {} |",
        ms(pct(&ours, 0.5)),
        ms(pct(&ours, 0.99))
    );
    println!(
        "| raw baseline (9 standard tools) | {} | {} |",
        ms(pct(&raw, 0.5)),
        ms(pct(&raw, 0.99))
    );
    println!(
        "\n- ratio driver/baseline: p50 {:.2}, p99 {:.2}",
        pct(&ours, 0.5).as_secs_f64() / pct(&raw, 0.5).as_secs_f64(),
        pct(&ours, 0.99).as_secs_f64() / pct(&raw, 0.99).as_secs_f64()
    );
    assert!(
        csi.loops().is_empty() && csi.disk_files().is_empty(),
        "the driver cleaned up"
    );
}
