//! The `csi` process as an operator meets it: modes, signals, sockets, logs, metrics.

use std::time::Duration;

use overcast_integration::csi_v1 as csi;
use overcast_integration::*;
use tonic::Code;

#[tokio::test]
async fn sigterm_shuts_down_cleanly_and_removes_the_socket() {
    let mut csi = Csi::start(&[]).await;
    assert!(csi.socket.exists());
    // An idle client connection stays open, as the sidecars' do.
    let _idle = csi.channel().await;
    let started = std::time::Instant::now();
    let status = csi.terminate();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown is bounded"
    );
    assert!(status.success(), "exit status {status}");
    assert!(!csi.socket.exists(), "the socket is removed on shutdown");
}

#[tokio::test]
async fn a_stale_socket_is_replaced_but_a_live_one_is_not_stolen() {
    let mut csi = Csi::start(&[]).await;
    // A crash leaves the socket file behind; the next start serves on it anyway.
    csi.kill9();
    assert!(csi.socket.exists());
    csi.restart().await;
    // A second driver on the same live socket refuses to start.
    let out = std::process::Command::new(binary("csi"))
        .arg(format!("--endpoint=unix://{}", csi.socket.display()))
        .arg("--mode=node")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("served by another process"));
    csi.identity()
        .await
        .probe(csi::ProbeRequest {})
        .await
        .expect("the first driver still serves");
}

#[tokio::test]
async fn node_mode_serves_no_controller_and_reports_its_node() {
    let csi = Csi::start(&["--mode=node", "--max-volumes-per-node=17"]).await;
    let caps = csi
        .identity()
        .await
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap();
    let has_controller = caps.into_inner().capabilities.iter().any(|c| {
        matches!(&c.r#type, Some(csi::plugin_capability::Type::Service(s))
            if s.r#type() == csi::plugin_capability::service::Type::ControllerService)
    });
    assert!(!has_controller);
    let err = csi
        .controller()
        .await
        .create_volume(create_request("x", MIB))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    assert!(
        !csi.state_dir.join("store.log").exists(),
        "a node opens no cloud state"
    );
    let info = csi
        .node()
        .await
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, NODE_ID);
    assert_eq!(info.max_volumes_per_node, 17);
    let segments = info.accessible_topology.unwrap().segments;
    assert_eq!(segments.get(ZONE_KEY).map(String::as_str), Some(ZONE));
    assert_eq!(segments.get(REGION_KEY).map(String::as_str), Some(REGION));
}

#[tokio::test]
async fn secrets_never_reach_the_log_even_at_trace_level() {
    let csi = Csi::start_with_env(&["--log-format=json"], &[("RUST_LOG", "trace")]).await;
    let mut c = csi.controller().await;
    let secret = "S3cr3t-Value-For-Log-Test";
    let secrets: std::collections::HashMap<String, String> =
        [("password".to_owned(), secret.to_owned())].into();
    let v = c
        .create_volume(csi::CreateVolumeRequest {
            secrets: secrets.clone(),
            ..create_request("sec", MIB)
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    c.controller_publish_volume(csi::ControllerPublishVolumeRequest {
        secrets: secrets.clone(),
        ..publish_request(&v.volume_id, false)
    })
    .await
    .unwrap();
    c.controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
        secrets: secrets.clone(),
        ..unpublish_request(&v.volume_id)
    })
    .await
    .unwrap();
    let bad = c
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: String::new(),
            secrets,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let log = csi.log_text();
    assert!(
        log.contains("/csi.v1.Controller/CreateVolume"),
        "the gRPC layer logged the calls:\n{log}"
    );
    assert!(
        log.contains("InvalidArgument"),
        "errors are logged with their code"
    );
    assert!(!log.contains(secret), "a secret leaked into the log");
    for line in log.lines() {
        assert!(
            line.starts_with('{'),
            "--log-format=json writes JSON lines: {line}"
        );
    }
}

