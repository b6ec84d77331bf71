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
        let (child, addr) = spawn(&bin, "127.0.0.1:0", &args);
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        Some(Self {
            child: Some(child),
            ca_file: cert,
            dir,
            addr,
            port,
            args,
        })
    }

    /// Stops it (SIGTERM, as its own cleanup of temporary datastores expects).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
    }

    /// Where its files are (the certificate, a test's own).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts it again on the same port, with a fresh inventory of the same shape.
    pub fn restart(&mut self) {
        self.stop();
        let bin = binary().unwrap();
        let (child, addr) = spawn(&bin, &self.addr, &self.args);
        assert_eq!(addr, self.addr);
        self.child = Some(child);
    }

    /// A `vsphere.conf` in upstream's INI form for this vCenter (any user is accepted;
    /// its certificate verified as `ca-file`), plus `extra` lines.
    pub fn conf(&self, dir: &Path, extra: &str) -> PathBuf {
        let path = dir.join("vsphere.conf");
        std::fs::write(
            &path,
            format!(
                "[Global]\nport = {}\nca-file = {}\n\
                 [VirtualCenter \"127.0.0.1\"]\nuser = user\npassword = pass\ndatacenters = DC0\n{extra}",
                self.port,
                self.ca_file.display()
            ),
        )
        .unwrap();
        path
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
fn spawn(bin: &Path, listen: &str, args: &[String]) -> (Child, String) {
    let mut child = Command::new(bin)
        .arg("-l")
        .arg(listen)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
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
