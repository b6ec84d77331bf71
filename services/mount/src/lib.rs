//! Node-side disk handling every cloud shares: find the attached device from what the
//! controller put in the publish context, probe it, format it only when blank, mount it
//! with system calls, read the mount table, grow the filesystem.

pub mod device;
pub mod format;
pub mod host;
pub mod loopfile;
pub mod mountinfo;
pub mod mounts;

use std::io;

pub use host::{Host, System};

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("{command} failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{command} did not finish within {seconds} s")]
    Timeout { command: String, seconds: u64 },
    #[error("no device found for {0} within the wait")]
    DeviceNotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// The device or path is held by someone else (mounted, open exclusively); nothing
    /// was changed.
    #[error("{0}")]
    InUse(String),
    /// The request cannot be served in the device's present state (read-only, too small
    /// for the filesystem asked for); nothing was changed.
    #[error("{0}")]
    Refused(String),
    /// A size the filesystem cannot take.
    #[error("{0}")]
    OutOfRange(String),
}

impl MountError {
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = MountError> = std::result::Result<T, E>;
