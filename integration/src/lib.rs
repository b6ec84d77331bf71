//! Shared harness for the integration tests and benchmarks: start the real `csi`
//! binary on a temporary Unix socket, talk gRPC to it, kill it, restart it, and clean up
//! every loop device and file it made, also when a test fails.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use overcast_api::csi_v1 as csi;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

pub use overcast_api::csi_v1;
pub use sanity::{run_csi_sanity, SanityRun};

pub mod attacks;
/// The simulators are crates of their own (`sim/`), here under the names the tests use.
pub use overcast_sim_kube as fake_api;
pub use overcast_sim_vsphere::{cns_snapshots, esxi_host, vcsim, vcsim_front};
pub use overcast_sim_zvirt as zvirt_sim;
pub mod capi;
/// The DVP parent simulator (`sim/dvp`), and the tenant accounts the tests make in it.
pub mod dvp_sim {
    pub use crate::dvp_tenant::{drop_tenant, tenant, through_proxy};
    pub use overcast_sim_dvp::*;
}
mod dvp_tenant;
pub mod faulty_front;
pub mod fencing;
pub mod keystone_front;
pub mod kubelet;
pub mod kustomize;
pub mod manifests;
pub mod neighbour;
pub mod node_b;
pub mod ossim;
pub mod ossim_project;
pub mod real;
pub mod real_node;
pub mod release;
pub mod sanity;
pub mod scale;
pub mod stall_front;
pub mod terraform;
pub mod upstream_node;
pub mod vsphere_costs;

pub type IdentityClient = csi::identity_client::IdentityClient<Channel>;
pub type ControllerClient = csi::controller_client::ControllerClient<Channel>;
pub type NodeClient = csi::node_client::NodeClient<Channel>;

pub const NODE_ID: &str = "test-node";
pub const ZONE: &str = "zone-a";
pub const REGION: &str = "region-1";
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";
pub const REGION_KEY: &str = "topology.kubernetes.io/region";
pub const MIB: i64 = 1 << 20;

/// The integration package's directory (`integration/`), read when the test runs — cargo
/// sets `CARGO_MANIFEST_DIR` for every test and bench it runs, and `.ci/run` for the test
/// binaries it runs itself — never compiled in: a test binary a kept target directory
/// holds then serves a fresh clone at another path (compiled in, it read the earlier
/// clone's `deploy/` and `../shared`, and cargo does not rebuild for that).
pub fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .expect("CARGO_MANIFEST_DIR: run the tests through cargo, or set it to the integration package's directory")
}

/// The path of a workspace binary, freshly built. `cargo test` builds only the
/// binaries of packages that have integration tests of their own, so the harness
/// builds the workspace's binaries itself, once per test process (a no-op when they
/// are up to date), in the profile the test itself was built in.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test>
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    BUILT.get_or_init(|| {
        let package = crate::package_dir();
        let workspace = package.parent().expect("workspace root");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(workspace)
            .args(["build", "--workspace", "--bins"]);
        // Cargo gives this test process its package's variables; build scripts that watch
        // them (ring's watches CARGO_MANIFEST_DIR) would see a change and rebuild half the
        // tree on every test binary, then again on the next plain build.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key == "CARGO_MANIFEST_DIR"
                || key == "CARGO_MANIFEST_PATH"
                || key == "CARGO_CRATE_NAME"
                || key == "CARGO_PRIMARY_PACKAGE"
                || key == "CARGO_TARGET_TMPDIR"
                // .ci/run gives the test binary this (libtest's --report-time); anyhow's,
                // proc-macro2's and thiserror's build scripts watch it.
                || key == "RUSTC_BOOTSTRAP"
                || key.starts_with("CARGO_PKG_")
                || key.starts_with("CARGO_BIN_")
            {
                cmd.env_remove(&*key);
            }
        }
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        if let Some(target) = dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        let status = cmd.status().expect("run cargo build");
        assert!(status.success(), "cargo build --workspace --bins failed");
    });
    let path = dir.join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// A running `csi` process with its own socket and state directory.
