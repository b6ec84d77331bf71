//! One tower layer that logs every gRPC call's method, code and latency and counts it
//! in Prometheus metrics. Handlers do not log what they return; this layer does, once.
//! It sees only the path and the status, never a request body, so secrets cannot leak
//! through it.
//!
//! It also keeps every error message short enough for any client: messages name the
//! request's fields, a caller can send fields of any length, and an HTTP/2 client resets
//! a stream whose headers pass its limit (16 KiB for most) — the caller would get a
//! PROTOCOL_ERROR instead of the code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tonic::codegen::http;
use tower::{Layer, Service};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

/// Calls by method and code, and their latency by method.
pub struct GrpcMetrics {
    calls: Family<CallLabels, Counter>,
    latency: Family<MethodLabels, Histogram, fn() -> Histogram>,
}

fn latency_histogram() -> Histogram {
    // 50 µs to ~1.6 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl GrpcMetrics {
    /// Creates the metrics and registers them under `prefix` (e.g. `csi`).
    pub fn register(registry: &mut Registry, prefix: &str) -> Arc<Self> {
        let metrics = Arc::new(Self {
            calls: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        });
        let sub = registry.sub_registry_with_prefix(prefix);
        sub.register(
            "grpc_calls",
            "gRPC calls served, by method and code",
            metrics.calls.clone(),
        );
        sub.register(
            "grpc_call_duration_seconds",
            "gRPC call latency, by method",
            metrics.latency.clone(),
        );
        metrics
    }

    fn observe(&self, method: &str, code: tonic::Code, seconds: f64) {
        self.calls
            .get_or_create(&CallLabels {
                method: method.to_owned(),
                code: code_name(code),
            })
            .inc();
        self.latency
            .get_or_create(&MethodLabels {
                method: method.to_owned(),
            })
            .observe(seconds);
    }
}

fn code_name(code: tonic::Code) -> String {
    format!("{code:?}")
}

#[derive(Clone, Default)]
pub struct GrpcLogLayer {
    metrics: Option<Arc<GrpcMetrics>>,
}

