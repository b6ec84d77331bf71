//! vcsim (govmomi's vCenter simulator, built from Debian's govmomi sources by
//! `../shared/sim/vcsim/build-vcsim.sh`) as the tests and benchmarks run it: one process
//! per test on a port of its own, so a test may stop it mid-sync or give it another
//! inventory without touching the others. `OVERCAST_TEST_VCSIM` names the binary; the
//! tests say they were skipped without it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub const ENV: &str = "OVERCAST_TEST_VCSIM";

pub struct Vcsim {
    child: Option<Child>,
    /// Its certificate (PEM): a 2048-bit RSA one made for the test, since vcsim's own
    /// has a 1024-bit key that rustls (rightly) refuses; the provider verifies it as
    /// `ca-file`.
    pub ca_file: PathBuf,
    dir: tempfile::TempDir,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    pub port: u16,
    args: Vec<String>,
    bin: PathBuf,
    /// Killed when its starting thread ends.
    tied: bool,
}

impl Vcsim {
    /// A vcsim with the default inventory (1 datacenter, a cluster of 3 hosts, a
    /// standalone host, 4 VMs, LocalDS_0) plus `args` (`-vm 100`, …); `None`, saying
    /// so, when `OVERCAST_TEST_VCSIM` is not set.
    pub fn start(test: &str, args: &[&str]) -> Option<Self> {
        let Some(bin) = binary() else {
            println!("SKIPPED {test}: set {ENV} to the vcsim binary (../shared/sim/vcsim/build-vcsim.sh)");
            return None;
        };
        Some(Self::start_binary(&bin, args))
    }

    /// [`Vcsim::start`] of the vcsim binary `bin` (`overcast-sim vsphere`).
    pub fn start_binary(bin: &Path, args: &[&str]) -> Self {
        Self::start_binary_with(bin, args, false)
    }

    /// [`Vcsim::start_binary`]; `tied`: vcsim is killed when the thread that started it
    /// ends, however it ends (`overcast-sim vsphere` killed with SIGKILL left it running).
    pub fn start_binary_with(bin: &Path, args: &[&str], tied: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let made = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=127.0.0.1",
            ])
            .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(made.success(), "openssl req");
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        args.extend([
            "-tlscert".to_owned(),
            cert.display().to_string(),
            "-tlskey".to_owned(),
            key.display().to_string(),
        ]);
        let (child, addr) = spawn(bin, "127.0.0.1:0", &args, tied);
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        Self {
            child: Some(child),
            ca_file: cert,
            dir,
            addr,
            port,
            args,
            bin: bin.to_owned(),
            tied,
        }
    }

    /// Stops it (SIGTERM, as its own cleanup of temporary datastores expects).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            // A paused one takes its SIGTERM once it runs again.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGCONT,
            );
            let _ = c.wait();
        }
    }

    /// Hangs it (SIGSTOP): connections are accepted by the kernel and never answered,
    /// as a vCenter that hangs.
    pub fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// Lets a paused one answer again (SIGCONT).
    pub fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Some(c) = &self.child {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), signal);
        }
    }

    /// Where its files are (the certificate, a test's own).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts it again on the same port, with a fresh inventory of the same shape.
    pub fn restart(&mut self) {
        self.stop();
        let (child, addr) = spawn(&self.bin, &self.addr, &self.args, self.tied);
        assert_eq!(addr, self.addr);
        self.child = Some(child);
    }

    /// A `vsphere.conf` in upstream's INI form for this vCenter (any user is accepted;
    /// its certificate verified as `ca-file`), plus `extra` lines.
    pub fn conf(&self, dir: &Path, extra: &str) -> PathBuf {
        self.conf_at(dir, self.port, extra)
    }

    /// [`Vcsim::conf`] naming `port`: a front before it with its certificate.
    pub fn conf_at(&self, dir: &Path, port: u16, extra: &str) -> PathBuf {
        let path = dir.join("vsphere.conf");
        std::fs::write(
            &path,
            format!(
                "[Global]\nport = {port}\nca-file = {}\n\
                 [VirtualCenter \"127.0.0.1\"]\nuser = user\npassword = pass\ndatacenters = DC0\n{extra}",
                self.ca_file.display()
            ),
        )
        .unwrap();
        path
    }

    /// A client of this vCenter as its administrator through `port` (its own, or a
    /// front's before it), its calls counted in `metrics` when given.
    pub fn admin(
        &self,
        port: u16,
        metrics: Option<std::sync::Arc<overcast_cloud_http::ApiMetrics>>,
    ) -> std::sync::Arc<overcast_cloud_vsphere::session::Vcenter> {
        use overcast_cloud_vsphere::credentials::Credential;
        use overcast_cloud_vsphere::session::{Login, Target, Vcenter};
        let mut settings = overcast_cloud_http::HttpSettings::new("vsphere");
        settings.ca_pem = Some(std::fs::read_to_string(&self.ca_file).unwrap());
        settings.attempt_timeout = std::time::Duration::from_secs(5);
        settings.deadline = std::time::Duration::from_secs(15);
        Vcenter::new(
            Target {
                server: "127.0.0.1".into(),
                port,
                login: Login::Password(Credential {
                    user: "user".into(),
                    password: "pass".into(),
                }),
                keepalive: std::time::Duration::ZERO,
            },
            settings,
            metrics,
        )
        .unwrap()
    }
}

impl Drop for Vcsim {
    fn drop(&mut self) {
        self.stop();
    }
}

fn binary() -> Option<PathBuf> {
    std::env::var_os(ENV)
        .map(PathBuf::from)
        .filter(|p| !p.as_os_str().is_empty())
}