#[tokio::test]
async fn metrics_and_healthz_are_served() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let csi = Csi::start(&[&format!("--metrics-address=127.0.0.1:{port}")]).await;
    csi.controller()
        .await
        .create_volume(create_request("m", MIB))
        .await
        .unwrap();
    let get = |path: &str| {
        let out = std::process::Command::new("curl")
            .args([
                "-s",
                "-w",
                "\n%{http_code}",
                &format!("http://127.0.0.1:{port}{path}"),
            ])
            .output();
        String::from_utf8_lossy(&out.expect("curl").stdout).into_owned()
    };
    let metrics = get("/metrics");
    assert!(metrics.ends_with("200"), "{metrics}");
    assert!(
        metrics.contains(
            r#"csi_grpc_calls_total{method="/csi.v1.Controller/CreateVolume",code="Ok"} 1"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains("csi_grpc_call_duration_seconds_bucket"));
    assert!(get("/healthz").ends_with("200"));
}

#[tokio::test]
async fn zone_and_region_come_from_the_cloud_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cloud-config");
    std::fs::write(&config, "zone: z-file\nregion: r-file\n").unwrap();
    let arg = format!("--cloud-config={}", config.display());
    let csi = Csi::start(&[&arg]).await;
    let want = std::collections::HashMap::from([
        (ZONE_KEY.to_owned(), "z-file".to_owned()),
        (REGION_KEY.to_owned(), "r-file".to_owned()),
    ]);
    let info = csi
        .node()
        .await
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        info.accessible_topology.unwrap().segments,
        want,
        "the node reports the file's zone"
    );
    let volume = csi
        .controller()
        .await
        .create_volume(create_request("zoned", MIB))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(
        volume.accessible_topology[0].segments, want,
        "volumes are made there"
    );

    // A misspelt key stops the start, naming the key and the file.
    std::fs::write(&config, "zone: z-file\nregoin: r-file\n").unwrap();
    let out = std::process::Command::new(binary("csi"))
        .arg(format!(
            "--endpoint=unix://{}",
            dir.path().join("bad.sock").display()
        ))
        .arg(format!(
            "--state-dir={}",
            dir.path().join("state").display()
        ))
        .arg(format!(
            "--node-state-dir={}",
            dir.path().join("node").display()
        ))
        .arg(&arg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("regoin") && err.contains("cloud-config"),
        "{err}"
    );
}

