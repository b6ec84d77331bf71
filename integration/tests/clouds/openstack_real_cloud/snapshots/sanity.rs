//! csi-sanity's snapshot and clone specs on Cinder.

use super::*;

/// kubernetes-csi's csi-sanity, its snapshot and clone specs (the controller's: the fake
/// Nova attaches no device a node could stage), against the real `csi` binary on Cinder,
/// in mount and block mode.
/// Runs when `OVERCAST_CSI_SANITY` names a csi-sanity binary.
#[tokio::test]
async fn csi_sanity_s_snapshot_and_clone_specs_pass_on_cinder() {
    let Ok(sanity) = std::env::var("OVERCAST_CSI_SANITY") else {
        overcast_integration::say_skipped(
            "set OVERCAST_CSI_SANITY to run csi-sanity's snapshot specs against the OpenStack provider",
        );
        return;
    };
    let _turn = CLOUD.lock().await;
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let pid = std::process::id();
    let server = cloud.boot(&format!("overcast-it-sanity-{pid}")).await;
    let work = tempfile::tempdir().unwrap();
    let driver = driver(&cloud, work.path(), &server, "cinder.csi.openstack.org").await;
    let extra = [
        "--ginkgo.focus=[Ss]napshot|source volume|[Cc]lon".to_owned(),
        // Cinder's sizes are whole GiB; csi-sanity asks for exactly its test size.
        format!("--csi.testvolumesize={GIB}"),
        "--ginkgo.v".to_owned(),
        // A spec failed once is run once more: the simulator's services keep their state
        // in SQLite, whose single writer answers 500 under CI's load (docs/TESTING.md),
        // which the driver rightly answers UNAVAILABLE and csi-sanity does not retry
        // (CI28: "already existing name and different source volume ID", in block mode
        // only). A spec that fails twice fails; one that needed the second run is said.
        "--ginkgo.flake-attempts=2".to_owned(),
    ];
    // Both volume modes: the requests' capabilities are block or mount.
    for block in [false, true] {
        let run =
            overcast_integration::run_csi_sanity(&sanity, &driver, block, &extra, "OpenStack")
                .await;
        // What the driver said went wrong, for a failure's message.
        let said: Vec<String> = driver
            .log_text()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .map(str::to_owned)
            .collect();
        assert!(
            run.success && run.failures.is_empty(),
            "csi-sanity's snapshot specs on OpenStack (block {block}) failed: {:#?}\n{}\nthe driver's warnings and errors (last 30):\n{}",
            run.failures,
            run.tail,
            said[said.len().saturating_sub(30)..].join("\n")
        );
        if run.tail.contains("FLAKEY") || run.summary.contains("Flaked") {
            eprintln!(
                "csi-sanity on OpenStack (block {block}): a spec passed only at its second run: {}\nits first run:\n{}\nthe driver's warnings and errors (last 30):\n{}",
                run.summary,
                run.flaked.join("\n---\n"),
                said[said.len().saturating_sub(30)..].join("\n")
            );
        }
        assert!(run.summary.contains(" 0 Failed"), "{}", run.summary);
        let passed: u32 = run
            .summary
            .split(" Passed")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(passed >= 15, "the snapshot specs ran: {}", run.summary);
        let for_snapshots: Vec<&String> = run
            .skip_reasons
            .iter()
            .filter(|r| {
                let r = r.to_lowercase();
                (r.contains("snapshot") && !r.contains("group")) || r.contains("clone")
            })
            .collect();
        assert!(
            for_snapshots.is_empty(),
            "skipped for what the driver advertises: {for_snapshots:?}"
        );
    }
    drop(driver);
    cloud.delete_server(&server).await;
}