/// Starts vcsim on `listen` and waits for the line that says where it listens.
fn spawn(bin: &Path, listen: &str, args: &[String], tied: bool) -> (Child, String) {
    let mut command = Command::new(bin);
    command
        .arg("-l")
        .arg(listen)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if tied {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    // Kept open: a Go program writing to a closed stdout dies of SIGPIPE.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    // `export GOVC_URL=https://user:pass@127.0.0.1:PORT/sdk GOVC_SIM_PID=…`
    let addr = line
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("vcsim said {line:?}"))
        .to_owned();
    (child, addr)
}

// What the tests and benchmarks do to vcsim's inventory through the vim25 API.

use std::sync::Arc;
use std::time::Duration;

use overcast_cloud_vsphere::inventory::{properties, View};
use overcast_cloud_vsphere::session::{Endpoint, Vcenter};
use overcast_cloud_vsphere::soap::{el, Moref};
use overcast_cloud_vsphere::task;

/// Calls a `*_Task` method and waits for it to succeed.
pub async fn run_task(vc: &Vcenter, method: &'static str, params: &str) {
    let r = vc.call(Endpoint::Vim, method, params, false).await.unwrap();
    let t = r.child("returnval").and_then(Moref::of).unwrap();
    task::wait(vc, &t, method, Duration::from_secs(30))
        .await
        .unwrap();
}

/// Makes the VM's guest report `name` as its host name (vcsim's `SET.guest.*` extra
/// config plays VMware Tools), as a node's guest reports the node's name.
pub async fn set_host_name(vc: &Vcenter, vm: &Moref, name: &str) {
    let spec = format!(
        "<spec><extraConfig><key>SET.guest.hostName</key><value xsi:type=\"xsd:string\">{}</value></extraConfig></spec>",
        overcast_cloud_vsphere::xml::esc(name)
    );
    run_task(vc, "ReconfigVM_Task", &(vm.xml("_this") + &spec)).await;
}

/// Every VM, by name.
pub async fn vms(vc: &Arc<Vcenter>) -> Vec<(String, Moref)> {
    let view = View::new(Arc::clone(vc), &["VirtualMachine"]);
    let mut out: Vec<(String, Moref)> = view
        .retrieve(&[("VirtualMachine", &["name"])])
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.text("name").unwrap().to_owned(), p.obj))
        .collect();
    out.sort();
    out
}

/// The ESXi host's part of a CNS attach, which vcsim's CNS (bookkeeping) leaves out: the
/// VM gets the virtual disk — `vDiskId` the volume, `backing.uuid` the disk UUID CNS
/// answered — on its pvscsi controller's first free unit. Nothing when it has it already.
pub async fn plug_disk(vc: &Vcenter, vm: &Moref, vm_name: &str, volume: &str, uuid: &str) {
    let (disks, controller, units) = vm_disks(vc, vm).await;
    if disks.iter().any(|(_, v)| v == volume) {
        return;
    }
    let unit = (1..16)
        .find(|u| *u != 7 && !units.contains(u))
        .expect("a free unit");
    reconfigure_devices(
        vc,
        vm,
        format!(
            "<operation>add</operation><fileOperation>create</fileOperation>\
             <device xsi:type=\"VirtualDisk\"><key>-1</key>\
             <backing xsi:type=\"VirtualDiskFlatVer2BackingInfo\"><fileName>[LocalDS_0] {vm_name}/{volume}.vmdk</fileName>\
             <diskMode>persistent</diskMode>{}</backing>{}{}<capacityInKB>1024</capacityInKB>\
             <vDiskId>{}</vDiskId></device>",
            el("uuid", uuid),
            el("controllerKey", &controller),
            el("unitNumber", &unit.to_string()),
            el("id", volume)
        ),
    )
    .await;
}

/// The host's part of a detach: the virtual disk of `volume` leaves the VM.
pub async fn unplug_disk(vc: &Vcenter, vm: &Moref, volume: &str) {
    let (disks, _, _) = vm_disks(vc, vm).await;
    if let Some((key, _)) = disks.iter().find(|(_, v)| v == volume) {
        reconfigure_devices(
            vc,
            vm,
            format!(
                "<operation>remove</operation><device xsi:type=\"VirtualDisk\">{}</device>",
                el("key", key)
            ),
        )
        .await;
    }
}

/// A VM's First Class Disks as (device key, volume id), its pvscsi controller's key and
/// the units taken on it.
async fn vm_disks(vc: &Vcenter, vm: &Moref) -> (Vec<(String, String)>, String, Vec<u32>) {
    let p = properties(vc, vm, &["config.hardware.device"])
        .await
        .unwrap();
    let all = p.get("config.hardware.device").cloned().unwrap_or_default();
    let controller = all
        .children
        .iter()
        .find(|d| d.xsi_type.as_deref() == Some("ParaVirtualSCSIController"))
        .and_then(|d| d.text_at(&["key"]))
        .expect("a pvscsi controller")
        .to_owned();
    let mut disks = Vec::new();
    let mut units = Vec::new();
    for d in all
        .children
        .iter()
        .filter(|d| d.xsi_type.as_deref() == Some("VirtualDisk"))
    {
        if d.text_at(&["controllerKey"]) == Some(controller.as_str()) {
            units.extend(
                d.text_at(&["unitNumber"])
                    .and_then(|u| u.parse::<u32>().ok()),
            );
        }
        if let Some(id) = d.text_at(&["vDiskId", "id"]) {
            disks.push((d.text_at(&["key"]).unwrap().to_owned(), id.to_owned()));
        }
    }
    (disks, controller, units)
}

async fn reconfigure_devices(vc: &Vcenter, vm: &Moref, change: String) {
    let spec = format!("<spec><deviceChange>{change}</deviceChange></spec>");
    run_task(vc, "ReconfigVM_Task", &(vm.xml("_this") + &spec)).await;
}