/// Every real cloud's overlay, rendered, starts each of its binaries (csi controller and
/// node, ccm, discoverer) with the container's own args and env: without the cloud-config
/// Secret each fails only for lack of credentials, naming what is missing; with the
/// overlay's own Secret (placeholders) each gets past its configuration and says that the
/// provider's cloud calls are not in this build — before contacting anything, and
/// without ever echoing a password.
#[test]
fn every_overlay_starts_every_binary_until_credentials_or_the_provider_are_missing() {
    use overcast_integration::manifests::{kustomizations, Manifests};
    // What each cloud says is missing when it has no configuration at all.
    let missing = |cloud: &str| match cloud {
        "dvp" => "DVP_NAMESPACE",
        "openstack" => "auth-url in [Global]",
        "vsphere" => "a vCenter",
        "zvirt" => "ZVIRT_API_URL",
        other => panic!("overlay {other}: add what it lacks here"),
    };
    let mut checked = 0;
    for dir in kustomizations("overlays") {
        let cloud = dir.file_name().unwrap().to_string_lossy().into_owned();
        // A `-without-deckhouse` twin runs its overlay's workloads as they are (deploy.rs:
        // it is the overlay plus node-manager's namespace).
        if cloud == "local" || cloud.ends_with("-without-deckhouse") {
            continue;
        }
        let m = Manifests::load(&dir).unwrap();
        let secret = m
            .secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some("overcast-cloud-config"))
            .and_then(|s| s.string_data.as_ref()?.get("cloud-config").cloned())
            .unwrap_or_else(|| panic!("overlay {cloud}: cloud-config Secret"));
        for pod in m.pods() {
            for c in &pod.spec.containers {
                let bin = c
                    .command
                    .as_ref()
                    .and_then(|c| c.first())
                    .map(|c| c.rsplit('/').next().unwrap_or_default().to_owned())
                    .unwrap_or_default();
                if !["csi", "ccm", "discoverer"].contains(&bin.as_str()) {
                    continue;
                }
                let root = tempfile::tempdir().unwrap();
                let r = root.path().display().to_string();
                // The container's paths, moved under a scratch root.
                let args: Vec<String> = c
                    .args
                    .iter()
                    .flatten()
                    .map(|a| match a.split_once('=') {
                        Some((k, v)) if v.starts_with("unix:///") => {
                            format!("{k}=unix://{r}{}", &v[7..])
                        }
                        Some((k, v)) if v.starts_with('/') => format!("{k}={r}{v}"),
                        _ => a.clone(),
                    })
                    .collect();
                // The container's env paths likewise (the vsphere node plugin's
                // CLOUD_CONFIG, say).
                let env: Option<Vec<k8s_openapi::api::core::v1::EnvVar>> =
                    c.env.clone().map(|list| {
                        list.into_iter()
                            .map(|mut e| {
                                if let Some(v) = e.value.as_ref().filter(|v| v.starts_with('/')) {
                                    e.value = Some(format!("{r}{v}"));
                                }
                                e
                            })
                            .collect()
                    });
                let config = args
                    .iter()
                    .find_map(|a| a.strip_prefix("--cloud-config="))
                    .map(str::to_owned)
                    .or_else(|| {
                        env.iter()
                            .flatten()
                            .find(|e| e.name == "CLOUD_CONFIG")
                            .and_then(|e| e.value.clone())
                    })
                    .map(std::path::PathBuf::from);
                let run = || {
                    let mut cmd = std::process::Command::new(binary(&bin));
                    cmd.args(&args)
                        .env_clear()
                        .env("PATH", std::env::var("PATH").unwrap_or_default());
                    for e in env.iter().flatten() {
                        match (&e.value, &e.value_from) {
                            (Some(v), _) => cmd.env(&e.name, v),
                            (None, Some(_)) => cmd.env(&e.name, "overcast-it-node"),
                            _ => &mut cmd,
                        };
                    }
                    cmd.env("KUBECONFIG", format!("{r}/no-kubeconfig"));
                    cmd.stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::piped());
                    let mut child = cmd.spawn().expect("run");
                    let started = std::time::Instant::now();
                    // A binary that starts serving (the local cloud, say) is a failure
                    // of this test, not a hang.
                    let status = loop {
                        if let Some(status) = child.try_wait().expect("wait") {
                            break status;
                        }
                        if started.elapsed() > Duration::from_secs(20) {
                            let _ = child.kill();
                            let _ = child.wait();
                            panic!("{cloud} {bin} {args:?} did not stop at start");
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    };
                    assert!(!status.success(), "{cloud} {bin} exited 0");
                    let mut err = String::new();
                    std::io::Read::read_to_string(
                        &mut child.stderr.take().expect("stderr"),
                        &mut err,
                    )
                    .expect("stderr");
                    err
                };
                let what = format!("overlay {cloud}, {} {}, {bin}", pod.kind, pod.name);
                // The CSI drivers that are built (DVP's, OpenStack's): with their
                // configuration they serve (nothing is contacted before the first call).
                let csi_built = bin == "csi"
                    && ["dvp", "openstack", "zvirt", "vsphere"].contains(&cloud.as_str());
                if csi_built && config.is_none() {
                    // Their node plugins need no cloud configuration: they serve.
                    assert!(
                        serves_for_a_while(&binary(&bin), &args, &env),
                        "{what}: did not serve"
                    );
                    checked += 1;
                    continue;
                }
                let err = run();
                assert!(
                    !err.contains("kubeconfig") || err.contains("parent"),
                    "{what}: said nothing else first: {err}"
                );
                let Some(config) = config else {
                    // The node plugin reads no cloud config; its provider is what is missing.
                    assert!(err.contains("not in this build yet"), "{what}: {err}");
                    checked += 1;
                    continue;
                };
                assert!(
                    err.contains(&format!("cloud \"{cloud}\" lacks credentials or settings"))
                        && err.contains(missing(&cloud)),
                    "{what}: {err}"
                );
                std::fs::create_dir_all(config.parent().unwrap()).unwrap();
                std::fs::write(&config, &secret).unwrap();
                if csi_built && cloud != "dvp" {
                    assert!(
                        serves_for_a_while(&binary(&bin), &args, &env),
                        "{what}: did not serve with the overlay's configuration"
                    );
                    checked += 1;
                    continue;
                }
                let err = run();
                assert!(
                    !err.contains("change-me"),
                    "{what}: a password in the output: {err}"
                );
                if cloud == "dvp" {
                    // The overlay's parent kubeconfig is a placeholder without a cluster.
                    assert!(
                        err.contains("a cluster (server address) in the parent kubeconfig"),
                        "{what}: {err}"
                    );
                } else if (cloud == "openstack" && (bin == "discoverer" || bin == "ccm"))
                    || (cloud == "zvirt" && bin != "csi")
                    || (cloud == "vsphere" && bin != "csi")
                {
                    // Past its cloud's configuration (nothing contacted): next is this
                    // cluster's API, which the test gives none of.
                    assert!(err.contains("no-kubeconfig"), "{what}: {err}");
                } else {
                    assert!(
                        err.contains(&format!("cloud \"{cloud}\": its configuration is complete"))
                            && err.contains("not in this build yet"),
                        "{what}: {err}"
                    );
                }
                checked += 1;
            }
        }
    }
    assert_eq!(
        checked,
        4 * 4,
        "four overlays, four binaries' containers each"
    );
}

