//! A scripted Kubernetes API for unit tests: every request a reconcile makes is checked
//! against the next expected one (method, path, body) and answered from the script.
//! Anything unexpected — or missing at the end — fails the test.

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::Value;

pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub fn mock() -> (Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// One expected call and the answer to give.
pub struct Call {
    pub method: &'static str,
    pub path: String,
    /// Checks the request body (parsed JSON, `Null` when empty).
    pub check: Box<dyn Fn(&Value) + Send>,
    pub status: u16,
    pub reply: Value,
    /// Match any path that starts with `path` (names the server generates).
    pub prefix: bool,
}

impl Call {
    pub fn new(method: &'static str, path: impl Into<String>, reply: Value) -> Self {
        Self {
            method,
            path: path.into(),
            check: Box::new(|_| {}),
            status: 200,
            reply,
            prefix: false,
        }
    }

    pub fn checking(mut self, check: impl Fn(&Value) + Send + 'static) -> Self {
        self.check = Box::new(check);
        self
    }

    pub fn prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    pub fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }
}

/// Serves `calls` in order; returns how many were served. Panics on a mismatch.
pub async fn serve(mut handle: Handle, calls: Vec<Call>) -> usize {
    let mut served = 0;
    for call in calls {
        let (request, send) = handle
            .next_request()
            .await
            .unwrap_or_else(|| panic!("expected {} {}, got nothing", call.method, call.path));
        let method = request.method().as_str().to_owned();
        let mut path = request.uri().path().to_owned();
        if call.prefix && path.starts_with(&call.path) {
            path.clone_from(&call.path);
        }
        assert_eq!(
            (method.as_str(), path.as_str()),
            (call.method, call.path.as_str()),
            "request #{served}"
        );
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_default();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        (call.check)(&body);
        let response = Response::builder()
            .status(call.status)
            .header("content-type", "application/json")
            .body(Body::from(
                serde_json::to_vec(&call.reply).unwrap_or_default(),
            ))
            .unwrap_or_else(|_| unreachable!());
        send.send_response(response);
        served += 1;
    }
    // Nothing more may come.
    if let Ok(Some((request, _))) =
        tokio::time::timeout(std::time::Duration::from_millis(50), handle.next_request()).await
    {
        panic!(
            "unexpected extra request {} {}",
            request.method(),
            request.uri().path()
        );
    }
    served
}

/// A Kubernetes Status object for error replies.
pub fn status_reply(code: u16, reason: &str) -> Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason, "reason": reason, "code": code})
}