pub struct Csi {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub log: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Csi {
    /// Starts `csi --mode all` with extra `args` and waits until it is ready.
    pub async fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[]).await
    }

    pub async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_full(args, env, None).await
    }

    /// Starts it with its stderr (the log) going to `log` instead of its own directory.
    pub async fn start_logging_to(args: &[&str], log: PathBuf) -> Self {
        Self::start_full(args, &[], Some(log)).await
    }

    /// Starts it and waits only until its socket answers, not until Probe says ready (a
    /// test of a cloud that does not answer).
    pub async fn start_unready(args: &[&str]) -> Self {
        Self::start_opts(args, &[], None, false).await
    }

    async fn start_full(args: &[&str], env: &[(&str, &str)], log: Option<PathBuf>) -> Self {
        Self::start_opts(args, env, log, true).await
    }

    async fn start_opts(
        args: &[&str],
        env: &[(&str, &str)],
        log: Option<PathBuf>,
        ready: bool,
    ) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("overcast-it-")
            .tempdir()
            .expect("tempdir");
        let socket = dir.path().join("csi.sock");
        // A test may put the state elsewhere (a small filesystem of its own).
        let state_dir = args
            .iter()
            .find_map(|a| a.strip_prefix("--state-dir="))
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.path().join("state"));
        let log = log.unwrap_or_else(|| dir.path().join("csi.log"));
        let mut csi = Self {
            child: None,
            socket,
            state_dir,
            log,
            dir,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        csi.spawn();
        if ready {
            csi.wait_ready(Duration::from_secs(20)).await;
        } else {
            let deadline = Instant::now() + Duration::from_secs(20);
            while connect(&csi.socket).await.is_err() {
                assert!(
                    Instant::now() < deadline,
                    "csi's socket does not answer after 20 s; log:\n{}",
                    csi.log_text()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        csi
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut cmd = Command::new(binary("csi"));
        // The tests' zone, unless the test gives a cloud-config to take it from, or
        // runs another cloud than the local one (whose zone comes from elsewhere).
        let other_cloud = self
            .args
            .iter()
            .any(|a| a.starts_with("--cloud=") && a != "--cloud=local");
        if !other_cloud && !self.args.iter().any(|a| a.starts_with("--cloud-config")) {
            cmd.arg(format!("--zone={ZONE}"))
                .arg(format!("--region={REGION}"));
        }
        if !self.args.iter().any(|a| a.starts_with("--state-dir=")) {
            cmd.arg(format!("--state-dir={}", self.state_dir.display()));
        }
        // Rescan requests (a cloud disk slow to appear) go to a directory of the test's,
        // never to this machine's SCSI hosts, unless the test plays the kernel there.
        if !self.args.iter().any(|a| a.starts_with("--sysfs-dir=")) {
            cmd.arg(format!(
                "--sysfs-dir={}",
                self.dir.path().join("sys").display()
            ));
        }
        if !self.args.iter().any(|a| a.starts_with("--node-state-dir=")) {
            cmd.arg(format!(
                "--node-state-dir={}",
                self.dir.path().join("node").display()
            ));
        }
        cmd.arg(format!("--endpoint=unix://{}", self.socket.display()))
            .args(
                // The tests' node id, unless the test names the node (a cloud's server).
                (!self.args.iter().any(|a| a.starts_with("--node-id=")))
                    .then(|| format!("--node-id={NODE_ID}")),
            )
            .args(&self.args)
            .env_remove("CSI_ENDPOINT")
            .env_remove("CLOUD_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("spawn csi"));
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Waits until Probe answers ready.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "csi exited with {status} before it was ready; log:\n{}",
                    self.log_text()
                );
            }
            if let Ok(channel) = connect(&self.socket).await {
                let mut identity = csi::identity_client::IdentityClient::new(channel);
                if let Ok(resp) = identity.probe(csi::ProbeRequest {}).await {
                    if resp.into_inner().ready == Some(true) {
                        return;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "csi not ready after {timeout:?}; log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        child.wait().expect("wait")
    }

    /// Starts the process again on the same socket and state, and waits for it.
    pub async fn restart(&mut self) {
        self.kill9();
        self.resume().await;
    }

    /// Starts the process again after [`Csi::kill9`] (and whatever the test did while
    /// it was down), and waits for it.
    pub async fn resume(&mut self) {
        self.spawn();
        self.wait_ready(Duration::from_secs(20)).await;
    }

    pub async fn channel(&self) -> Channel {
        connect(&self.socket).await.expect("connect")
    }

    pub async fn identity(&self) -> IdentityClient {
        csi::identity_client::IdentityClient::new(self.channel().await)
    }

    pub async fn controller(&self) -> ControllerClient {
        csi::controller_client::ControllerClient::new(self.channel().await)
    }

    pub async fn node(&self) -> NodeClient {
        csi::node_client::NodeClient::new(self.channel().await)
    }

    pub fn disks_dir(&self) -> PathBuf {
        self.state_dir.join("disks")
    }

    /// The disk files (`vol-<hex>.img`) in the disks directory.
    pub fn disk_files(&self) -> Vec<String> {
        self.files_ending(".img")
    }

    /// The disks' metadata files (`vol-<hex>.json`) beside them.
    pub fn meta_files(&self) -> Vec<String> {
        self.files_ending(".json")
    }

    /// The metadata file of disk `id`, parsed.
    pub fn disk_meta(&self, id: &str) -> Option<serde_json::Value> {
        let bytes = std::fs::read(self.disks_dir().join(format!("{id}.json"))).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Every file in the disks directory.
    pub fn all_disk_dir_files(&self) -> Vec<String> {
        self.files_ending("")
    }

    fn files_ending(&self, suffix: &str) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(self.disks_dir())
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.ends_with(suffix))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Loop devices (index, backing file) whose file is in this instance's state.
    pub fn loops(&self) -> Vec<(u32, PathBuf)> {
        loops_under(&self.state_dir)
    }
}

impl Drop for Csi {
    fn drop(&mut self) {
        self.kill9();
        unmount_under(self.dir.path());
        detach_loops_under(&self.state_dir);
    }
}

/// Unmounts every mount point under `dir`, deepest first (test cleanup).
pub fn unmount_under(dir: &Path) {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return;
    };
    for _ in 0..4 {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<PathBuf> = text
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(|p| PathBuf::from(p.replace("\\040", " ")))
            .filter(|p| p.starts_with(&dir))
            .collect();
        if points.is_empty() {
            return;
        }
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in points {
            let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Whether `path` is a mount point now.
pub fn is_mount_point(path: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|p| Path::new(p) == path)
}

/// The mount options of the topmost mount at `path`.
pub fn mount_options(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .rfind(|l| l.split(' ').nth(4).is_some_and(|p| Path::new(p) == path))
        .and_then(|l| l.split(' ').nth(5).map(str::to_owned))
}

/// Connects a gRPC channel over the Unix socket at `path`.
pub async fn connect(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_owned();
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}

/// Every bound loop device whose backing file lies under `dir`.
pub fn loops_under(dir: &Path) -> Vec<(u32, PathBuf)> {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return vec![];
    };
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(index) = name
            .strip_prefix("loop")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(file) = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"))
        else {
            continue;
        };
        let file = PathBuf::from(file.trim_end().trim_end_matches(" (deleted)"));
        if file.starts_with(&dir) {
            out.push((index, file));
            continue;
        }
        // A device bound through a mount that is gone (a controller in a mount namespace
        // that ended) shows the path from that mount's root: found by the file's identity.
        let Some(name) = file.file_name() else {
            continue;
        };
        let ours = dir.join("disks").join(name);
        if ours.exists() && overcast_mount::loopfile::shows(index, &file, &ours) {
            out.push((index, ours));
        }
    }
    out.sort();
    out
}

/// Detaches every loop device backed by a file under `dir` (test cleanup).
pub fn detach_loops_under(dir: &Path) {
    for (index, _) in loops_under(dir) {
        let _ = Command::new("losetup")
            .arg("-d")
            .arg(format!("/dev/loop{index}"))
            .status();
    }
}

/// Size in bytes of a block device, from sysfs.
pub fn block_size_bytes(index: u32) -> u64 {
    std::fs::read_to_string(format!("/sys/block/loop{index}/size"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(0, |sectors| sectors * 512)
}

pub fn mount_cap(fs: &str) -> csi::VolumeCapability {
    use csi::volume_capability::{access_mode::Mode, AccessMode, AccessType, MountVolume};
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: fs.into(),
            ..Default::default()
        })),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

pub fn block_cap() -> csi::VolumeCapability {
    use csi::volume_capability::{access_mode::Mode, AccessMode, AccessType, BlockVolume};
    csi::VolumeCapability {
        access_type: Some(AccessType::Block(BlockVolume {})),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

pub fn create_request(name: &str, bytes: i64) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_cap("ext4")],
        ..Default::default()
    }
}

pub fn publish_request(volume_id: &str, readonly: bool) -> csi::ControllerPublishVolumeRequest {
    csi::ControllerPublishVolumeRequest {
        readonly,
        ..attach_request(volume_id, NODE_ID, mount_cap("ext4"))
    }
}

pub fn unpublish_request(volume_id: &str) -> csi::ControllerUnpublishVolumeRequest {
    detach_request(volume_id, NODE_ID)
}

/// ControllerPublishVolume as external-attacher asks it, to the node `node_id` (a cloud's
/// instance id).
pub fn attach_request(
    volume_id: &str,
    node_id: &str,
    cap: csi::VolumeCapability,
) -> csi::ControllerPublishVolumeRequest {
    csi::ControllerPublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        volume_capability: Some(cap),
        ..Default::default()
    }
}

/// ControllerUnpublishVolume from the node `node_id`.
pub fn detach_request(volume_id: &str, node_id: &str) -> csi::ControllerUnpublishVolumeRequest {
    csi::ControllerUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        ..Default::default()
    }
}

