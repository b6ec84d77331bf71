//! Controller benchmark of the real `csi` binary (release build) on the local cloud:
//! start-up time, resident memory idle and under load, and CreateVolume+DeleteVolume
//! pairs per second at concurrency 1, 16 and 64 with per-call p50/p99 — next to two
//! baselines measured in the same run: the raw kernel work of a pair (create a sparse
//! 16 MiB file, unlink it), the gRPC floor (Probe round trips) and the durability floor
//! (one small write + fdatasync on the state filesystem).
//!
//! With `OVERCAST_BENCH_HOSTPATH` set to a kubernetes-csi hostpath driver binary
//! (`hostpathplugin`), the same pairs run against it too, as the reference, in the same
//! run and on the same filesystem.
//!
//! `cargo build --release --bins && cargo bench -p overcast-integration --bench csi`

use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_integration::csi_v1 as csi;
use overcast_integration::*;
use tonic::transport::Channel;

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
    /// CreateVolume + DeleteVolume of one volume, as one caller sees it.
    pair: Vec<Duration>,
}

async fn create_delete(channel: &Channel, concurrency: usize, pairs: usize) -> Run {
    let per_worker = pairs / concurrency;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let mut c = csi::controller_client::ControllerClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            let mut create = Vec::with_capacity(per_worker);
            let mut delete = Vec::with_capacity(per_worker);
            let mut pair = Vec::with_capacity(per_worker);
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
                let d = t.elapsed();
                delete.push(d);
                pair.push(create[i] + d);
            }
            (create, delete, pair)
        }));
    }
    let mut create = Vec::new();
    let mut delete = Vec::new();
    let mut pair = Vec::new();
    for t in tasks {
        let (c, d, p) = t.await.expect("worker");
        create.extend(c);
        delete.extend(d);
        pair.extend(p);
    }
    let elapsed = started.elapsed();
    create.sort();
    delete.sort();
    pair.sort();
    Run {
        pairs_per_sec: (per_worker * concurrency) as f64 / elapsed.as_secs_f64(),
        create,
        delete,
        pair,
    }
}

/// A driver other than the one under test, answering on its own socket: the reference
/// (kubernetes-csi's hostpath driver) or an earlier build of ours, with its state
/// beside ours (same filesystem).
struct Other {
    label: String,
    _child: KillOnDrop,
    _dir: tempfile::TempDir,
    channel: Channel,
}

