//! `overcast-sim`: a simulated cloud on this machine, for trying Overcast's suite without
//! that cloud — the same simulators the tests run (`sim/zvirt`, `sim/kube`). Each
//! subcommand serves until SIGINT or SIGTERM and first prints, on stdout, the
//! configuration that points Overcast's services at it.
//!
//! ```sh
//! overcast-sim zvirt --listen 127.0.0.1:18480 --dir /tmp/zvirt --vm worker-0
//! overcast-sim kube --listen 127.0.0.1:18481 --kubeconfig /tmp/kube/kubeconfig
//! ```

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "overcast-sim",
    about = "A simulated cloud on this machine, printing the configuration that points Overcast's services at it"
)]
struct Cli {
    #[command(subcommand)]
    cloud: Cloud,
}

#[derive(Subcommand)]
enum Cloud {
    /// A zVirt (oVirt REST v4) engine: one data center and cluster `Default`, a storage
    /// domain `data`, the VMs asked for; disks are sparse files, attached ones loop devices
    /// linked as the guest sees them (`DIR/by-id/scsi-0QEMU_QEMU_HARDDISK_<id>`), so the
    /// node plugin formats and mounts them for real (as root).
    Zvirt {
        /// Where the API listens (`ip:port`); plain HTTP.
        #[arg(long, default_value = "127.0.0.1:18480")]
        listen: String,
        /// Where the disks, their links and the cloud-config go.
        #[arg(long, default_value = "overcast-sim-zvirt")]
        dir: PathBuf,
        /// The storage domain's size, in GiB (disks are sparse: it is what the engine
        /// reports free, not what the disk holds).
        #[arg(long, default_value_t = 100)]
        capacity_gib: u64,
        /// A VM to make (repeat for more); its id is the node plugin's `--node-id`.
        #[arg(long = "vm", default_values_t = ["worker-0".to_owned()])]
        vms: Vec<String>,
    },
    /// A small Kubernetes API server (Nodes, Services, Secrets, ConfigMaps, Leases,
    /// Events, …: list, watch, patches, server-side apply), for the ccm and the discoverer.
    /// It keeps everything in memory and authorizes everything.
    Kube {
        /// Where it listens (`ip:port`); plain HTTP.
        #[arg(long, default_value = "127.0.0.1:18481")]
        listen: String,
        /// Where to write the kubeconfig that names it.
        #[arg(long, default_value = "overcast-sim-kube.kubeconfig")]
        kubeconfig: PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cloud {
        Cloud::Zvirt {
            listen,
            dir,
            capacity_gib,
            vms,
        } => zvirt(&listen, &dir, capacity_gib, &vms).await,
        Cloud::Kube { listen, kubeconfig } => kube(&listen, &kubeconfig).await,
    }
}

async fn zvirt(
    listen: &str,
    dir: &std::path::Path,
    capacity_gib: u64,
    vms: &[String],
) -> anyhow::Result<()> {
    use overcast_sim_zvirt::{Engine, Latency, CLUSTER, DATA_CENTER};
    let (disks, by_id) = (dir.join("disks"), dir.join("by-id"));
    for d in [&disks, &by_id] {
        std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
    }
    let dir = std::fs::canonicalize(dir).with_context(|| format!("{}", dir.display()))?;
    let by_id = dir.join("by-id");
    let engine = Engine::new(
        &dir.join("disks"),
        &by_id,
        capacity_gib << 30,
        Latency::default(),
    );
    // Its loop devices go when it stops.
    let _unplug = engine.unplug_on_drop();
    let url = engine.start_on(listen).await;
    let config = engine.cloud_config(&dir);
    let text = std::fs::read_to_string(&config).with_context(|| format!("{}", config.display()))?;
    println!("# overcast-sim zvirt: an engine at {url}");
    println!(
        "# disks in {}, attached ones linked in {}",
        dir.join("disks").display(),
        by_id.display()
    );
    println!(
        "# the services' --cloud-config (written to {}):",
        config.display()
    );
    print!("{text}");
    for name in vms {
        let id = engine.add_vm(name);
        println!(
            "# VM {name}: the node plugin there runs with --cloud=zvirt --cloud-config={} --node-id={id} --zone={CLUSTER} --region={DATA_CENTER} --device-by-id-dir={}",
            config.display(),
            by_id.display()
        );
    }
    serve_until_stopped().await
}

async fn kube(listen: &str, kubeconfig: &std::path::Path) -> anyhow::Result<()> {
    let api = overcast_sim_kube::FakeApi::default();
    let url = api.start_on(listen).await;
    overcast_sim_kube::FakeApi::kubeconfig(&url, kubeconfig);
    println!("# overcast-sim kube: an API server at {url}, everything allowed");
    println!("# its kubeconfig: {}", kubeconfig.display());
    print!(
        "{}",
        std::fs::read_to_string(kubeconfig).with_context(|| format!("{}", kubeconfig.display()))?
    );
    serve_until_stopped().await
}

/// Serves until SIGINT or SIGTERM; what was made on the machine goes with the guards.
async fn serve_until_stopped() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("SIGINT handler")?,
        _ = term.recv() => {}
    }
    eprintln!("overcast-sim: stopping");
    Ok(())
}
