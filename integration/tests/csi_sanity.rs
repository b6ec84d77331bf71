//! kubernetes-csi's own conformance suite, csi-sanity, against the real `csi` binary on
//! the local cloud, in mount and in block mode. Runs when `OVERCAST_CSI_SANITY` names a
//! csi-sanity binary (`.ci/run` builds v5.3.1 with `../shared/kit/csi-sanity.sh`); otherwise
//! it says clearly that it was skipped.
//!
//! Expected: no failure in either mode. The skipped specs are those of capabilities the
//! driver does not advertise (snapshots, group snapshots, cloning, ModifyVolume), which
//! csi-sanity skips by itself; the one pending spec is pending upstream.

use std::process::Command;

use overcast_integration::{detach_loops_under, say_skipped, unmount_under, Csi};

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
    let dir = csi.dir.path().to_path_buf();
    let mut cmd = Command::new(sanity);
    cmd.arg(format!("--csi.endpoint=unix://{}", csi.socket.display()))
        .arg(format!(
            "--csi.stagingdir={}",
            dir.join("sanity-staging").display()
        ))
        .arg(format!(
            "--csi.mountdir={}",
            dir.join("sanity-target").display()
        ))
        .arg("--csi.testvolumesize=16777216")
        .arg("--ginkgo.no-color");
    if block {
        cmd.arg("--csi.testvolumeaccesstype=block");
    }
    let out = cmd.output().expect("run csi-sanity");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let mode = if block { "block" } else { "mount" };
    let counts = summary(&text);
    // Whatever it left mounted or attached goes, also when it failed.
    unmount_under(&dir);
    detach_loops_under(&csi.state_dir);
    let failures: Vec<&str> = text.lines().filter(|l| l.contains("[FAIL]")).collect();
    assert!(
        out.status.success() && failures.is_empty(),
        "csi-sanity ({mode}) failed: {failures:#?}\n{}",
        text.lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let (passed, failed, pending, skipped) =
        counts.unwrap_or_else(|| panic!("no summary in csi-sanity's output:\n{text}"));
    // Shown in the CI log, past the harness's capture.
    {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "csi-sanity ({mode}): {passed} passed, {failed} failed, {pending} pending, {skipped} skipped"
        );
    }
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
