//! The OpenStack services of `../shared/sim/openstack` as the tests and benchmarks reach
//! them: the `openrc` that `ossim-up.sh` writes, and a cloud.conf an operator would write
//! for that cloud (OCCM's format).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `export K=V …` lines of an openrc.
pub fn openrc(path: &str) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

/// `DIR/cloud.conf` for the cloud `env` describes: password auth in its region, and the
/// node attach limit the tests expect.
pub fn cloud_conf(env: &BTreeMap<String, String>, dir: &Path) -> PathBuf {
    let path = dir.join("cloud.conf");
    std::fs::write(
        &path,
        format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\nuser-domain-id = {}\n\
             project-name = {}\nproject-domain-id = {}\nregion = {}\n\
             [BlockStorage]\nnode-volume-attach-limit = 60\n",
            env["OS_AUTH_URL"],
            env["OS_USERNAME"],
            env["OS_PASSWORD"],
            env["OS_USER_DOMAIN_ID"],
            env["OS_PROJECT_NAME"],
            env["OS_PROJECT_DOMAIN_ID"],
            env["OS_REGION_NAME"],
        ),
    )
    .unwrap();
    path
}

/// The two sides of the OpenStack tests, which take turns within a side and run beside
/// each other across: the **volume** side (Cinder and the servers volumes attach to:
/// the provider conformance suite, the csi driver, listing with Cinder's API stopped,
/// discovery, the unhappy paths, cinder-csi's volumes) and the **network** side (the
/// ccm's nodes, load balancers on Octavia, routes on Neutron). Neither touches what the
/// other makes (their servers' names differ, and only the volume side makes volumes or
/// stops Cinder); a test that pauses Keystone, which every test needs, takes both.
/// Locks on files (`flock`), so the turns hold across the processes CI runs the sides in;
/// taken before the kit's cluster turn, never after it (`real::cluster_turn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Volumes,
    Network,
    Both,
}

/// A turn on one side or both; it ends when this is dropped.
pub struct Turn(#[allow(dead_code)] Vec<nix::fcntl::Flock<std::fs::File>>);

/// Waits for a turn on `side` (both: the volume side's first, as every taker orders them).
pub async fn turn(side: Side) -> Turn {
    tokio::task::spawn_blocking(move || {
        let names: &[&str] = match side {
            Side::Volumes => &["volumes"],
            Side::Network => &["network"],
            Side::Both => &["volumes", "network"],
        };
        Turn(names.iter().map(|n| lock(n)).collect())
    })
    .await
    .unwrap()
}

fn lock(name: &str) -> nix::fcntl::Flock<std::fs::File> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::env::var("OVERCAST_TEST_OPENSTACK_OPENRC")
        .unwrap_or_default()
        .hash(&mut h);
    let path = std::env::temp_dir().join(format!(
        "overcast-openstack-{name}-{:016x}.lock",
        h.finish()
    ));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("flock {}: {e}", path.display()))
}
