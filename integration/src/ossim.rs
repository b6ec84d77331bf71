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
    write_cloud_conf(env, &env["OS_AUTH_URL"], dir)
}

/// [`cloud_conf`] with Keystone behind the process's login cache
/// ([`crate::keystone_front`]): for tests whose subject is not the login nor Keystone
/// itself (not a paused Keystone), so that the binaries they start log in once between
/// them and the services validate one token, not one a start.
pub fn cloud_conf_through_login_cache(env: &BTreeMap<String, String>, dir: &Path) -> PathBuf {
    write_cloud_conf(
        env,
        &crate::keystone_front::cached(&env["OS_AUTH_URL"]),
        dir,
    )
}

fn write_cloud_conf(env: &BTreeMap<String, String>, auth_url: &str, dir: &Path) -> PathBuf {
    let path = dir.join("cloud.conf");
    std::fs::write(
        &path,
        format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\nuser-domain-id = {}\n\
             project-name = {}\nproject-domain-id = {}\nregion = {}\n\
             [BlockStorage]\nnode-volume-attach-limit = 60\n",
            auth_url,
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