/// NodeStageVolume as kubelet asks it, onto `staging`.
pub fn stage_request(
    volume_id: &str,
    publish_context: &HashMap<String, String>,
    staging: &Path,
    cap: csi::VolumeCapability,
) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        publish_context: publish_context.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(cap),
        ..Default::default()
    }
}

/// NodePublishVolume as kubelet asks it, from `staging` onto `target`.
pub fn node_publish_request(
    volume_id: &str,
    publish_context: &HashMap<String, String>,
    staging: &Path,
    target: &Path,
    cap: csi::VolumeCapability,
) -> csi::NodePublishVolumeRequest {
    csi::NodePublishVolumeRequest {
        volume_id: volume_id.into(),
        publish_context: publish_context.clone(),
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: Some(cap),
        ..Default::default()
    }
}

pub fn node_unpublish_request(volume_id: &str, target: &Path) -> csi::NodeUnpublishVolumeRequest {
    csi::NodeUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        target_path: target.display().to_string(),
    }
}

pub fn unstage_request(volume_id: &str, staging: &Path) -> csi::NodeUnstageVolumeRequest {
    csi::NodeUnstageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: staging.display().to_string(),
    }
}

pub fn delete_request(volume_id: &str) -> csi::DeleteVolumeRequest {
    csi::DeleteVolumeRequest {
        volume_id: volume_id.into(),
        ..Default::default()
    }
}

