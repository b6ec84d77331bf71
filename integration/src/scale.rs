//! What the scale benchmarks (issue 70) share: an operation's calls, bytes and time at one
//! size of the cloud, a metric read from a binary's own exposition, and the report — the
//! operations side by side at the smallest and largest size, the processes' memory, and
//! the operations whose bytes more than doubled.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::figures::ms;

/// One operation's figures at one size.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cost {
    pub calls: f64,
    pub bytes: f64,
    pub took: Duration,
}

/// What was measured at one size of the cloud.
pub struct Size {
    /// The cloud's size (VMs, servers).
    pub size: usize,
    pub ops: BTreeMap<&'static str, Cost>,
    /// Each process's VmRSS and VmHWM, KiB.
    pub rss: BTreeMap<&'static str, (u64, u64)>,
}

impl Size {
    pub fn new(size: usize) -> Self {
        Self {
            size,
            ops: BTreeMap::new(),
            rss: BTreeMap::new(),
        }
    }
}

pub fn kib(bytes: f64) -> String {
    match bytes {
        b if b >= (1 << 20) as f64 => format!("{:.2} MB", b / 1e6),
        b => format!("{:.1} KB", b / 1e3),
    }
}

/// The sum of a series' samples (every label) on the Prometheus exposition at `port`.
pub fn scrape(port: u16, series: &str) -> f64 {
    let out = std::process::Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What `f` cost, as `moved` counts calls and bytes (the cloud's front, or the process's
/// own metrics), and its time.
pub async fn measured<T>(
    moved: impl Fn() -> (f64, f64),
    f: impl std::future::Future<Output = T>,
) -> (T, Cost) {
    let (calls, bytes) = moved();
    let t = std::time::Instant::now();
    let out = f.await;
    let took = t.elapsed();
    let (calls2, bytes2) = moved();
    (
        out,
        Cost {
            calls: calls2 - calls,
            bytes: bytes2 - bytes,
            took,
        },
    )
}

/// One periodic pass of a process serving metrics at `port`: what `moved` counts over a
/// `window` divided by the passes its `count` series counted, and the time its `sum`
/// series gives a pass (its own duration, not the period).
pub async fn per_pass(
    moved: impl Fn() -> (f64, f64),
    port: u16,
    count: &str,
    sum: &str,
    window: Duration,
) -> Cost {
    assert!(
        crate::eventually(Duration::from_secs(60), || scrape(port, count) >= 2.0).await,
        "{count} counts passes"
    );
    let before = (scrape(port, count), scrape(port, sum), moved());
    tokio::time::sleep(window).await;
    let after = (scrape(port, count), scrape(port, sum), moved());
    let n = (after.0 - before.0).max(1.0);
    Cost {
        calls: (after.2 .0 - before.2 .0) / n,
        bytes: (after.2 .1 - before.2 .1) / n,
        took: Duration::from_secs_f64(((after.1 - before.1) / n).max(0.0)),
    }
}

/// The ccm's node controllers for `cloud` (a sync a second, no leader election), its
/// metrics at `port`: what the scale benchmarks measure a sync of.
pub fn ccm(cloud: &str, kubeconfig: &Path, conf: &Path, port: u16) -> crate::KillOnDrop {
    crate::KillOnDrop(
        std::process::Command::new(crate::binary("ccm"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--cloud={cloud}"))
            .arg(format!("--cloud-config={}", conf.display()))
            .arg("--controllers=node,node-lifecycle")
            .arg("--leader-elect=false")
            .arg("--node-sync-period=1")
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the ccm"),
    )
}

/// The discoverer for `cloud` (a pass a second), its metrics at `port`, with `extra`
/// arguments.
pub fn discoverer(
    cloud: &str,
    kubeconfig: &Path,
    conf: &Path,
    port: u16,
    extra: &[&str],
) -> crate::KillOnDrop {
    crate::KillOnDrop(
        std::process::Command::new(crate::binary("discoverer"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--cloud={cloud}"))
            .arg(format!("--cloud-config={}", conf.display()))
            .arg("--discovery-period=1")
            .args(extra)
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the discoverer"),
    )
}

/// Prints the operations at the first and last of `measured` (`unit`: what the size
/// counts) and the processes' memory; returns the operations whose bytes at the last size
/// are more than twice those at the first, leaving out those `by_design` names.
pub fn report(
    unit: &str,
    measured: &[Size],
    by_design: impl Fn(&str) -> bool,
) -> Vec<&'static str> {
    let (first, last) = (&measured[0], &measured[measured.len() - 1]);
    println!(
        "| op | calls {} → {} {unit} | bytes | time |",
        first.size, last.size
    );
    println!("|---|---|---|---|");
    let mut grew = Vec::new();
    for (op, a) in &first.ops {
        let b = last.ops[op];
        println!(
            "| {op} | {:.1} → {:.1} | {} → {} ({:.1}×) | {} → {} |",
            a.calls,
            b.calls,
            kib(a.bytes),
            kib(b.bytes),
            b.bytes / a.bytes.max(1.0),
            ms(a.took),
            ms(b.took)
        );
        if !by_design(op) && b.bytes > 2.0 * a.bytes {
            grew.push(*op);
        }
    }
    println!();
    println!(
        "| process | VmRSS {} → {} {unit} | VmHWM |",
        first.size, last.size
    );
    println!("|---|---|---|");
    for (p, (rss, hwm)) in &first.rss {
        let (rss2, hwm2) = last.rss[p];
        println!(
            "| {p} | {:.1} → {:.1} MiB | {:.1} → {:.1} MiB |",
            *rss as f64 / 1024.0,
            rss2 as f64 / 1024.0,
            *hwm as f64 / 1024.0,
            hwm2 as f64 / 1024.0
        );
    }
    grew
}
