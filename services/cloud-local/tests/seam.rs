//! The traits crate is what every provider crate depends on: it must not pull in one
//! provider's dependencies (the local cloud's store, its system calls, its flags); and no
//! real cloud's crate pulls in the local cloud's.

use std::process::Command;

/// The names of every crate `krate` depends on (normal dependencies, the whole tree).
fn dependencies(krate: &str) -> Vec<String> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "tree",
            "--offline",
            "-p",
            krate,
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "{out:?}");
    let tree = String::from_utf8_lossy(&out.stdout);
    let names: Vec<String> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(
        names.iter().any(|n| n == "overcast-cloud"),
        "{krate}: {tree}"
    );
    names
}

fn assert_free_of(krate: &str, forbidden: &[&str]) {
    let names = dependencies(krate);
    for f in forbidden {
        assert!(
            !names.iter().any(|n| n == f),
            "{krate} depends on {f}:\n{names:?}"
        );
    }
}

#[test]
fn the_traits_crate_carries_no_provider_dependencies() {
    assert_free_of(
        "overcast-cloud",
        &[
            "redb",
            "nix",
            "clap",
            "libc",
            "tokio",
            "crc32fast",
            "overcast-runtime",
        ],
    );
}

/// Each real cloud's crate builds on the traits crate and none of the local cloud's
/// dependencies: no store, no loop devices, no flags.
#[test]
fn provider_crates_carry_no_local_cloud_dependencies() {
    for krate in [
        "overcast-cloud-dvp",
        "overcast-cloud-openstack",
        "overcast-cloud-vsphere",
        "overcast-cloud-zvirt",
        "overcast-cloud-http",
        "overcast-provider",
    ] {
        assert_free_of(krate, &["redb", "nix", "clap", "overcast-cloud-local"]);
    }
}
