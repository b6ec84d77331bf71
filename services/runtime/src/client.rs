//! gRPC clients over Unix sockets, as the registrar and overcastctl reach a CSI driver.

use std::path::Path;
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
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
    }))
}
