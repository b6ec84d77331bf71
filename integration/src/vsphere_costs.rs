//! What each CSI RPC costs the vCenter, as a sidecar drives it: the real `csi` binary on
//! its socket, talking to vcsim with a chosen number of VMs through a counting front
//! (every call and the bytes of every answer, task polls and logins included). The front
//! also plays what a real vCenter does and vcsim does not: which VMs hold a First Class
//! Disk ([`Associations`]) and the refusal to delete a held volume. The ESXi host's part of
//! an attach — the VM's virtual disk, which vcsim's CNS does not add — is played on the
//! test's own session, not counted. Used by `clouds` `vsphere_real_cloud::costs` and the
//! `vsphere_disks` benchmark.

use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_cloud_http::ApiMetrics;
use overcast_cloud_vsphere::credentials::Credential;
use overcast_cloud_vsphere::session::{Login, Target, Vcenter};
use overcast_cloud_vsphere::soap::Moref;

use crate::vcsim::{set_host_name, vms, Vcsim};
use crate::vcsim_front::{Associations, Counting, Tally, VcsimFront, VmIdSpelling};
use crate::Csi;

/// The node the volumes are attached to: a VM whose guest reports this host name.
pub const NODE: &str = "overcast-costs-node";

pub struct Costs {
    pub sim: Vcsim,
    /// The test's own session (uncounted).
    pub admin: Arc<Vcenter>,
    pub counting: Arc<Counting>,
    _front: VcsimFront,
    /// Where the front listens: a client of its own is counted too.
    pub front_port: u16,
    pub driver: Csi,
    /// The node's VM and its name.
    pub vm: Moref,
    pub vm_name: String,
    /// How many VMs vcsim holds.
    pub vms: usize,
    _dir: tempfile::TempDir,
}

/// A login as the tests make one, on `sim` directly.
pub fn admin(sim: &Vcsim) -> Arc<Vcenter> {
    let mut settings = overcast_cloud_http::HttpSettings::new("vsphere-admin");
    settings.ca_pem = Some(std::fs::read_to_string(&sim.ca_file).unwrap());
    Vcenter::new(
        Target {
            server: "127.0.0.1".into(),
            port: sim.port,
            login: Login::Password(Credential {
                user: "user".into(),
                password: "pass".into(),
            }),
            keepalive: Duration::ZERO,
        },
        settings,
        Some(Arc::new(ApiMetrics::unregistered())),
    )
    .expect("a vCenter client")
}

impl Costs {
    /// vcsim with `per_pool` VMs in each of its two resource pools (`-vm`), the csi
    /// binary on it through the front, with `extra` lines in `[Global]` of its
    /// vsphere.conf and `args` besides; `None`, saying so, without vcsim.
    pub async fn start(
        test: &str,
        per_pool: usize,
        spelling: VmIdSpelling,
        global: &str,
        args: &[&str],
    ) -> Option<Self> {
        let sim = Vcsim::start(test, &["-vm", &per_pool.to_string()])?;
        let admin = admin(&sim);
        let all = vms(&admin).await;
        let (vm_name, vm) = all[0].clone();
        set_host_name(&admin, &vm, NODE).await;
        let counting = Counting::new(Associations::new(Arc::clone(&admin), spelling));
        let front = VcsimFront::start(&sim, Arc::clone(&counting) as _).await;
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("vsphere.conf");
        std::fs::write(
            &conf,
            format!(
                "[Global]\nport = {}\nca-file = {}\n{global}\n[VirtualCenter \"127.0.0.1\"]\n\
                 user = k8s\npassword = pw\ndatacenters = DC0\n",
                front.port,
                sim.ca_file.display()
            ),
        )
        .unwrap();
        let mut all_args = vec![
            "--cloud=vsphere".to_owned(),
            format!("--cloud-config={}", conf.display()),
            format!("--node-id={NODE}"),
        ];
        all_args.extend(args.iter().map(|a| (*a).to_owned()));
        let all_args: Vec<&str> = all_args.iter().map(String::as_str).collect();
        let driver = Csi::start(&all_args).await;
        counting.take();
        Some(Self {
            sim,
            admin,
            counting,
            front_port: front.port,
            _front: front,
            driver,
            vm,
            vm_name,
            vms: all.len(),
            _dir: dir,
        })
    }

    /// `f`'s answer, and what it cost the vCenter and how long it took.
    pub async fn measure<T>(
        &self,
        f: impl std::future::Future<Output = T>,
    ) -> (T, Tally, Duration) {
        self.counting.take();
        let t = Instant::now();
        let out = f.await;
        let took = t.elapsed();
        (out, self.counting.take(), took)
    }
}
