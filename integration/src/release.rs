//! An earlier release of ours, for the upgrade tests: its binaries and its sources as
//! `.ci/run` builds them, once per machine, for each commit listed in
//! `integration/fixtures/upgrade/releases` (`$OVERCAST_TEST_RELEASES/<commit>/bin` and
//! `…/src`). What such a test checks is written by that release's own binaries, never by
//! this one's code.

use std::path::{Path, PathBuf};

pub const ENV: &str = "OVERCAST_TEST_RELEASES";

pub struct Release {
    pub commit: String,
    dir: PathBuf,
}

impl Release {
    /// The release's binary `name` (as its workspace built it).
    pub fn bin(&self, name: &str) -> PathBuf {
        let path = self.dir.join("bin").join(name);
        assert!(
            path.is_file(),
            "release {} has no binary {name} ({})",
            self.commit,
            path.display()
        );
        path
    }

    /// The release's images (`overcast-csi.tar`, `overcast-ccm.tar`, tagged with its
    /// commit) once `.ci/run`'s real node lane made them; `None` (said skipped) before.
    pub fn images(&self, what: &str) -> Option<PathBuf> {
        let dir = self.dir.join("images");
        if dir.join(".built").is_file() {
            return Some(dir);
        }
        crate::say_skipped(&format!(
            "release {}'s images are not made ({}: .ci/run's real node lane makes them); {what} needs them",
            self.commit,
            dir.display()
        ));
        None
    }

    /// A path in the release's sources (its layouts, overlays, …).
    pub fn src(&self, path: &str) -> PathBuf {
        self.dir.join("src").join(path)
    }
}

/// Release `commit` built, or `None` (said skipped: `ENV` unset or that release not
/// built) for `what`.
pub fn get(commit: &str, what: &str) -> Option<Release> {
    let Some(root) = std::env::var_os(ENV) else {
        crate::say_skipped(&format!(
            "set {ENV} (.ci/run builds the releases of integration/fixtures/upgrade/releases) to run {what}"
        ));
        return None;
    };
    let dir = Path::new(&root).join(commit);
    if !dir.join("bin/.built").is_file() {
        crate::say_skipped(&format!(
            "release {commit} is not built under {} (.ci/run builds it); {what} needs it",
            Path::new(&root).display()
        ));
        return None;
    }
    Some(Release {
        commit: commit.to_owned(),
        dir,
    })
}
