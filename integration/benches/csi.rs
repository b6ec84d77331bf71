//! Controller benchmark of the real `csi` binary (release build) on the local cloud:
//! start-up time, resident memory idle and under load, and CreateVolume+DeleteVolume
//! pairs per second at concurrency 1, 16 and 64 with per-call p50/p99 — next to two
//! baselines measured in the same run: the raw kernel work of a pair (create a sparse
//! 16 MiB file, unlink it) and the gRPC floor (Probe round trips).
//!
//! `cargo build --release --bins && cargo bench -p overcast-integration --bench csi`

use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_integration::csi_v1 as csi;
use overcast_integration::*;

const VOLUME: i64 = 16 * MIB;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

struct Run {
    pairs_per_sec: f64,
    create: Vec<Duration>,
    delete: Vec<Duration>,
}

async fn create_delete(csi: &Csi, concurrency: usize, pairs: usize) -> Run {
    let channel = csi.channel().await;
    let per_worker = pairs / concurrency;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let mut c = csi::controller_client::ControllerClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            let mut create = Vec::with_capacity(per_worker);
            let mut delete = Vec::with_capacity(per_worker);
            for i in 0..per_worker {
                let t = Instant::now();
                let v = c
                    .create_volume(create_request(
                        &format!("bench-{concurrency}-{w}-{i}"),
                        VOLUME,
                    ))
                    .await
                    .expect("create")
                    .into_inner()
                    .volume
                    .expect("volume");
                create.push(t.elapsed());
                let t = Instant::now();
                c.delete_volume(delete_request(&v.volume_id))
                    .await
                    .expect("delete");
                delete.push(t.elapsed());
            }
            (create, delete)
        }));
    }
    let mut create = Vec::new();
    let mut delete = Vec::new();
    for t in tasks {
        let (c, d) = t.await.expect("worker");
        create.extend(c);
        delete.extend(d);
    }
    let elapsed = started.elapsed();
    create.sort();
    delete.sort();
    Run {
        pairs_per_sec: (per_worker * concurrency) as f64 / elapsed.as_secs_f64(),
        create,
        delete,
    }
}

/// The kernel work of a pair without the driver: create a sparse file, size it, unlink.
fn raw_files(dir: &std::path::Path, concurrency: usize, pairs: usize) -> f64 {
    let per_worker = pairs / concurrency;
    let started = Instant::now();
    std::thread::scope(|s| {
        for w in 0..concurrency {
            s.spawn(move || {
                for i in 0..per_worker {
                    let path = dir.join(format!("raw-{w}-{i}.img"));
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .expect("create");
                    f.set_len(VOLUME as u64).expect("size");
                    drop(f);
                    std::fs::remove_file(&path).expect("unlink");
                }
            });
        }
    });
    (per_worker * concurrency) as f64 / started.elapsed().as_secs_f64()
}

/// gRPC round trips that do no work: the transport's ceiling.
async fn probes(csi: &Csi, concurrency: usize, calls: usize) -> (f64, Duration) {
    let channel = csi.channel().await;
    let per_worker = calls / concurrency;
    let started = Instant::now();
    let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let mut c = csi::identity_client::IdentityClient::new(channel.clone());
        let lat = Arc::clone(&lat);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let t = Instant::now();
                c.get_plugin_info(csi::GetPluginInfoRequest {})
                    .await
                    .expect("info");
                mine.push(t.elapsed());
            }
            lat.lock().expect("lock").extend(mine);
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    let rate = (per_worker * concurrency) as f64 / started.elapsed().as_secs_f64();
    let mut lat = lat.lock().expect("lock").clone();
    lat.sort();
    (rate, percentile(&lat, 0.5))
}

async fn startup_times(runs: usize) -> Vec<Duration> {
    let mut out = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("csi.sock");
        let started = Instant::now();
        let mut child = std::process::Command::new(binary("csi"))
            .arg(format!("--endpoint=unix://{}", socket.display()))
            .arg(format!(
                "--state-dir={}",
                dir.path().join("state").display()
            ))
            .arg("--node-id=bench")
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        loop {
            if let Ok(ch) = connect(&socket).await {
                let mut id = csi::identity_client::IdentityClient::new(ch);
                if let Ok(r) = id.probe(csi::ProbeRequest {}).await {
                    if r.into_inner().ready == Some(true) {
                        break;
                    }
                }
            }
            assert!(started.elapsed() < Duration::from_secs(10), "not ready");
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        out.push(started.elapsed());
        let _ = child.kill();
        let _ = child.wait();
    }
    out.sort();
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let pairs = if quick { 640 } else { 6400 };

    let starts = startup_times(if quick { 3 } else { 15 }).await;
    let csi = Csi::start(&[]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = rss_kib(csi.pid());

    println!(
        "## csi controller on the local cloud ({} pairs per concurrency, 16 MiB volumes)\n",
        pairs
    );
    println!("| concurrency | pairs/s | CreateVolume p50 | p99 | DeleteVolume p50 | p99 | raw file pairs/s | gRPC floor calls/s (p50) |");
    println!("|---|---|---|---|---|---|---|---|");
    let raw_dir = tempfile::tempdir_in(&csi.state_dir).expect("raw dir");
    let mut peak_rss = 0;
    for concurrency in [1usize, 16, 64] {
        let n = if concurrency == 1 { pairs / 4 } else { pairs };
        // Warm up the connection and the store.
        create_delete(&csi, concurrency, concurrency * 4).await;
        let run = create_delete(&csi, concurrency, n).await;
        peak_rss = peak_rss.max(rss_kib(csi.pid()));
        let raw = raw_files(raw_dir.path(), concurrency, n);
        let (floor, floor_p50) = probes(&csi, concurrency, n * 2).await;
        println!(
            "| {concurrency} | {:.0} | {} | {} | {} | {} | {:.0} | {:.0} ({}) |",
            run.pairs_per_sec,
            us(percentile(&run.create, 0.5)),
            us(percentile(&run.create, 0.99)),
            us(percentile(&run.delete, 0.5)),
            us(percentile(&run.delete, 0.99)),
            raw,
            floor,
            us(floor_p50),
        );
    }
    let end_rss = rss_kib(csi.pid());
    println!();
    println!(
        "- ready to serve after start (spawn → first Probe ready): p50 {}, max {} over {} starts",
        us(percentile(&starts, 0.5)),
        us(*starts.last().expect("starts")),
        starts.len()
    );
    println!("- resident memory: idle {:.1} MiB, end of the concurrency-64 run {:.1} MiB (peak seen {:.1} MiB)",
        idle_rss as f64 / 1024.0, end_rss as f64 / 1024.0, peak_rss as f64 / 1024.0);
    assert!(
        csi.disk_files().is_empty(),
        "every benchmark volume was deleted"
    );
}
