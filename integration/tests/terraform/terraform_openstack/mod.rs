//! `deploy/terraform/openstack` run as dhctl runs it, with the real Terraform and
//! `terraform-provider-overcast` installed as terraform-provider-openstack, against the
//! real OpenStack services of `../shared/sim/openstack` (Keystone, Nova on its fake driver,
//! Cinder on its fake driver, Neutron, Glance): each of the four layouts' cycle
//! ([`layouts`]), a cluster terraform-provider-openstack 1.54.1 made taken over
//! ([`takeover`]), and what goes wrong ([`unhappy`]). Each test works in a project of its
//! own (its quotas its own, its leftovers counted), made and removed here. Runs when
//! `OVERCAST_TEST_OPENSTACK_OPENRC` names the services' openrc and Terraform is at hand;
//! says it was skipped otherwise.

mod cloud;
mod layouts;
mod machine_class;
mod takeover;
mod unhappy;
mod upstream;

use std::path::{Path, PathBuf};
use std::process::Command;

use overcast_integration::keystone_front;
use overcast_integration::terraform::{self, expect, tf, Workspace};
use serde_json::{json, Value};

use cloud::{Admin, ImageCopies, Project};
use machine_class::{check_machine_class, machine_class};

/// The provider's address in every state and layout: `terraform-provider-openstack/openstack`.
pub(super) const PROVIDER: (&str, &str) = ("terraform-provider-openstack", "openstack");

/// The tests of this module take turns: Nova has one compute host and the services'
/// SQLite databases take one writer at a time.
pub(super) static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A layout's folder under `deploy/terraform/openstack/layouts` and its name in
/// OpenStackClusterConfiguration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    Standard,
    StandardWithNoRouter,
    Simple,
    SimpleWithInternalNetwork,
}

impl Layout {
    pub fn dir(self) -> &'static str {
        match self {
            Layout::Standard => "standard",
            Layout::StandardWithNoRouter => "standard-with-no-router",
            Layout::Simple => "simple",
            Layout::SimpleWithInternalNetwork => "simple-with-internal-network",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Layout::Standard => "Standard",
            Layout::StandardWithNoRouter => "StandardWithNoRouter",
            Layout::Simple => "Simple",
            Layout::SimpleWithInternalNetwork => "SimpleWithInternalNetwork",
        }
    }

    /// Its section of the configuration (the sim's networks: `public` is external and
    /// without DHCP, `subnet1` of `net1` is shared and routed to it), and the worker's main
    /// network.
    fn section(self, prefix: &str, cidr: &str) -> (&'static str, Value, String) {
        match self {
            Layout::Standard => (
                "standard",
                json!({"internalNetworkCIDR": cidr, "internalNetworkDNSServers": ["8.8.8.8"],
                       "externalNetworkName": "public"}),
                prefix.to_owned(),
            ),
            Layout::StandardWithNoRouter => (
                "standardWithNoRouter",
                json!({"internalNetworkCIDR": cidr, "externalNetworkName": "public",
                       "externalNetworkDHCP": false}),
                "public".to_owned(),
            ),
            Layout::Simple => (
                "simple",
                json!({"externalNetworkName": "public", "externalNetworkDHCP": false}),
                "public".to_owned(),
            ),
            Layout::SimpleWithInternalNetwork => (
                "simpleWithInternalNetwork",
                json!({"internalSubnetName": "subnet1", "externalNetworkName": "public"}),
                "net1".to_owned(),
            ),
        }
    }
}

/// A cluster's configuration as dhctl passes it (`-var-file`), in `project`.
pub(super) struct Cluster {
    pub layout: Layout,
    pub prefix: String,
    pub vars: Value,
}