impl Other {
    /// Starts `program` with `args(socket, state dir)` and waits for Probe.
    async fn start(
        label: &str,
        program: &std::path::Path,
        beside: &std::path::Path,
        args: impl FnOnce(&std::path::Path, &std::path::Path) -> Vec<String>,
    ) -> Self {
        let dir = tempfile::tempdir_in(beside).expect("driver dir");
        let socket = dir.path().join("csi.sock");
        let child = std::process::Command::new(program)
            .args(args(&socket, &dir.path().join("state")))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let child = KillOnDrop(child);
        let started = Instant::now();
        let channel = loop {
            if let Ok(ch) = connect(&socket).await {
                let mut id = csi::identity_client::IdentityClient::new(ch.clone());
                if let Ok(r) = id.probe(csi::ProbeRequest {}).await {
                    // hostpath answers without `ready` (it means ready).
                    if r.into_inner().ready != Some(false) {
                        break ch;
                    }
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{} did not answer Probe",
                program.display()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        Self {
            label: label.to_owned(),
            _child: child,
            _dir: dir,
            channel,
        }
    }
}

impl Run {
    /// One run out of slices run at different times (rates add up by time spent).
    fn merge(runs: Vec<Run>) -> Run {
        let pairs: usize = runs.iter().map(|r| r.pair.len()).sum();
        let secs: f64 = runs
            .iter()
            .map(|r| r.pair.len() as f64 / r.pairs_per_sec)
            .sum();
        let mut out = Run {
            pairs_per_sec: pairs as f64 / secs,
            create: Vec::new(),
            delete: Vec::new(),
            pair: Vec::new(),
        };
        for r in runs {
            out.create.extend(r.create);
            out.delete.extend(r.delete);
            out.pair.extend(r.pair);
        }
        out.create.sort();
        out.delete.sort();
        out.pair.sort();
        out
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

/// The durability floor: the p50 of one 4 KiB write + fdatasync on the state filesystem
/// (a pair needs two durable commits, so two of these at the least).
fn fdatasync_p50(dir: &std::path::Path, n: usize) -> Duration {
    use std::io::Write;
    let path = dir.join("floor.bin");
    let mut f = std::fs::File::create(&path).expect("floor file");
    let block = [7u8; 4096];
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&block).expect("write");
        f.sync_data().expect("fdatasync");
        lat.push(t.elapsed());
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    lat.sort();
    percentile(&lat, 0.5)
}

/// Busy threads beside the run, as other builds on a CI machine: stop when dropped.
struct Hog(
    Arc<std::sync::atomic::AtomicBool>,
    Vec<std::thread::JoinHandle<()>>,
);

impl Hog {
    fn start(threads: usize) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handles = (0..threads)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Self(stop, handles)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in self.1.drain(..) {
            let _ = h.join();
        }
    }
}

/// gRPC round trips that do no work: the transport's ceiling.
async fn probes(channel: &Channel, concurrency: usize, calls: usize) -> (f64, Duration) {
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
    // `--concurrency=1,16` runs only those levels.
    let levels: Vec<usize> = std::env::args()
        .find_map(|a| {
            a.strip_prefix("--concurrency=")
                .map(|l| l.split(',').map(|n| n.parse().expect("a number")).collect())
        })
        .unwrap_or_else(|| vec![1, 16, 64]);

    let starts = startup_times(if quick { 3 } else { 15 }).await;
    let csi = Csi::start(&[]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = rss_kib(csi.pid());

    let raw_dir = tempfile::tempdir_in(&csi.state_dir).expect("raw dir");
    let mut others = Vec::new();
    match std::env::var_os("OVERCAST_BENCH_HOSTPATH") {
        Some(bin) => others.push(
            Other::start(
                "hostpath (reference)",
                std::path::Path::new(&bin),
                &csi.state_dir,
                |socket, state| {
                    vec![
                        format!("--endpoint=unix://{}", socket.display()),
                        "--nodeid=bench".into(),
                        format!("--statedir={}", state.display()),
                    ]
                },
            )
            .await,
        ),
        None => {
            println!("(OVERCAST_BENCH_HOSTPATH is not set: no hostpath reference in this run)\n")
        }
    }
    // Earlier builds of ours, to compare in the same run (paths separated by ':').
    for bin in std::env::var_os("OVERCAST_BENCH_BASELINE_CSI")
        .map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
        .unwrap_or_default()
    {
        let label = format!(
            "overcast, build {}",
            bin.file_name().unwrap_or_default().to_string_lossy()
        );
        others.push(
            Other::start(&label, &bin, &csi.state_dir, |socket, state| {
                vec![
                    format!("--endpoint=unix://{}", socket.display()),
                    "--node-id=bench".into(),
                    format!("--state-dir={}", state.display()),
                ]
            })
            .await,
        );
    }
    let mut drivers = vec![("overcast".to_owned(), csi.channel().await)];
    drivers.extend(others.iter().map(|o| (o.label.clone(), o.channel.clone())));
    let mut peak_rss = 0;
    // Idle, then with two busy threads beside it (the machine has two cores), as when
    // other builds load a CI machine.
    for hog in [false, true] {
        let load = if hog { "two CPU hogs running" } else { "idle" };
        println!("## CreateVolume + DeleteVolume pairs, 16 MiB volumes, {load}\n");
        println!("| concurrency | driver | pairs/s | CreateVolume p50 | p99 | DeleteVolume p50 | p99 | pair p50 | pair p99 | pair p50 / floor | GetPluginInfo p50 |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        let _hog = hog.then(|| Hog::start(2));
        let mut floors = Vec::new();
        for &concurrency in &levels {
            let n = if concurrency == 1 { pairs / 2 } else { pairs };
            // Warm up the connections and the stores.
            for (_, channel) in &drivers {
                create_delete(channel, concurrency, concurrency * 4).await;
            }
            // The drivers take turns, a slice each, so that a change in the machine's
            // load in the middle of the run weighs on all of them alike.
            const ROUNDS: usize = 4;
            let mut runs: Vec<Vec<Run>> = drivers.iter().map(|_| Vec::new()).collect();
            for _ in 0..ROUNDS {
                for (i, (_, channel)) in drivers.iter().enumerate() {
                    runs[i].push(create_delete(channel, concurrency, n / ROUNDS).await);
                }
                peak_rss = peak_rss.max(rss_kib(csi.pid()));
            }
            let raw = raw_files(raw_dir.path(), concurrency, n);
            let (_, grpc_p50) = probes(&drivers[0].1, concurrency, n * 2).await;
            let sync_p50 = fdatasync_p50(raw_dir.path(), 200);
            let floor = 2 * sync_p50 + 2 * grpc_p50;
            floors.push((concurrency, raw, grpc_p50, sync_p50, floor));
            for ((label, channel), runs) in drivers.iter().zip(runs) {
                let run = Run::merge(runs);
                let (_, rtt) = probes(channel, concurrency, n).await;
                let pair_p50 = percentile(&run.pair, 0.5);
                println!(
                    "| {concurrency} | {label} | {:.0} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
                    run.pairs_per_sec,
                    us(percentile(&run.create, 0.5)),
                    us(percentile(&run.create, 0.99)),
                    us(percentile(&run.delete, 0.5)),
                    us(percentile(&run.delete, 0.99)),
                    us(pair_p50),
                    us(percentile(&run.pair, 0.99)),
                    pair_p50.as_secs_f64() / floor.as_secs_f64(),
                    us(rtt),
                );
            }
        }
        println!("\nFloors measured in the same run ({load}): what a pair cannot go below.\n");
        println!("| concurrency | raw file pairs/s (create+size+unlink, no driver) | gRPC round trip p50 (GetPluginInfo) | 4 KiB write + fdatasync p50 | floor = 2 fdatasync + 2 gRPC |");
        println!("|---|---|---|---|---|");
        for (concurrency, raw, grpc, sync, floor) in floors {
            println!(
                "| {concurrency} | {raw:.0} | {} | {} | {} |",
                us(grpc),
                us(sync),
                us(floor)
            );
        }
        println!();
    }
    let end_rss = rss_kib(csi.pid());
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
