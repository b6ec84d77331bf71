//! `overcast-sim`: a simulated cloud on this machine, for trying Overcast's suite without
//! that cloud — the same simulators the tests run (`sim/zvirt`, `sim/kube`, `sim/dvp`,
//! `sim/vsphere`). Each
//! subcommand serves until SIGINT or SIGTERM and first prints, on stdout, the
//! configuration that points Overcast's services at it.
//!
//! ```sh
//! overcast-sim zvirt --listen 127.0.0.1:18480 --dir /tmp/zvirt --vm worker-0
//! overcast-sim kube --listen 127.0.0.1:18481 --kubeconfig /tmp/kube/kubeconfig
//! overcast-sim dvp --kubeconfig /tmp/kube/admin.kubeconfig --crds ../shared/kit/crds/virtualization
//! overcast-sim vsphere --vcsim /path/to/vcsim --dir /tmp/vsphere
//! ```

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "overcast-sim",
    version,
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
    /// A DVP parent cluster on a real Kubernetes API server (the kit's `kube-up.sh`, or
    /// any disposable cluster): the `virtualization.deckhouse.io` CRDs installed, and in
    /// the namespace a controller doing what DVP's disk, attachment and VM controllers do
    /// (from their source) — disks are sparse files, attached ones loop devices linked as
    /// the guest sees them (`<by-id>/scsi-0QEMU_QEMU_HARDDISK_<md5 of the disk's uid>`),
    /// so the node plugin formats and mounts them for real (as root). The same API server
    /// plays this cluster too: each VM's Node is made there. On stop the namespace is let
    /// go of (its objects' finalizers, then the namespace) and those Nodes deleted.
    Dvp {
        /// The parent API server's kubeconfig (it must be allowed to install CRDs).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// The directory of the virtualization CRDs (deckhouse/virtualization's `crds/`;
        /// the kit's `crds/virtualization`).
        #[arg(long, env = "OVERCAST_DVP_CRDS")]
        crds: PathBuf,
        /// The namespace of this cluster's VMs and disks (made if missing).
        #[arg(long, default_value = "overcast-sim-dvp")]
        namespace: String,
        /// Where to write the services' cloud-config.
        #[arg(long, default_value = "overcast-sim-dvp.yaml")]
        cloud_config: PathBuf,
        /// Where the disks' files and their links go (what a run killed with disks
        /// attached leaves there, the next one releases).
        #[arg(long, default_value = "overcast-sim-dvp")]
        dir: PathBuf,
        /// A VM to make (repeat for more); its name is its hostname, the node plugin's
        /// `--node-id`.
        #[arg(long = "vm", default_values_t = ["worker-0".to_owned()])]
        vms: Vec<String>,
    },
    /// A vCenter: vcsim (govmomi's simulator; `../shared/sim/vcsim/build-vcsim.sh` builds
    /// it from Debian's govmomi sources) with its default inventory (datacenter DC0, a
    /// cluster of 3 hosts, a standalone host, 4 VMs, datastore LocalDS_0), behind a front
    /// that plays the ESXi host's and the guest's part vcsim's CNS leaves out: an
    /// attached volume becomes a disk on the VM and a loop device the node plugin finds
    /// under `DIR/by-id/wwn-0x<uuid>` (as root).
    Vsphere {
        /// The vcsim binary.
        #[arg(long, env = "OVERCAST_TEST_VCSIM")]
        vcsim: PathBuf,
        /// Where the guest's device links, the volumes' files and vsphere.conf go.
        #[arg(long, default_value = "overcast-sim-vsphere")]
        dir: PathBuf,
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
        Cloud::Dvp {
            kubeconfig,
            crds,
            namespace,
            cloud_config,
            dir,
            vms,
        } => dvp(&kubeconfig, &crds, &namespace, &cloud_config, &dir, &vms).await,
        Cloud::Vsphere { vcsim, dir } => vsphere(&vcsim, &dir).await,
    }
}