/// Whether `bin` with `args` and the container's `env` is still running after 3 s (then
/// stopped): a node plugin that needs no cloud configuration serves at once.
fn serves_for_a_while(
    bin: &std::path::Path,
    args: &[String],
    env: &Option<Vec<k8s_openapi::api::core::v1::EnvVar>>,
) -> bool {
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for e in env.iter().flatten() {
        match (&e.value, &e.value_from) {
            (Some(v), _) => cmd.env(&e.name, v),
            (None, Some(_)) => cmd.env(&e.name, "overcast-it-node"),
            _ => &mut cmd,
        };
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("run");
    std::thread::sleep(Duration::from_secs(3));
    let running = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    running
}

/// An unknown cloud name is refused naming the known ones; the csi still reads the older
/// `CSI_CLOUD`.
#[test]
fn an_unknown_cloud_is_refused_by_every_binary() {
    let run = |bin: &str, env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(binary(bin));
        if bin == "csi" {
            cmd.arg("--endpoint=unix:///nonexistent/overcast/csi.sock");
        }
        cmd.env_remove("OVERCAST_CLOUD")
            .env_remove("CSI_CLOUD")
            .env_remove("CLOUD_CONFIG")
            .env("KUBECONFIG", "/nonexistent/kubeconfig");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run");
        assert!(!out.status.success(), "{bin} {env:?} exited 0");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run("csi", &[("CSI_CLOUD", "zvirt")]);
    assert!(err.contains("cloud \"zvirt\" lacks credentials"), "{err}");
    for bin in ["csi", "ccm", "discoverer"] {
        let err = run(bin, &[("OVERCAST_CLOUD", "aws")]);
        assert!(
            err.contains("unknown cloud \"aws\" (one of: local, dvp, openstack, vsphere, zvirt)"),
            "{bin}: {err}"
        );
    }
}
