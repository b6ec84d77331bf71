//! Unix-socket endpoints in the kubernetes-csi spelling (`unix:///csi/csi.sock`), bound
//! after clearing a stale socket a crashed predecessor left, but never one that a live
//! process still serves.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("endpoint {0:?} is not a unix socket (expected unix:///path/to/socket)")]
    NotUnix(String),
    #[error("endpoint {0:?} must name an absolute path")]
    NotAbsolute(String),
}

/// `unix:///a/b.sock`, `unix:/a/b.sock` and `/a/b.sock` all name `/a/b.sock`.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, EndpointError> {
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("unix:") {
        rest
    } else if endpoint.contains("://") {
        return Err(EndpointError::NotUnix(endpoint.to_owned()));
    } else {
        endpoint
    };
    if !path.starts_with('/') {
        return Err(EndpointError::NotAbsolute(endpoint.to_owned()));
    }
    Ok(PathBuf::from(path))
}

/// Binds `path`, creating its directory and replacing a stale socket.
pub async fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{} is served by another process", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // The file appears at `bind(2)`, before `listen(2)`: a watcher that dials it as soon
    // as it appears (kubelet's plugin watcher, a test) would be refused in between. So
    // the socket is bound and listening under a temporary name first, then renamed into
    // place: it appears only once it accepts. The name is short (sun_path is 108 bytes).
    let tmp = path.with_file_name(format!(".{}.sock.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// The socket file this process bound, removed when dropped: at shutdown, and on every
/// other way out once it is bound — an error later in start-up, a signal that ends the
/// start (its future dropped) — so a socket no one serves is never left behind.
#[derive(Debug)]
pub struct Owned(PathBuf);

impl Owned {
    /// Takes `path`, just bound by [`bind`], as this process's to remove.
    pub fn new(path: PathBuf) -> Self {
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        remove(&self.0);
    }
}

/// Removes the socket file at shutdown so the next start finds a clean directory.
pub fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "could not remove socket");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_in_every_spelling() {
        for ok in [
            "unix:///csi/csi.sock",
            "unix:/csi/csi.sock",
            "/csi/csi.sock",
        ] {
            assert_eq!(
                parse_endpoint(ok).unwrap(),
                PathBuf::from("/csi/csi.sock"),
                "{ok}"
            );
        }
        assert!(matches!(
            parse_endpoint("tcp://127.0.0.1:10000"),
            Err(EndpointError::NotUnix(_))
        ));
        assert!(matches!(
            parse_endpoint("unix://csi.sock"),
            Err(EndpointError::NotAbsolute(_))
        ));
    }

    #[tokio::test]
    async fn stale_sockets_are_replaced_live_ones_and_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/csi.sock");
        let live = bind(&path).await.unwrap();
        // It appears under its own name only, already accepting.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["csi.sock"]);
        tokio::net::UnixStream::connect(&path).await.unwrap();
        let err = bind(&path).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        drop(live);
        // The file is still there, but nobody listens: it is stale.
        assert!(path.exists());
        let _again = bind(&path).await.unwrap();

        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"data").unwrap();
        assert_eq!(
            bind(&plain).await.unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read(&plain).unwrap(), b"data");
    }
}