pub fn expand_request(volume_id: &str, bytes: i64) -> csi::ControllerExpandVolumeRequest {
    csi::ControllerExpandVolumeRequest {
        volume_id: volume_id.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        volume_capability: Some(mount_cap("ext4")),
        ..Default::default()
    }
}

/// One volume's whole life through both services, as kubelet and the sidecars drive it:
/// create, attach, stage, publish, then each undone in reverse. `work` holds the
/// staging and target directories.
pub async fn volume_lifecycle(
    c: &mut ControllerClient,
    n: &mut NodeClient,
    name: &str,
    bytes: i64,
    cap: csi::VolumeCapability,
    work: &Path,
) {
    let staging = work.join(format!("{name}-staging"));
    let target = work.join(format!("{name}-target"));
    std::fs::create_dir_all(&staging).expect("staging");
    let id = c
        .create_volume(create_request(name, bytes))
        .await
        .expect("create")
        .into_inner()
        .volume
        .expect("volume")
        .volume_id;
    let ctx = c
        .controller_publish_volume(publish_request(&id, false))
        .await
        .expect("attach")
        .into_inner()
        .publish_context;
    n.node_stage_volume(stage_request(&id, &ctx, &staging, cap.clone()))
        .await
        .expect("stage");
    n.node_publish_volume(node_publish_request(&id, &ctx, &staging, &target, cap))
        .await
        .expect("publish");
    n.node_unpublish_volume(node_unpublish_request(&id, &target))
        .await
        .expect("unpublish");
    n.node_unstage_volume(unstage_request(&id, &staging))
        .await
        .expect("unstage");
    c.controller_unpublish_volume(unpublish_request(&id))
        .await
        .expect("detach");
    c.delete_volume(delete_request(&id)).await.expect("delete");
}