async fn vsphere(vcsim: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<()> {
    use overcast_sim_vsphere::esxi_host::EsxiHost;
    use overcast_sim_vsphere::vcsim::{vms, Vcsim};
    anyhow::ensure!(
        vcsim.is_file(),
        "--vcsim {}: no such binary (../shared/sim/vcsim/build-vcsim.sh builds it)",
        vcsim.display()
    );
    for d in [dir.join("by-id"), dir.join("files")] {
        std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
    }
    let dir = std::fs::canonicalize(dir).with_context(|| format!("{}", dir.display()))?;
    let (by_id, files) = (dir.join("by-id"), dir.join("files"));
    // Tied to this program: killed with it, however it ends.
    let sim = Vcsim::start_binary_with(vcsim, &[], true);
    let admin = sim.admin(sim.port, None);
    let host = EsxiHost::start(&sim, std::sync::Arc::clone(&admin), &by_id, &files).await;
    let conf = sim.conf_at(&dir, host.port, "");
    let text = std::fs::read_to_string(&conf).with_context(|| format!("{}", conf.display()))?;
    println!(
        "# overcast-sim vsphere: vcsim at {}, the ESXi host's front before it at 127.0.0.1:{}",
        sim.addr, host.port
    );
    println!(
        "# volumes' files in {}, attached ones linked in {}",
        files.display(),
        by_id.display()
    );
    println!(
        "# the services' --cloud-config (written to {}):",
        conf.display()
    );
    print!("{text}");
    for (name, _) in vms(&admin).await {
        println!(
            "# VM {name}: the node plugin there runs with --cloud=vsphere --cloud-config={} --node-id={name} --device-by-id-dir={}",
            conf.display(),
            by_id.display()
        );
    }
    let served = serve_until_stopped().await;
    // The guest's loop devices, then vcsim.
    drop(host);
    drop(sim);
    served
}

/// On the namespace `overcast-sim dvp` makes: the only kind it ever deletes.
const MADE_BY: &str = "overcast.dev/made-by";
const MADE_BY_VALUE: &str = "overcast-sim-dvp";

async fn dvp(
    kubeconfig: &std::path::Path,
    crds: &std::path::Path,
    namespace: &str,
    cloud_config: &std::path::Path,
    dir: &std::path::Path,
    vms: &[String],
) -> anyhow::Result<()> {
    use overcast_sim_dvp::{install_crds_from, sweep_namespace, DvpSim};
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("the parent's kubeconfig {}", kubeconfig.display()))?;
    // Written first: a path that cannot be written is said before anything is made on
    // the parent (the CRDs, the namespace).
    let indented: String = text.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(
        cloud_config,
        format!("namespace: {namespace}\nkubeconfig: |\n{indented}"),
    )
    .with_context(|| format!("write --cloud-config {}", cloud_config.display()))?;
    for d in [dir.join("disks"), dir.join("by-id")] {
        std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
    }
    let dir = std::fs::canonicalize(dir).with_context(|| format!("{}", dir.display()))?;
    release_leftovers("dvp", &dir.join("disks"), &dir.join("by-id"));
    let kc = kube::config::Kubeconfig::from_yaml(&text)
        .with_context(|| format!("{}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .with_context(|| format!("{}", kubeconfig.display()))?;
    let client = kube::Client::try_from(config).context("a client for the parent")?;
    anyhow::ensure!(
        crds.is_dir(),
        "--crds {}: not a directory of the virtualization CRDs",
        crds.display()
    );
    // The namespace is let go of on stop (its objects' finalizers, then itself), so only
    // one this program made is taken: a namespace of someone else's is refused, never
    // swept. One of its own that a killed run left is swept first (its files are gone).
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    match namespaces
        .get_opt(namespace)
        .await
        .with_context(|| format!("read namespace {namespace}"))?
    {
        None => {}
        Some(ns) if ns.metadata.deletion_timestamp.is_some() => anyhow::bail!(
            "namespace {namespace} is being deleted (a cluster without a namespace controller, as the kit, keeps it so): name another with --namespace"
        ),
        Some(ns)
            if ns.metadata.labels.as_ref().and_then(|l| l.get(MADE_BY))
                == Some(&MADE_BY_VALUE.to_owned()) =>
        {
            sweep_namespace(&client, namespace).await;
            anyhow::bail!(
                "namespace {namespace} was left by an earlier overcast-sim dvp that did not stop: let go of now; name another with --namespace, or run again once it is gone"
            );
        }
        Some(_) => anyhow::bail!(
            "namespace {namespace} exists and was not made by overcast-sim dvp, which deletes its namespace when it stops: name a new one with --namespace"
        ),
    }
    // Only once the namespace is known to be takeable: a refused run installs nothing.
    install_crds_from(&client, crds).await;
    let labelled =
        serde_json::json!({"metadata": {"name": namespace, "labels": {MADE_BY: MADE_BY_VALUE}}});
    namespaces
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(labelled)?,
        )
        .await
        .with_context(|| format!("create namespace {namespace}"))?;
    let sim = DvpSim::start_in(
        client.clone(),
        namespace,
        std::time::Duration::from_millis(500),
        &dir,
    )
    .await;
    let cloud_config = std::fs::canonicalize(cloud_config)?;
    println!(
        "# overcast-sim dvp: a DVP parent in namespace {namespace} of {}",
        kubeconfig.display()
    );
    println!("# attached disks linked in {}", sim.by_id.display());
    println!(
        "# the services' --cloud-config (written to {}; it holds the parent's credentials):",
        cloud_config.display()
    );
    println!("#   namespace: {namespace}");
    println!("#   kubeconfig: | (the parent's kubeconfig, indented)");
    for (i, name) in vms.iter().enumerate() {
        sim.add_vm(name, name, &format!("10.66.0.{}", 10 + i), "parent-a")
            .await;
        // The same API server plays this cluster too: the node plugin reads its zone from
        // its Node there (none labelled: no zone).
        sim.add_node(name, serde_json::json!({}), false).await;
        println!(
            "# VM {name} (its Node made on the same API server, playing this cluster too): the node plugin there runs with --cloud=dvp --cloud-config={} --node-id={name} --device-by-id-dir={} --kubeconfig={}",
            cloud_config.display(),
            sim.by_id.display(),
            kubeconfig.display()
        );
    }
    let served = serve_until_stopped().await;
    drop(sim);
    sweep_namespace(&client, namespace).await;
    served
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
    release_leftovers("zvirt", &dir.join("disks"), &by_id);
    let engine = Engine::new(
        &dir.join("disks"),
        &by_id,
        capacity_gib << 30,
        Latency::default(),
    );
    // Its loop devices go when it stops.
    let _unplug = engine.unplug_on_drop();
    let url = engine
        .try_start_on(listen)
        .await
        .with_context(|| format!("--listen {listen}"))?;
    let config = engine
        .try_cloud_config(&dir)
        .with_context(|| format!("write {}", dir.join("cloud-config").display()))?;
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

/// What a simulator knows of its devices lives in its memory: a run killed with disks
/// attached (SIGKILL, a crash) leaves their loop devices bound and their links behind,
/// which no later run knows. They are released here — a device still mounted (a guest
/// that did not unstage) when it is unmounted — and said.
fn release_leftovers(sim: &str, disks: &std::path::Path, by_id: &std::path::Path) {
    use overcast_cloud_local::loopdev;
    for (index, file) in loopdev::bound_devices().unwrap_or_default() {
        if !file.starts_with(disks) {
            continue;
        }
        let what = match loopdev::detach(index, &file) {
            Ok(_) => "released".to_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => {
                match loopdev::release_when_unused(index, &file) {
                    Ok(()) => "still mounted: released when it is unmounted".to_owned(),
                    Err(e) => format!("still mounted, left bound: {e}"),
                }
            }
            Err(e) => format!("left bound: {e}"),
        };
        eprintln!(
            "overcast-sim {sim}: /dev/loop{index} ({}), left by a run that did not stop: {what}",
            file.display()
        );
    }
    for link in std::fs::read_dir(by_id).into_iter().flatten().flatten() {
        let _ = std::fs::remove_file(link.path());
    }
}

async fn kube(listen: &str, kubeconfig: &std::path::Path) -> anyhow::Result<()> {
    let api = overcast_sim_kube::FakeApi::default();
    let url = api
        .try_start_on(listen)
        .await
        .with_context(|| format!("--listen {listen}"))?;
    overcast_sim_kube::FakeApi::try_kubeconfig(&url, kubeconfig)
        .with_context(|| format!("write --kubeconfig {}", kubeconfig.display()))?;
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
