//! `deploy/monitoring/`: the PrometheusRule's alerts pass `promtool check rules` and fire
//! as `deploy/monitoring/tests/rules-test.yaml` says (`promtool test rules`, Debian's
//! `prometheus` package), and every metric an alert, a test series or a dashboard panel
//! names is one the real binaries export — read from their `/metrics` (the csi driver on
//! the local cloud and on the zVirt engine simulator; the ccm, the discoverer and capi
//! against a fresh API server of the kit's). Without promtool, or without the kit, says what was skipped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use overcast_integration::{
    binary, free_port, http_get, real, say_skipped, zvirt_sim, Csi, KillOnDrop,
};
use serde_json::Value;

fn monitoring() -> PathBuf {
    overcast_integration::package_dir().join("../deploy/monitoring")
}

fn yaml(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rules as promtool reads them: the PrometheusRule's spec (JSON is YAML).
fn rules() -> Value {
    yaml(&monitoring().join("prometheusrule.yaml"))["spec"].clone()
}

fn promtool() -> Option<PathBuf> {
    let found = Command::new("promtool").arg("--version").output().ok()?;
    found.status.success().then(|| PathBuf::from("promtool"))
}

#[test]
fn the_alerts_pass_promtool_and_fire_as_their_tests_say() {
    let Some(promtool) = promtool() else {
        say_skipped("promtool is not installed (Debian: prometheus): the alerts were not checked");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), rules().to_string()).unwrap();
    std::fs::copy(
        monitoring().join("tests/rules-test.yaml"),
        dir.path().join("rules-test.yaml"),
    )
    .unwrap();
    for args in [
        ["check", "rules", "rules.yaml"],
        ["test", "rules", "rules-test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every alert has a test in which it fires.
    let tests = yaml(&monitoring().join("tests/rules-test.yaml"));
    let fired: BTreeSet<&str> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .filter(|a| a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()))
        .filter_map(|a| a["alertname"].as_str())
        .collect();
    let alerts: BTreeSet<String> = alert_names(&rules());
    let untested: Vec<&String> = alerts
        .iter()
        .filter(|a| !fired.contains(a.as_str()))
        .collect();
    assert!(untested.is_empty(), "alerts no test fires: {untested:?}");
}

fn alert_names(rules: &Value) -> BTreeSet<String> {
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect()
}

/// The sample names a `/metrics` page can hold, from its `# TYPE` lines: a counter's
/// `_total`, a histogram's `_bucket`, `_sum` and `_count`, a gauge's own name.
fn exported(page: &str, into: &mut BTreeSet<String>) {
    for line in page.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        let base = name.strip_suffix("_total").unwrap_or(name);
        match kind {
            "counter" => {
                into.insert(format!("{base}_total"));
            }
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    into.insert(format!("{name}{s}"));
                }
            }
            _ => {
                into.insert(name.to_owned());
            }
        }
    }
}

