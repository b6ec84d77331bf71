//! kubernetes-csi's own conformance suite, csi-sanity, against the real `csi` binary on
//! the local cloud, in mount and in block mode. Runs when `OVERCAST_CSI_SANITY` names a
//! csi-sanity binary (`.ci/run` builds v5.3.1 with `../shared/kit/csi-sanity.sh`); otherwise
//! it says clearly that it was skipped.
//!
//! Expected: no failure in either mode. The skipped specs are those of capabilities the
//! driver does not advertise (snapshots, group snapshots, cloning, ModifyVolume), which
//! csi-sanity skips by itself; the one pending spec is pending upstream.

use overcast_integration::{detach_loops_under, say_skipped, Csi};

const ENV: &str = "OVERCAST_CSI_SANITY";

/// (passed, failed, pending, skipped) from csi-sanity's summary line.
fn summary(out: &str) -> Option<(u32, u32, u32, u32)> {
    let line = out.lines().find(|l| l.contains(" Passed | "))?;
    let n = |label: &str| -> Option<u32> {
        let before = line.split(label).next()?;
        before
            .rsplit(|c: char| !c.is_ascii_digit())
            .find(|s| !s.is_empty())?
            .parse()
            .ok()
    };
    Some((n(" Passed")?, n(" Failed")?, n(" Pending")?, n(" Skipped")?))
}

async fn run(sanity: &str, block: bool) {
    let csi = Csi::start(&[]).await;
    let mode = if block { "block" } else { "mount" };
    let run =
        overcast_integration::run_csi_sanity(sanity, &csi, block, &[], "the local cloud").await;
    // Whatever it left attached goes, also when it failed.
    detach_loops_under(&csi.state_dir);
    assert!(
        run.success && run.failures.is_empty(),
        "csi-sanity ({mode}) failed: {:#?}\n{}",
        run.failures,
        run.tail
    );
    let (passed, failed, _pending, skipped) = summary(&run.summary)
        .unwrap_or_else(|| panic!("no summary in csi-sanity's output:\n{}", run.tail));
    assert_eq!(failed, 0);
    assert!(passed >= 57, "csi-sanity ({mode}) ran only {passed} specs");
    assert!(
        skipped <= 34,
        "csi-sanity ({mode}) skipped {skipped} specs: more than the unadvertised capabilities"
    );
}

#[tokio::test]
async fn csi_sanity_passes_in_mount_and_block_mode() {
    let Ok(sanity) = std::env::var(ENV) else {
        say_skipped(&format!(
            "set {ENV} to a csi-sanity binary (../shared/kit/csi-sanity.sh builds one) to run kubernetes-csi's conformance suite"
        ));
        return;
    };
    run(&sanity, false).await;
    run(&sanity, true).await;
}

#[test]
fn the_summary_line_is_read() {
    let line = "SUCCESS! -- 57 Passed | 0 Failed | 1 Pending | 34 Skipped";
    assert_eq!(summary(line), Some((57, 0, 1, 34)));
    let line = "FAIL! -- 54 Passed | 3 Failed | 1 Pending | 34 Skipped";
    assert_eq!(summary(line), Some((54, 3, 1, 34)));
}
