//! kubernetes-csi's csi-sanity run against a driver, and its verdict read from its output.

use crate::{unmount_under, Csi};

/// csi-sanity's verdict on one run.
pub struct SanityRun {
    pub success: bool,
    /// Its `[FAIL]` lines, and the `[FAILED]` blocks of attempts that were not retried.
    pub failures: Vec<String>,
    /// The `[FAILED]` blocks of attempts run again (`--ginkgo.flake-attempts`), with the
    /// lines before each (what failed): a spec that then passed is a flake, not a failure.
    pub flaked: Vec<String>,
    /// Its summary line (`SUCCESS! -- 57 Passed | 0 Failed | …`), empty when missing.
    pub summary: String,
    /// The last 80 lines of its output, for a failure's message.
    pub tail: String,
    /// Why each skipped spec was skipped (`ControllerModifyVolume not supported`), one
    /// entry a spec; only with `--ginkgo.v` among the arguments (ginkgo prints the
    /// reasons only then).
    pub skip_reasons: Vec<String>,
}

impl SanityRun {
    /// How many specs passed, from the summary line (0 when there is none).
    pub fn passed(&self) -> u32 {
        self.summary
            .split('|')
            .find_map(|p| {
                p.trim()
                    .trim_start_matches("SUCCESS! --")
                    .trim_start_matches("FAIL! --")
                    .trim()
                    .strip_suffix(" Passed")
            })
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The skip reasons that are none of `expected` (what a driver rightly does not run).
    pub fn unexplained_skips(&self, expected: &[&str]) -> Vec<&String> {
        self.skip_reasons
            .iter()
            .filter(|r| !expected.iter().any(|e| r.eq_ignore_ascii_case(e)))
            .collect()
    }
}

/// Runs kubernetes-csi's csi-sanity `binary` against the driver `csi`, in block or mount
/// mode, with `extra` arguments; whatever it left mounted under the driver's directory
/// is unmounted, also when it failed. The summary is written to stderr under `label`.
pub async fn run_csi_sanity(
    binary: &str,
    csi: &Csi,
    block: bool,
    extra: &[String],
    label: &str,
) -> SanityRun {
    let dir = csi.dir.path().to_path_buf();
    let mut cmd = tokio::process::Command::new(binary);
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
        .arg("--ginkgo.no-color")
        .args(extra)
        // csi-test v5.3.1's utils.Connect (utils/grpcutil.go) dials without blocking, then
        // waits for a change from `conn.GetState()`: when the connection is Ready before that
        // first GetState — the handshake ran on another Go thread while this one was
        // descheduled, as on a loaded CI machine — it waits for a change that never comes and
        // fails the whole run with "Connection timed out" a minute later (sanity.go:272; CI of
        // issue 69, twice). On one Go thread nothing runs between the Dial and the GetState.
        .env("GOMAXPROCS", "1");
    if block {
        cmd.arg("--csi.testvolumeaccesstype=block");
    }
    let out = cmd.output().await.expect("run csi-sanity");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    unmount_under(&dir);
    let summary = text
        .lines()
        .find(|l| l.contains(" Passed | "))
        .unwrap_or_default()
        .to_owned();
    let mode = if block { "block" } else { "mount" };
    {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "csi-sanity on {label} ({mode}): {summary}"
        );
    }
    let lines: Vec<&str> = text.lines().collect();
    let (failures, flaked) = failures_of(&lines);
    SanityRun {
        success: out.status.success(),
        failures,
        flaked,
        summary,
        tail: lines[lines.len().saturating_sub(80)..].join("\n"),
        skip_reasons: lines
            .iter()
            .filter_map(|l| l.trim_start().strip_prefix("[SKIPPED] "))
            // Not ginkgo's "[SKIPPED] in [BeforeEach] - file:line" location lines.
            .filter(|reason| !reason.starts_with("in ["))
            .map(str::to_owned)
            .collect(),
    }
}

/// The failed specs, and what ginkgo says of each failure (its `[FAILED]` block: the
/// error, the spec's line), which the tail may not reach; apart, the blocks an "Attempt
/// #n Failed. Retrying" follows — run again, a flake unless the spec failed at last (then
/// its own final block or `[FAIL]` line is among the failures) — with the lines before
/// each (what failed).
fn failures_of(lines: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut failures = Vec::new();
    let mut flaked = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !(l.contains("[FAIL]") || l.contains("[FAILED]")) {
            continue;
        }
        let after = &lines[i..(i + 8).min(lines.len())];
        if l.contains("[FAILED]") && after.iter().any(|a| a.contains("Retrying")) {
            flaked.push(lines[i.saturating_sub(20)..(i + 3).min(lines.len())].join("\n"));
        } else if l.contains("[FAILED]") {
            failures.push(after.join("\n"));
        } else {
            failures.push(l.to_string());
        }
    }
    (failures, flaked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// csi-sanity v5.3.1's output in CI39, as its failure message quoted it (the
    /// `[FAILED]` block and the summary line, verbatim): a spec's first attempt failed, its
    /// second passed.
    const FLAKED: &str = "  [FAILED] in [It] - /tmp/tmp.9tHNsTaZuy/csi-test-5.3.1/pkg/sanity/controller.go:1454 @ 12/05/26 02:40:41.475

  Attempt #1 Failed.  Retrying \u{21ba} @ 12/05/26 02:40:41.476

  STEP: reusing connection to CSI driver at unix:///tmp/overcast-it-XVrPSk/csi.sock @ 12/05/26 02:40:41.476
  STEP: creating mount and staging directories @ 12/05/26 02:40:41.476
  STEP: creating a volume @ 12/05/26 02:40:41.479
  STEP: creating a snapshot @ 12/05/26 02:40:41.811
SUCCESS! -- 19 Passed | 0 Failed | 1 Flaked | 1 Pending | 72 Skipped";

    #[test]
    fn a_retried_attempt_is_a_flake_and_a_last_one_a_failure() {
        let lines: Vec<&str> = FLAKED.lines().collect();
        let (failures, flaked) = failures_of(&lines);
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(flaked.len(), 1);
        assert!(flaked[0].contains("controller.go:1454"), "{flaked:?}");

        // The same spec failing at its last attempt too: a block no retry follows, and
        // ginkgo's summary of it (shaped as ginkgo v2 prints them).
        let failed = format!(
            "{}\n  [FAILED] in [It] - /tmp/csi-test-5.3.1/pkg/sanity/controller.go:1454 @ 12/05/26 02:40:45.475\n\
             \u{2022} [FAILED] [4.336 seconds]\nSummarizing 1 Failure:\n  \
             [FAIL] CreateSnapshot [Controller Server] [It] should succeed when creating snapshot with maximum-length name\n\
             FAIL! -- 18 Passed | 1 Failed | 1 Pending | 72 Skipped",
            FLAKED.lines().take(8).collect::<Vec<_>>().join("\n")
        );
        let lines: Vec<&str> = failed.lines().collect();
        let (failures, flaked) = failures_of(&lines);
        assert_eq!(flaked.len(), 1, "the first attempt");
        assert!(
            failures.iter().any(|f| f.contains("maximum-length name")),
            "{failures:?}"
        );
        assert!(
            failures.iter().any(|f| f.contains("02:40:45.475")),
            "the last attempt's block: {failures:?}"
        );
    }
}