/// The metric names a PromQL expression reads: identifiers that are no function, keyword,
/// number or label (inside `{}` or a `by (…)`-like clause), and the alternatives of a
/// `__name__=~"(a|b)_x"`.
fn names_in(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    // Strings, label matchers and ranges out; a `__name__` regex's names kept.
    let mut rest = String::new();
    let mut chars = expr.chars();
    while let Some(c) = chars.next() {
        let close = match c {
            '{' => '}',
            '"' => '"',
            '[' => ']',
            _ => {
                rest.push(c);
                continue;
            }
        };
        let inner: String = chars.by_ref().take_while(|d| *d != close).collect();
        if c == '{' {
            for m in inner.split(',') {
                let Some(re) = m.trim().strip_prefix("__name__=~") else {
                    continue;
                };
                let re = re.trim().trim_matches('"');
                match (re.find('('), re.find(')')) {
                    (Some(open), Some(end)) => {
                        for alt in re[open + 1..end].split('|') {
                            out.insert(format!("{}{alt}{}", &re[..open], &re[end + 1..]));
                        }
                    }
                    _ => {
                        out.insert(re.to_owned());
                    }
                }
            }
        }
        rest.push(' ');
    }
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut tokens: Vec<String> = Vec::new();
    let mut current = String::new();
    for c in rest.chars() {
        if word(c) {
            current.push(c);
        } else {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            if !c.is_whitespace() {
                tokens.push(c.to_string());
            }
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    const GROUPING: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    // Operators, and aggregations (followed by `by`, not by their parenthesis).
    const KEYWORDS: [&str; 17] = [
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
    ];
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        let next = tokens.get(i + 1).map(String::as_str);
        if GROUPING.contains(&t) && next == Some("(") {
            // Skip to the clause's ')'.
            while i < tokens.len() && tokens[i] != ")" {
                i += 1;
            }
        } else if t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && next != Some("(")
            && !KEYWORDS.contains(&t)
        {
            out.insert(t.to_owned());
        }
        i += 1;
    }
    out
}

#[test]
fn promql_names_are_read_as_prometheus_reads_them() {
    let names = |e: &str| names_in(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names("sum by (namespace, pod) (rate(a_total{code!=\"Ok\", method=~\".*x\"}[10m])) > 0 unless sum by (pod) (increase(b_total[30m])) > 0"),
        ["a_total", "b_total"]
    );
    assert_eq!(
        names("histogram_quantile(0.99, sum by (le, method) (rate(c_bucket[5m])))"),
        ["c_bucket"]
    );
    assert_eq!(
        names("rate({__name__=~\"(x|y)_api_errors_total\"}[5m])"),
        ["x_api_errors_total", "y_api_errors_total"]
    );
    assert_eq!(names("max by(job, id)(g == 1)"), ["g"]);
}

/// `/metrics` of a binary started with `args` and `--metrics-address` once it holds a
/// sample of each of `wanted` (a family with no sample prints nothing).
fn scrape(name: &str, args: &[String], wanted: &[&str]) -> String {
    let port = free_port();
    let _child = KillOnDrop(
        Command::new(binary(name))
            .args(args)
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = std::time::Instant::now();
    loop {
        let (code, body) = http_get(port, "/metrics");
        if code == 200 && wanted.iter().all(|w| body.contains(&format!("\n{w}"))) {
            return body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name} {args:?}: no sample of every one of {wanted:?}:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Every metric an alert, a test series or a dashboard panel names, taken from the real
/// binaries' `/metrics`, each brought to the state that makes its series: the csi driver on
/// the local cloud (a volume's life) and on the zVirt engine simulator (its API calls, one
/// answered by the engine's HTML error page); the ccm whose cloud cannot list (its
/// reconcile errors), leading; the discoverer over a disk no PersistentVolume names and over
/// a state directory without disks (an unmet condition); capi of each cloud (its
/// reconciles by kind). The ccm, discoverer and capi run on a fresh API server of the
/// kit's, where nothing they do touches another test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_monitoring_names_is_exported() {
    if real::kubeconfig("the monitoring's metric names").is_none() {
        return;
    }
    let Some(kit) = real::kit_scripts() else {
        say_skipped("the kit's kube-up.sh is not beside the project (set OVERCAST_KIT_DIR): the monitoring's metric names were not checked");
        return;
    };
    let mut names = BTreeSet::new();
    let work = tempfile::tempdir().unwrap();
    let local_state = work.path().join("local");

    // The csi driver on the local cloud: a volume's life, and one left behind (an orphan
    // for the discoverer below).
    let port = free_port();
    let csi = Csi::start(&[
        &format!("--metrics-address=127.0.0.1:{port}"),
        &format!("--state-dir={}", local_state.display()),
    ])
    .await;
    let (mut c, mut n) = (csi.controller().await, csi.node().await);
    overcast_integration::volume_lifecycle(
        &mut c,
        &mut n,
        "monitoring",
        16 << 20,
        overcast_integration::mount_cap("ext4"),
        work.path(),
    )
    .await;
    // Made for a PersistentVolume (external-provisioner's parameter) that is not there.
    let mut orphan = overcast_integration::create_request("orphan", 8 << 20);
    orphan.parameters = [(
        "csi.storage.k8s.io/pv/name".to_owned(),
        "pvc-orphan".to_owned(),
    )]
    .into();
    c.create_volume(orphan).await.unwrap();
    // The disk inventory the discoverer reads is written within a second.
    let inventory = local_state.join("inventory.json");
    assert!(
        overcast_integration::eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(&inventory).is_ok_and(|t| t.contains("pvc-orphan"))
        })
        .await,
        "no inventory"
    );
    let (_, page) = http_get(port, "/metrics");
    assert!(page.contains("\ncsi_grpc_calls_total{"), "{page}");
    exported(&page, &mut names);
    drop((c, n, csi));

    // The csi driver on the zVirt engine simulator: the cloud API's series.
    let (by_id, files) = (work.path().join("by-id"), work.path().join("disks"));
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(&files).unwrap();
    let engine = zvirt_sim::Engine::new(&files, &by_id, 1 << 40, zvirt_sim::Latency::default());
    let url = engine.start().await;
    let _unplug = engine.unplug_on_drop();
    let conf = work.path().join("zvirt.conf");
    std::fs::write(
        &conf,
        format!(
            "server: {url}\nusername: {}\npassword: {}\n",
            zvirt_sim::USER,
            zvirt_sim::PASSWORD
        ),
    )
    .unwrap();
    let port = free_port();
    let csi = Csi::start(&[
        "--cloud=zvirt",
        &format!("--cloud-config={}", conf.display()),
        "--cluster=overcast-it",
        &format!("--device-by-id-dir={}", by_id.display()),
        &format!("--metrics-address=127.0.0.1:{port}"),
    ])
    .await;
    let mut c = csi.controller().await;
    let mut create = overcast_integration::create_request("monitoring", 1 << 30);
    create.parameters = [("storageDomainName".to_owned(), "data".to_owned())].into();
    c.create_volume(create.clone()).await.unwrap();
    engine.set_html(true);
    let _ = c.create_volume(create).await;
    engine.set_html(false);
    let (_, page) = http_get(port, "/metrics");
    assert!(page.contains("\nzvirt_api_request_errors_total{"), "{page}");
    exported(&page, &mut names);
    drop((c, csi));

    let fresh = tokio::task::block_in_place(|| real::FreshApiServer::up(&kit));
    let kc = format!("--kubeconfig={}", fresh.kubeconfig().display());
    let no_disks = work.path().join("no-disks");
    std::fs::create_dir_all(&no_disks).unwrap();
    let pages = tokio::task::block_in_place(|| {
        let mut pages = vec![
            scrape(
                "ccm",
                &[
                    kc.clone(),
                    "--node-name=monitoring".into(),
                    format!(
                        "--instances-file={}",
                        work.path().join("absent.json").display()
                    ),
                    "--node-sync-period=1".into(),
                    "--leader-elect-lease-name=overcast-it-monitoring".into(),
                ],
                &[
                    "ccm_reconcile_errors_total",
                    "ccm_reconciles_total",
                    "leader_election_master_status",
                ],
            ),
            scrape(
                "discoverer",
                &[
                    kc.clone(),
                    format!("--state-dir={}", local_state.display()),
                    "--discovery-period=1".into(),
                ],
                &[
                    "cloud_data_discovery_orphaned_disk_info",
                    "cloud_data_discovery_cloud_request_error",
                ],
            ),
            scrape(
                "discoverer",
                &[
                    kc.clone(),
                    format!("--state-dir={}", no_disks.display()),
                    "--discovery-period=1".into(),
                ],
                &["cloud_data_discovery_cloud_conditions_error"],
            ),
        ];
        // capi of the clouds with Cluster API kinds (the others only keep node-manager's
        // Secret): zVirt on the engine simulator, DVP with this server as its parent.
        let parent = work.path().join("dvp.conf");
        let indented: String = std::fs::read_to_string(fresh.kubeconfig())
            .unwrap()
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect();
        std::fs::write(
            &parent,
            format!("namespace: monitoring\nkubeconfig: |\n{indented}"),
        )
        .unwrap();
        for (cloud, config) in [("zvirt", &conf), ("dvp", &parent)] {
            pages.push(scrape(
                "capi",
                &[
                    kc.clone(),
                    format!("--cloud={cloud}"),
                    format!("--cloud-config={}", config.display()),
                    "--cluster-uuid=monitoring".into(),
                    format!("--leader-elect-lease-name=overcast-it-monitoring-{cloud}"),
                ],
                &["capi_reconciles_total", "capi_reconcile_errors_total"],
            ));
        }
        pages
    });
    for page in &pages {
        exported(page, &mut names);
    }

    let mut named: BTreeSet<(String, String)> = BTreeSet::new();
    for g in rules()["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let what = r["alert"].as_str().unwrap_or("a rule").to_owned();
            let found = names_in(r["expr"].as_str().unwrap());
            // A `__name__` alternation names one metric per cloud: one exported is enough.
            let any = found.iter().any(|n| names.contains(n));
            assert!(any, "{what} reads no exported metric: {found:?}");
            for n in found.iter().filter(|n| !n.contains("_api_")) {
                named.insert((n.clone(), what.clone()));
            }
        }
    }
    let tests = yaml(&monitoring().join("tests/rules-test.yaml"));
    for t in tests["tests"].as_array().unwrap() {
        for s in t["input_series"].as_array().unwrap() {
            let series = s["series"].as_str().unwrap();
            let name = series.split('{').next().unwrap().to_owned();
            named.insert((name, format!("the test series {series}")));
        }
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring().join("dashboard.json")).unwrap(),
    )
    .unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(!panels.is_empty());
    for p in panels {
        let title = p["title"].as_str().unwrap_or("a panel");
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap();
            let found = names_in(expr);
            assert!(
                found.iter().any(|n| names.contains(n)),
                "{title}: {expr} reads no exported metric"
            );
            for n in found.iter().filter(|n| !n.contains("_api_")) {
                named.insert((n.clone(), format!("the panel {title}")));
            }
        }
    }
    let missing: Vec<&(String, String)> =
        named.iter().filter(|(n, _)| !names.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "named but not exported: {missing:?}\nexported: {names:?}"
    );
}
