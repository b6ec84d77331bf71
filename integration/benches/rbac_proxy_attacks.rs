//! The rbac-proxy's resource use under the three attacks of issue 13 §1, with a
//! well-behaved client measured throughout: its request latency, the proxy's resident
//! memory (start, peak, end), CPU, and the TokenReviews it sent. Baseline in the same
//! run: the same client with no attack.
//!
//! ```sh
//! cargo build --release --bins && cargo bench -p overcast-integration --bench rbac_proxy_attacks
//! ```

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_integration::attacks::{self, ATTACKER};
use overcast_integration::fake_api::FakeApi;
use overcast_integration::{binary, free_port, recording_upstream, rss_kib, KillOnDrop};

const TOKEN: &str = "bench-token";
const ATTACK: Duration = Duration::from_secs(10);

struct Row {
    name: &'static str,
    rss_start: u64,
    rss_peak: u64,
    rss_end: u64,
    cpu: f64,
    reviews: usize,
    valid: Vec<Duration>,
    failed: usize,
    note: String,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

async fn run(name: &'static str, nofile: Option<u64>, attack: u8) -> Row {
    let dir = tempfile::tempdir().expect("dir");
    let d = dir.path();
    overcast_integration::self_signed_cert(d, "tls");
    let api = FakeApi::default();
    let url = api.start().await;
    let kubeconfig = d.join("kubeconfig");
    FakeApi::kubeconfig(&url, &kubeconfig);
    api.token(TOKEN, "scraper", &[]);
    api.allow("scraper", "get", "/metrics");
    let up = recording_upstream(Arc::default()).await;
    let port = free_port();
    let mut cmd = Command::new(binary("rbac-proxy"));
    cmd.arg(format!("--secure-listen-address=127.0.0.1:{port}"))
        .arg(format!("--upstream=http://127.0.0.1:{up}/"))
        .arg(format!("--tls-cert-file={}", d.join("tls.crt").display()))
        .arg(format!(
            "--tls-private-key-file={}",
            d.join("tls.key").display()
        ))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["--tls-handshake-timeout=2", "--header-timeout=2"])
        .stderr(Stdio::null());
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs before exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    }
    let proxy = KillOnDrop(cmd.spawn().expect("spawn rbac-proxy"));
    let pid = proxy.0.id();
    let config = attacks::tls_config(&d.join("tls.crt"));
    let mut valid = loop {
        if let Ok(s) = attacks::https(port, Arc::clone(&config), [127, 0, 0, 1].into()).await {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(attacks::get(&mut valid, "/metrics", TOKEN).await, 200);
    let rss_start = rss_kib(pid);
    let cpu_start = attacks::cpu_seconds(pid);
    let reviews_start = reviews(&api);
    let started = Instant::now();

    let attacker: tokio::task::JoinHandle<String> = match attack {
        1 => tokio::spawn(async move {
            // Waves of 600 silent connections, for the whole attack.
            let mut opened = 0;
            while started.elapsed() < ATTACK {
                let idle = attacks::idle_connections(port, ATTACKER.into(), 600).await;
                opened += idle.len();
                tokio::time::sleep(Duration::from_secs(1)).await;
                drop(idle);
            }
            format!("{opened} silent connections")
        }),
        2 => tokio::spawn(async move {
            // 80 silent connections against 64 descriptors, renewed as they are closed.
            let mut opened = 0;
            while started.elapsed() < ATTACK {
                let idle = attacks::idle_connections(port, ATTACKER.into(), 80).await;
                opened += idle.len();
                tokio::time::sleep(Duration::from_secs(2)).await;
                drop(idle);
            }
            format!("{opened} silent connections, RLIMIT_NOFILE 64")
        }),
        3 => {
            let config = Arc::clone(&config);
            tokio::spawn(async move {
                let mut seen = std::collections::BTreeMap::new();
                let mut wave_no = 0;
                while started.elapsed() < ATTACK {
                    wave_no += 1;
                    let wave = attacks::token_spray(
                        port,
                        Arc::clone(&config),
                        ATTACKER.into(),
                        2000,
                        4,
                        &wave_no.to_string(),
                    )
                    .await;
                    for (k, v) in wave {
                        *seen.entry(k).or_insert(0) += v;
                    }
                }
                let total: usize = seen.values().sum();
                format!(
                    "{total} garbage tokens ({:.0}/s), answers {seen:?}",
                    total as f64 / started.elapsed().as_secs_f64()
                )
            })
        }
        _ => tokio::spawn(async { "no attack".to_owned() }),
    };
    let mut lat = Vec::new();
    let mut failed = 0;
    let mut rss_peak = rss_start;
    while started.elapsed() < ATTACK {
        let t = Instant::now();
        let status = attacks::get(&mut valid, "/metrics", TOKEN).await;
        if status == 200 {
            lat.push(t.elapsed());
        } else {
            failed += 1;
            if let Ok(s) = attacks::https(port, Arc::clone(&config), [127, 0, 0, 1].into()).await {
                valid = s;
            }
        }
        rss_peak = rss_peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let note = attacker.await.expect("attacker");
    tokio::time::sleep(Duration::from_secs(3)).await;
    lat.sort();
    Row {
        name,
        rss_start,
        rss_peak,
        rss_end: rss_kib(pid),
        cpu: attacks::cpu_seconds(pid) - cpu_start,
        reviews: reviews(&api) - reviews_start,
        valid: lat,
        failed,
        note,
    }
}

fn reviews(api: &FakeApi) -> usize {
    api.seen()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("tokenreviews"))
        .count()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows = vec![
        run("baseline: no attack", None, 0).await,
        run("silent connections", None, 1).await,
        run("descriptors exhausted", Some(64), 2).await,
        run("garbage tokens", None, 3).await,
    ];
    println!(
        "## rbac-proxy under attack ({} s each, one valid GET every 50 ms from another address)\n",
        ATTACK.as_secs()
    );
    println!("| run | RSS start | peak | end | CPU s | TokenReviews | valid GETs ok | failed | valid p50 | p99 | max |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.2} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.rss_start as f64 / 1024.0,
            r.rss_peak as f64 / 1024.0,
            r.rss_end as f64 / 1024.0,
            r.cpu,
            r.reviews,
            r.valid.len(),
            r.failed,
            ms(pct(&r.valid, 0.5)),
            ms(pct(&r.valid, 0.99)),
            ms(r.valid.last().copied().unwrap_or_default()),
        );
    }
    println!();
    for r in &rows {
        println!("- {}: {}", r.name, r.note);
    }
}
