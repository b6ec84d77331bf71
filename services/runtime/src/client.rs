//! gRPC clients over Unix sockets, as the registrar and overcastctl reach a CSI driver.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// A channel to the gRPC server on the Unix socket at `path`. The connection is made
/// lazily and re-made after the server restarts, so one channel serves a long-lived
/// client across driver restarts.
pub fn unix_channel(path: &Path, timeout: Option<Duration>) -> Channel {
    let path = path.to_owned();
    // The authority is never resolved: the connector dials the socket.
    let mut endpoint =
        Endpoint::from_static("http://localhost").connect_timeout(Duration::from_secs(5));
    if let Some(t) = timeout {
        endpoint = endpoint.timeout(t);
    }
    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(connect(&path).await?)) }
    }))
}

/// The longest path the kernel takes for a socket (`sun_path`, 108 bytes with its NUL).
const SUN_PATH_MAX: usize = 107;

/// Connects to the Unix socket at `path`, however long: a CSI driver's socket under
/// kubelet's `/var/lib/kubelet/pods/<uid>/volumes/…` or `plugins/…` can run past what
/// `sun_path` holds. A longer path is reached through its directory, opened first:
/// `/proc/self/fd/<n>/<name>`.
pub async fn connect(path: &Path) -> std::io::Result<UnixStream> {
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return UnixStream::connect(path).await;
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return UnixStream::connect(path).await;
    };
    let dir = std::fs::File::open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    let stream = UnixStream::connect(&short).await;
    drop(dir);
    stream
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket whose path is longer than `sun_path` (as kubelet's pod directories make
    /// them) is reached; a short one as ever; a missing one is an error naming nothing
    /// else.
    #[tokio::test]
    async fn sockets_past_sun_path_are_reached() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp
            .path()
            .join("var/lib/kubelet/pods/0c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f/volumes")
            .join("kubernetes.io~csi/pvc-0c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f/mount");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("csi.sock");
        assert!(path.as_os_str().len() > SUN_PATH_MAX, "{}", path.display());
        // Bound the same way (the kernel refuses the long path itself).
        let held = std::fs::File::open(&dir).unwrap();
        let listener = tokio::net::UnixListener::bind(
            PathBuf::from(format!("/proc/self/fd/{}", held.as_raw_fd())).join("csi.sock"),
        )
        .unwrap();
        assert!(
            UnixStream::connect(&path).await.is_err(),
            "the kernel's limit"
        );
        let (client, server) = tokio::join!(connect(&path), listener.accept());
        client.expect("reached through its directory");
        server.unwrap();
        assert!(connect(&dir.join("gone.sock")).await.is_err());
    }
}