impl GrpcLogLayer {
    pub fn new(metrics: Option<Arc<GrpcMetrics>>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for GrpcLogLayer {
    type Service = GrpcLog<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcLog {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
pub struct GrpcLog<S> {
    inner: S,
    metrics: Option<Arc<GrpcMetrics>>,
}

impl<S, B, RB> Service<http::Request<B>> for GrpcLog<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.uri().path().to_owned();
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let response = self.inner.call(req);
        Box::pin(async move {
            let mut result = response.await;
            if let Ok(resp) = result.as_mut() {
                bound_message(resp.headers_mut());
            }
            let elapsed = started.elapsed();
            // Unary errors travel "trailers-only": grpc-status sits in the headers. A
            // response without it carries its status in trailers, which for our unary
            // services means success.
            let (code, message) = match &result {
                Ok(resp) => {
                    let headers = resp.headers();
                    let code = headers
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<i32>().ok())
                        .map_or(tonic::Code::Ok, tonic::Code::from_i32);
                    let message = headers
                        .get("grpc-message")
                        .and_then(|v| v.to_str().ok())
                        .map(percent_decode);
                    (code, message)
                }
                Err(_) => (tonic::Code::Unknown, Some("transport error".to_owned())),
            };
            let latency_us = elapsed.as_micros() as u64;
            if code == tonic::Code::Ok && !changes_state(&method) {
                tracing::debug!(%method, code = ?code, latency_us, "rpc");
            } else if code == tonic::Code::Ok {
                tracing::info!(%method, code = ?code, latency_us, "rpc");
            } else {
                tracing::info!(%method, code = ?code, latency_us, message = message.as_deref().unwrap_or(""), "rpc");
            }
            if let Some(m) = metrics {
                m.observe(&method, code, elapsed.as_secs_f64());
            }
            result
        })
    }
}

/// A call that makes, removes, attaches, mounts or grows something: its success is an
/// event an operator looks for (and what the real-node benchmark times each stage by),
/// where probes, capability and stats calls, polled all the time, stay at debug.
fn changes_state(method: &str) -> bool {
    let name = method.rsplit('/').next().unwrap_or(method);
    [
        "Create",
        "Delete",
        "Publish",
        "Unpublish",
        "Stage",
        "Unstage",
        "Expand",
    ]
    .iter()
    .any(|verb| name.contains(verb))
}

/// The longest status message sent, in bytes before encoding.
const MAX_MESSAGE_BYTES: usize = 2048;

/// Cuts an over-long `grpc-message` down to [`MAX_MESSAGE_BYTES`], saying so.
fn bound_message(headers: &mut http::HeaderMap) {
    let Some(raw) = headers.get("grpc-message").and_then(|v| v.to_str().ok()) else {
        return;
    };
    if raw.len() <= MAX_MESSAGE_BYTES {
        return;
    }
    let message = percent_decode(raw);
    if message.len() <= MAX_MESSAGE_BYTES {
        return;
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = format!(
        "{}… ({} more bytes cut)",
        &message[..end],
        message.len() - end
    );
    if let Ok(value) = http::HeaderValue::from_str(&percent_encode(&cut)) {
        headers.insert("grpc-message", value);
    }
}

/// grpc-message's encoding: every byte outside printable ASCII, and `%`, as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// grpc-message is percent-encoded on the wire.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(
            percent_decode("volume%20id%20is%20empty"),
            "volume id is empty"
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("a%2"), "a%2");
    }

    #[test]
    fn state_changing_calls_are_told_from_polled_ones() {
        for m in [
            "/csi.v1.Controller/CreateVolume",
            "/csi.v1.Controller/DeleteVolume",
            "/csi.v1.Controller/ControllerPublishVolume",
            "/csi.v1.Controller/ControllerUnpublishVolume",
            "/csi.v1.Controller/ControllerExpandVolume",
            "/csi.v1.Node/NodeStageVolume",
            "/csi.v1.Node/NodeUnstageVolume",
            "/csi.v1.Node/NodePublishVolume",
            "/csi.v1.Node/NodeUnpublishVolume",
            "/csi.v1.Node/NodeExpandVolume",
        ] {
            assert!(changes_state(m), "{m}");
        }
        for m in [
            "/csi.v1.Identity/Probe",
            "/csi.v1.Identity/GetPluginInfo",
            "/csi.v1.Controller/GetCapacity",
            "/csi.v1.Controller/ListVolumes",
            "/csi.v1.Controller/ControllerGetCapabilities",
            "/csi.v1.Node/NodeGetVolumeStats",
            "/csi.v1.Node/NodeGetInfo",
            "/pluginregistration.Registration/GetInfo",
        ] {
            assert!(!changes_state(m), "{m}");
        }
    }

    #[test]
    fn long_messages_are_cut_to_a_size_every_client_takes() {
        let long = format!("stage volume v at /k/{}: bad", "é".repeat(10_000));
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "grpc-message",
            http::HeaderValue::from_str(&percent_encode(&long)).unwrap(),
        );
        bound_message(&mut headers);
        let sent = headers["grpc-message"].to_str().unwrap();
        assert!(sent.len() < 3 * MAX_MESSAGE_BYTES + 100, "{}", sent.len());
        let got = percent_decode(sent);
        assert!(got.starts_with("stage volume v at /k/é"));
        assert!(got.ends_with("more bytes cut)"), "{got}");

        let short = "volume_id is required";
        headers.insert("grpc-message", http::HeaderValue::from_static(short));
        bound_message(&mut headers);
        assert_eq!(headers["grpc-message"], short, "short ones are untouched");
        assert_eq!(percent_decode(&percent_encode("100% é\n")), "100% é\n");
    }
}