impl Cluster {
    pub fn new(admin: &Admin, project: &Project, layout: Layout, cidr: &str) -> Self {
        let prefix = project.name.clone();
        let (key, section, main) = layout.section(&prefix, cidr);
        let env = &admin.env;
        let class = json!({"flavorName": "m1.small", "imageName": "fake-image",
                           "rootDiskSize": 1, "etcdDiskSizeGb": 1});
        let mut pcc = json!({
            "apiVersion": "deckhouse.io/v1", "kind": "OpenStackClusterConfiguration",
            "layout": layout.name(),
            "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx6iJ2ckwTG7DZQfAQVPTqTy2NQoa4JDVHLOZMYtT5V overcast-test",
            // Through the login cache: each run logs in, Keystone is asked once a
            // project (its one thread is this lane's floor, overcast_integration::keystone_front).
            "provider": {"authURL": keystone_front::cached(&env["OS_AUTH_URL"]), "domainName": "Default",
                         "tenantName": project.name, "username": env["OS_USERNAME"],
                         "password": env["OS_PASSWORD"], "region": env["OS_REGION_NAME"]},
            "masterNodeGroup": {"replicas": 1, "instanceClass": class,
                                "volumeTypeMap": {"nova": "__DEFAULT__"}},
            "nodeGroups": [{"name": "worker", "replicas": 1,
                            "instanceClass": {"flavorName": "m1.small", "imageName": "fake-image",
                                              "mainNetwork": main}}],
        });
        pcc[key] = section;
        let vars = json!({
            "clusterConfiguration": {
                "apiVersion": "deckhouse.io/v1", "kind": "ClusterConfiguration",
                "clusterType": "Cloud", "cloud": {"provider": "OpenStack", "prefix": prefix},
                "podSubnetCIDR": "10.111.0.0/16", "serviceSubnetCIDR": "10.222.0.0/16",
                "kubernetesVersion": "Automatic"},
            "providerClusterConfiguration": pcc,
            "clusterUUID": "5c4e1a7e-1111-4222-8333-944444444444",
        });
        Self {
            layout,
            prefix,
            vars,
        }
    }

    /// The variables of base-infrastructure (no node), of master `index`, of node `index`
    /// of `worker`, written to `root` as dhctl writes them; the `-var-file=` argument.
    pub fn var_file(&self, root: &Path, step: &str, index: u32) -> String {
        self.var_file_as(root, step, index, "")
    }

