//! Each release names itself (issue 71: every release tagged its images `0.1.0`, so
//! `kubectl apply -k` of a new release over an old one rolled nothing): the images the
//! manifests run carry the workspace's version as their tag, every binary's `--version`
//! says it, and no earlier release of `integration/fixtures/upgrade/releases` had it.

use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const OUR_IMAGES: &str = "ghcr.io/overcast-dev/overcast-";

fn workspace() -> PathBuf {
    overcast_integration::package_dir()
        .parent()
        .expect("workspace")
        .to_owned()
}

/// Every file under `dir` whose name ends with one of `ends`.
fn files(dir: &Path, ends: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path, ends));
        } else if ends.iter().any(|e| path.to_string_lossy().ends_with(e)) {
            out.push(path);
        }
    }
    out
}

#[test]
fn the_manifests_images_and_the_binaries_say_this_release() {
    let root = workspace();
    let mut images = 0;
    let mut docs = files(&root.join("docs"), &[".md"]);
    docs.push(root.join("README.md"));
    for file in files(&root.join("deploy"), &[".yaml", ".yml"])
        .into_iter()
        .chain(docs)
    {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices(OUR_IMAGES) {
            let reference: String = text[at..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '`' && *c != '"')
                .collect();
            // A name alone (prose naming the image) pins nothing.
            let Some((_, tag)) = reference.rsplit_once(':') else {
                continue;
            };
            images += 1;
            assert_eq!(
                tag,
                VERSION,
                "{}: {reference} is not this release's tag",
                file.display()
            );
        }
    }
    assert!(images >= 7, "the manifests' images were read: {images}");

    for bin in [
        "csi",
        "ccm",
        "discoverer",
        "registrar",
        "rbac-proxy",
        "capi",
        "overcastctl",
        "overcast-sim",
    ] {
        let out = Command::new(overcast_integration::binary(bin))
            .arg("--version")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.trim().ends_with(VERSION),
            "{bin} --version: {said}"
        );
    }
}

/// A release is a new version: none of the earlier releases the upgrade tests run (each a
/// commit of this repository) carried this one's, or its images would share their tags.
#[test]
fn no_earlier_release_had_this_version() {
    let root = workspace();
    let list = std::fs::read_to_string(root.join("integration/fixtures/upgrade/releases")).unwrap();
    let commits: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(!commits.is_empty());
    for commit in commits {
        let out = Command::new("git")
            .current_dir(&root)
            .args(["show", &format!("{commit}:Cargo.toml")])
            .output()
            .unwrap();
        if !out.status.success() {
            // A shallow clone lacks the history: said, not passed silently.
            overcast_integration::say_skipped(&format!(
                "release {commit} is not in this clone's history: its version is not compared"
            ));
            continue;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let theirs = text
            .lines()
            .find_map(|l| l.strip_prefix("version = \""))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{commit}: no version in its Cargo.toml"));
        assert_ne!(
            theirs, VERSION,
            "release {commit} was {theirs} too: bump the workspace's version (and the images' tags)"
        );
    }
}
