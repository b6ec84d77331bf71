//! The traits crate is what every provider crate depends on: it must not pull in one
//! provider's dependencies (the local cloud's store, its system calls, its flags).

use std::process::Command;

#[test]
fn the_traits_crate_carries_no_provider_dependencies() {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "tree",
            "--offline",
            "-p",
            "overcast-cloud",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "{out:?}");
    let tree = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains(&"overcast-cloud"), "{tree}");
    for forbidden in [
        "redb",
        "nix",
        "clap",
        "libc",
        "tokio",
        "crc32fast",
        "overcast-runtime",
    ] {
        assert!(
            !names.contains(&forbidden),
            "overcast-cloud depends on {forbidden}:\n{tree}"
        );
    }
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
    ] {
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
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo tree");
        assert!(out.status.success(), "{out:?}");
        let tree = String::from_utf8_lossy(&out.stdout);
        let names: Vec<&str> = tree
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(names.contains(&"overcast-cloud"), "{krate}: {tree}");
        for forbidden in ["redb", "nix", "clap", "overcast-cloud-local"] {
            assert!(
                !names.contains(&forbidden),
                "{krate} depends on {forbidden}:\n{tree}"
            );
        }
    }
}
