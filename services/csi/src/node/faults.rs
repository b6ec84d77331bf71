//! Fault points for tests that run the plugin as users do — from its image, on a real
//! node — where no test can reach inside the process. Off unless `OVERCAST_FAULTS`
//! names one; each fires once per node state directory (a marker file records that it
//! did), so the restarted plugin then runs normally.
//!
//! - `kill-during-mkfs`: the first format of a volume stops as a kill in the middle of
//!   mkfs leaves it — part of mkfs's output written, no superblock yet — and the plugin
//!   ends at once, as a SIGKILL would end it. What a kill at that moment does, made
//!   deterministic.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The variable naming the fault points to arm (comma-separated).
pub const VARIABLE: &str = "OVERCAST_FAULTS";
pub const KILL_DURING_MKFS: &str = "kill-during-mkfs";

#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// The marker of `kill-during-mkfs`, when that fault is armed.
    kill_during_mkfs: Option<PathBuf>,
}

impl Faults {
    /// The faults `OVERCAST_FAULTS` arms, with their markers in `state_dir`. An unknown
    /// name is an error, so a misspelt fault never passes for one that did not fire.
    pub fn from_env(state_dir: &Path) -> Result<Self, String> {
        let mut faults = Self::default();
        let Ok(value) = std::env::var(VARIABLE) else {
            return Ok(faults);
        };
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                KILL_DURING_MKFS => {
                    faults.kill_during_mkfs =
                        Some(state_dir.join(format!("fault-{KILL_DURING_MKFS}.fired")))
                }
                other => return Err(format!("{VARIABLE}: unknown fault {other:?}")),
            }
        }
        if faults.kill_during_mkfs.is_some() {
            tracing::warn!(faults = %value, "fault points armed (tests only)");
        }
        Ok(faults)
    }

    /// At the start of a format of `device`: the first time `kill-during-mkfs` is armed,
    /// writes what mkfs writes before its superblock (non-zero blocks that name no
    /// filesystem) and ends this process at once.
    pub fn during_mkfs(&self, device: &Path) {
        let Some(marker) = &self.kill_during_mkfs else {
            return;
        };
        // Fired already (this directory's marker): run normally.
        if std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(marker)
            .and_then(|f| f.sync_all())
            .is_err()
        {
            return;
        }
        let written = std::fs::OpenOptions::new()
            .write(true)
            .open(device)
            .and_then(|mut dev| {
                // Past the superblock's place (1 KiB), inside what the blank check reads.
                dev.seek(SeekFrom::Start(64 << 10))?;
                dev.write_all(&[0xa5; 64 << 10])?;
                dev.sync_all()
            });
        tracing::error!(device = %device.display(), ?written, "fault {KILL_DURING_MKFS}: killing the plugin in the middle of a format");
        // Gone at once, as SIGKILL leaves it: no destructor, no flush. Not SIGKILL to
        // itself: in a container the plugin is its PID namespace's init, which the
        // kernel shields from signals sent from inside.
        // SAFETY: _exit ends the process; it touches no memory of ours.
        unsafe { libc::_exit(137) }
    }
}