/// ControllerUnpublish as the external-attacher makes it: a FAILED_PRECONDITION (the loop
/// device still held right after the unstage — "the detach is retried") is tried again,
/// for up to 10 s. Seen in CI with the machine fully busy, in the upgrade test and in
/// `csi/namespaced.rs`.
pub async fn detach_as_the_attacher(c: &mut ControllerClient, id: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match c.controller_unpublish_volume(unpublish_request(id)).await {
            Ok(_) => return,
            Err(s)
                if s.code() == tonic::Code::FailedPrecondition
                    && std::time::Instant::now() < deadline =>
            {
                eprintln!("detach {id}: {} — retried", s.message());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(s) => panic!("detach {id}: {s:?}"),
        }
    }
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS`, `VmHWM`, …); 0 when unreadable.
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The resident set of `pid` now, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS")
}

/// The peak resident set of `pid` so far (VmHWM), KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM")
}

/// A child process a test started, killed and reaped when the test is done with it
/// (also when it fails).
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether this process holds capability `cap` (its number, e.g. 24 for
/// CAP_SYS_RESOURCE) in its effective set.
pub fn has_capability(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << cap) != 0)
}

/// CAP_SYS_RESOURCE: the kernel asks for it to resize a mounted ext4 filesystem.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// HTTP GET on loopback with curl: (status, body).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-m",
            "5",
            "-w",
            "\n%{http_code}",
            &format!("http://127.0.0.1:{port}{path}"),
        ])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// HTTPS GET of `/metrics` on loopback with curl, trusting `ca`, with `token` as bearer:
/// (status, body).
pub fn curl_metrics(port: u16, ca: &Path, token: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-m", "5", "-w", "\n%{http_code}", "--cacert"])
        .arg(ca);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd
        .arg(format!("https://localhost:{port}/metrics"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// A running `registrar` process registering the driver at `csi_socket`.
pub struct Registrar {
    child: Option<Child>,
    pub registry: PathBuf,
    pub log: PathBuf,
    pub health_port: u16,
}

/// The CSI socket path as the tests tell kubelet to dial it.
pub const KUBELET_PATH: &str = "/var/lib/kubelet/plugins/it.csi.overcast.dev/csi.sock";

impl Registrar {
    pub fn start(csi_socket: &Path, dir: &Path) -> Self {
        Self::start_with(csi_socket, dir, &["--socket-check-interval-ms=100"])
    }

    pub fn start_with(csi_socket: &Path, dir: &Path, extra: &[&str]) -> Self {
        let registry = dir.join("plugins_registry");
        let log = dir.join("registrar.log");
        let health_port = free_port();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log");
        let child = Command::new(binary("registrar"))
            .arg(format!("--csi-address=unix://{}", csi_socket.display()))
            .arg(format!("--kubelet-registration-path={KUBELET_PATH}"))
            .arg(format!("--plugin-registration-dir={}", registry.display()))
            .arg(format!("--health-address=127.0.0.1:{health_port}"))
            .arg("--probe-timeout-ms=500")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("spawn registrar");
        Self {
            child: Some(child),
            registry,
            log,
            health_port,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The exit status, if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        child.wait().expect("wait")
    }
}

impl Drop for Registrar {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `cond` every 20 ms for up to `timeout`.
pub async fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// A self-signed certificate for `localhost`/127.0.0.1 as `<dir>/<name>.crt` and
/// `<dir>/<name>.key`, marked an end entity (webpki refuses a CA certificate as a
/// server's own).
pub fn self_signed_cert(dir: &Path, name: &str) {
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(dir.join(format!("{name}.key")))
        .arg("-out")
        .arg(dir.join(format!("{name}.crt")))
        .stderr(Stdio::null())
        .status()
        .expect("run openssl");
    assert!(status.success(), "openssl could not make a certificate");
}

/// Says that (part of) a test was skipped, past the test harness's output capture, so it
/// shows in every CI log and not only with `--nocapture`.
pub fn say_skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

/// An HTTP/1.1 upstream on loopback that answers `metrics-body` to every request and
/// records the raw request heads it receives (what a proxy in front of it forwarded).
pub async fn recording_upstream(heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let heads = std::sync::Arc::clone(&heads);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        heads
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(String::from_utf8_lossy(&head).into_owned());
                        let body = "metrics-body";
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    port
}

/// The benchmarks' figures: the median of `v` (its upper middle), and a duration in ms.
pub mod figures {
    use std::time::Duration;

    pub fn median(mut v: Vec<Duration>) -> Duration {
        v.sort();
        v[v.len() / 2]
    }

    pub fn ms(d: Duration) -> String {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}