    /// The same in a file of its own (`tag`): a variant beside the others.
    pub fn var_file_as(&self, root: &Path, step: &str, index: u32, tag: &str) -> String {
        let mut v = self.vars.clone();
        if step != "base-infrastructure" {
            v["nodeIndex"] = json!(index);
            v["cloudConfig"] = json!("I2Nsb3VkLWNvbmZpZwpydW5jbWQ6Ci0gZWNobyBib290c3RyYXAK");
        }
        if step == "static-node" {
            v["nodeGroupName"] = json!("worker");
        }
        let path = root.join(format!("{step}-{index}{tag}.tfvars.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        format!("-var-file={}", path.display())
    }
}

/// The layouts copied into `root`; a step's module there.
pub(super) fn step(
    bin: &Path,
    root: &Path,
    layouts: &Path,
    layout: Layout,
    step: &str,
) -> Workspace {
    let dir: PathBuf = layouts.join("layouts").join(layout.dir()).join(step);
    // One plugin directory per step: a module of each layout's step names its own.
    let plugins = root.join(format!("{}-{step}", layout.dir()));
    std::fs::create_dir_all(&plugins).unwrap();
    let w = Workspace::module(bin, &plugins, dir, PROVIDER);
    tf(|| w.init());
    w
}

/// `apply -auto-approve` with `vars`, which must succeed (see [`once_more_if_locked`]).
pub(super) fn apply(w: &Workspace, vars: &str) {
    once_more_if_locked(
        w,
        &["apply", "-input=false", "-no-color", "-auto-approve", vars],
    );
}

/// `destroy -auto-approve` with `vars`, which must succeed (see [`once_more_if_locked`]).
pub(super) fn destroy(w: &Workspace, vars: &str) {
    once_more_if_locked(
        w,
        &[
            "destroy",
            "-input=false",
            "-no-color",
            "-auto-approve",
            vars,
        ],
    );
}

/// Runs `args`, which must succeed. The simulator's services answer a 500 when their
/// SQLite database is locked under the parallel lanes — naming its `OperationalError` (seen
/// in CI on a floating IP's disassociation and in a base-infrastructure's apply), or with
/// no cause at all: Neutron's "internal server error" (two security group rules made at
/// once) and Cinder's "The server has either erred" (a volume's create), CI of issue 72;
/// Nova puts a server whose build met it in ERROR with the fault "RemoteError" and code
/// 500 (the provider's "Nova put it in ERROR: RemoteError (code 500)", CI13 of issue 72).
/// Such a run is run again, as an operator re-runs dhctl — Terraform's state holds what
/// the first run made (a server in ERROR tainted, replaced by the second), and a locked
/// transaction made nothing — where its error names `OperationalError`, or is a 500 and
/// a service logged its database locked during it. Any other failure fails at once.
///
/// The run again may fail for what the first left: a master whose build Nova failed is
/// replaced, and Nova deletes its root volume with it (`delete_on_termination`, as the
/// layout has it), which Terraform's state still names — Nova refuses the new server's
/// "Block Device Mapping" (CI17 of issue 72). dhctl's next converge reads the volume gone
/// and makes it again: so is this run, a third time, then, or when the second met the
/// locked database too.
fn once_more_if_locked(w: &Workspace, args: &[&str]) {
    let before = services_logs();
    let first = tf(|| w.run(args));
    if first.code != 0 && locked(&first, &before) {
        eprintln!(
            "{} met the simulator's locked database; run again:\n{}",
            args[0], first.stderr
        );
        let before = services_logs();
        let second = tf(|| w.run(args));
        let aftermath = second.stderr.contains("Block Device Mapping is Invalid");
        if second.code != 0 && (aftermath || locked(&second, &before)) {
            eprintln!(
                "{} met what the locked database left; run a third time:\n{}",
                args[0], second.stderr
            );
            tf(|| w.run(args).ok());
            return;
        }
        second.ok();
        return;
    }
    first.ok();
}

/// Whether a failed run met the simulator's locked database (see [`once_more_if_locked`]).
fn locked(run: &overcast_integration::terraform::Run, before: &[(PathBuf, u64)]) -> bool {
    let a_500 = run.stderr.contains("HTTP 500") || run.stderr.contains("(code 500)");
    run.stderr.contains("OperationalError") || (a_500 && locked_since(before))
}

/// The simulator's services' logs and outputs in their state directory, beside their
/// openrc, as `ossim-up.sh` keeps them (`log/<service>.log`, `log/<service>.out`,
/// Neutron's `neutron/server.log`), each with its length now: only their sizes are read
/// before a run, and only what was written during it after a failed one.
fn services_logs() -> Vec<(PathBuf, u64)> {
    let Some(openrc) = std::env::var_os("OVERCAST_TEST_OPENSTACK_OPENRC") else {
        return vec![];
    };
    let state = Path::new(&openrc).parent().unwrap_or(Path::new("/"));
    let mut logs = vec![state.join("neutron/server.log")];
    if let Ok(dir) = std::fs::read_dir(state.join("log")) {
        logs.extend(dir.flatten().map(|e| e.path()));
    }
    logs.into_iter()
        .map(|log| {
            let len = std::fs::metadata(&log).map_or(0, |m| m.len());
            (log, len)
        })
        .collect()
}

/// Whether a service logged its SQLite database locked since `before` (a log that came
/// since is read whole).
fn locked_since(before: &[(PathBuf, u64)]) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    services_logs().iter().any(|(log, _)| {
        let from = before
            .iter()
            .find(|(l, _)| l == log)
            .map_or(0, |(_, len)| *len);
        let mut written = Vec::new();
        std::fs::File::open(log)
            .and_then(|mut f| {
                f.seek(SeekFrom::Start(from))?;
                f.read_to_end(&mut written)
            })
            .is_ok()
            && String::from_utf8_lossy(&written).contains("database is locked")
    })
}

/// A plan of no change.
pub(super) fn unchanged(w: &Workspace, vars: &str, what: &str) {
    tf(|| expect(&w.plan(&[vars]), 0, what));
}

pub(super) fn terraform_binary(what: &str) -> Option<PathBuf> {
    terraform::binary(what)
}
