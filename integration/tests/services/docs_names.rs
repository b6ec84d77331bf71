//! The names the pages give are names the code has (issue 61: a page described a metric
//! by a meaning it did not have, others named what had gone). Every backticked name the
//! README, `BENCHMARKS.md` and `docs/` give under a service's metric prefix (`ccm_`,
//! `csi_`, `capi_`, `cloud_data_discovery_`, `rbac_proxy_`) is either a metric that
//! service's code registers — the full name, or the part after the prefix its registry
//! adds (`csi_node_` for the node plugin's), as a string in its source (a counter without
//! `_total`, which the client adds) —
//! or a test module that exists under `integration/tests/` (the pages name tests the same
//! way). What a metric *means* is said once, beside its registration; this keeps the
//! pages from naming one that is not there.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A metric prefix and the service whose code registers its metrics.
const PREFIXES: &[(&str, &str)] = &[
    ("cloud_data_discovery_", "discoverer"),
    ("rbac_proxy_", "rbac-proxy"),
    ("capi_", "capi"),
    ("ccm_", "ccm"),
    ("csi_", "csi"),
];

fn root() -> PathBuf {
    overcast_integration::package_dir().join("..")
}

fn files(dir: &Path, ext: &str, into: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, ext, into);
        } else if p.extension().is_some_and(|x| x == ext) {
            into.push(p);
        }
    }
}

/// The backticked words of `text` that start with one of the prefixes.
fn named(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|w| {
            // `name{label="x"}` and `name_total` both name the metric.
            w.split(['{', ' ', '(']).next().unwrap_or_default()
        })
        .filter(|w| {
            PREFIXES.iter().any(|(p, _)| w.starts_with(p))
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

/// The test modules under `integration/tests/`: each file's and directory's name.
fn test_modules() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                walk(&p, out);
            }
            out.insert(stem);
        }
    }
    walk(&root().join("integration/tests"), &mut out);
    walk(&root().join("integration/benches"), &mut out);
    out
}

#[test]
fn the_pages_name_only_metrics_and_tests_that_exist() {
    let mut pages = vec![root().join("README.md"), root().join("BENCHMARKS.md")];
    files(&root().join("docs"), "md", &mut pages);
    let modules = test_modules();
    let mut sources: Vec<(&str, String)> = Vec::new();
    for (prefix, service) in PREFIXES {
        let mut rs = Vec::new();
        files(
            &root().join("services").join(service).join("src"),
            "rs",
            &mut rs,
        );
        let text: String = rs
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        sources.push((prefix, text));
    }
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for name in named(&text) {
            checked += 1;
            if modules.contains(&name) {
                continue;
            }
            let (prefix, source) = sources.iter().find(|(p, _)| name.starts_with(p)).unwrap();
            let base = name.strip_suffix("_total").unwrap_or(&name);
            // The part after the service's prefix, or — the registry's prefix may be
            // longer (`csi_node_`) — any later tail of two words or more.
            let tails = base
                .match_indices('_')
                .filter(|(i, _)| *i + 1 >= prefix.len())
                .map(|(i, _)| &base[i + 1..])
                .filter(|t| t.contains('_'));
            let registered = [base, &base[prefix.len()..]]
                .into_iter()
                .chain(tails)
                .any(|n| source.contains(&format!("\"{n}\"")));
            if !registered {
                wrong.push(format!(
                    "{}: `{name}`",
                    page.strip_prefix(root()).unwrap_or(page).display()
                ));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} names found: is the scan broken?"
    );
    assert!(
        wrong.is_empty(),
        "named on a page, but neither a metric the service registers nor a test module:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scan_reads_names_as_the_pages_write_them() {
    let got = named(
        "`ccm_node_fencing_total{action=\"applied\"}` and `csi_sanity` and `ccm` and `ccm_lb.rs` and `CCM_X`",
    );
    assert_eq!(
        got.into_iter().collect::<Vec<_>>(),
        ["ccm_node_fencing_total", "csi_sanity"]
    );
}
