//! A small, faithful Kubernetes API server for tests of the real `ccm` binary (and, as
//! `overcast-sim kube`, for trying the controllers without a cluster): it keeps
//! objects as JSON, serves list and watch (chunked watch events), JSON merge patches with
//! the resourceVersion precondition a real server enforces (409 on a stale version),
//! create, replace, delete, and records every request so a test can assert what the
//! controllers asked for. It speaks plain HTTP on loopback.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub watch: bool,
    pub body: Value,
}

/// A request in RBAC's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbacRequest {
    pub group: String,
    /// With the subresource after a slash: `nodes/status`.
    pub resource: String,
    pub verb: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Seen {
    /// The request as the API server's request-info resolver sees it for RBAC.
    pub fn rbac(&self) -> Option<RbacRequest> {
        let parts: Vec<&str> = self.path.trim_start_matches('/').split('/').collect();
        let (group, rest) = match *parts.first()? {
            "api" => ("", parts.get(2..)?),
            "apis" => (*parts.get(1)?, parts.get(3..)?),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some(ns.to_string()), tail),
            _ => (None, rest),
        };
        let (resource, name, sub) = match rest {
            [r] => (*r, None, None),
            [r, n] => (*r, Some(n.to_string()), None),
            [r, n, s] => (*r, Some(n.to_string()), Some(*s)),
            _ => return None,
        };
        let verb = match (self.method.as_str(), &name) {
            ("GET", None) if self.watch => "watch",
            ("GET", None) => "list",
            ("GET", Some(_)) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            _ => return None,
        };
        let resource = match sub {
            Some(s) => format!("{resource}/{s}"),
            None => resource.to_owned(),
        };
        Some(RbacRequest {
            group: group.to_owned(),
            resource,
            verb: verb.to_owned(),
            namespace,
            name,
        })
    }
}

/// (collection path, name) → object. The collection path is e.g. `/api/v1/nodes` or
/// `/api/v1/namespaces/default/services`.
#[derive(Default)]
struct State {
    objects: BTreeMap<(String, String), Value>,
    version: u64,
    watchers: Vec<(String, mpsc::UnboundedSender<Bytes>)>,
    /// Every event as (resourceVersion, collection, line): a watch from resourceVersion N
    /// first gets what happened after N, as the real server replays from its watch cache —
    /// without it, a change between a client's list and its watch would be lost.
    history: Vec<(u64, String, Bytes)>,
    seen: Vec<Seen>,
    /// token → (user, groups), for TokenReviews.
    tokens: BTreeMap<String, (String, Vec<String>)>,
    /// (user, verb, target) allowed by SubjectAccessReviews; the target is a non-resource
    /// path, or `namespace/resource/subresource/name` for resource attributes.
    allowed: Vec<(String, String, String)>,
    /// (collection, name, field manager) → the configuration that manager last applied:
    /// what server-side apply uses to remove the fields a manager stops sending.
    applied: BTreeMap<(String, String, String), Value>,
}

#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

/// Kind and apiVersion of objects in a collection, for list replies.
fn kind_of(collection: &str) -> (&'static str, &'static str) {
    let resource = collection.rsplit('/').next().unwrap_or_default();
    match resource {
        "nodes" => ("Node", "v1"),
        "services" => ("Service", "v1"),
        "secrets" => ("Secret", "v1"),
        "configmaps" => ("ConfigMap", "v1"),
        "persistentvolumes" => ("PersistentVolume", "v1"),
        "leases" => ("Lease", "coordination.k8s.io/v1"),
        "events" => ("Event", "events.k8s.io/v1"),
        "instancetypescatalogs" => ("InstanceTypesCatalog", "deckhouse.io/v1alpha1"),
        _ => ("Unknown", "v1"),
    }
}

/// Splits a resource path into (collection, name, subresource):
/// `/api/v1[/namespaces/<ns>]/<resource>[/<name>[/<sub>]]` and the same under
/// `/apis/<group>/<version>`.
fn split_path(path: &str) -> Option<(String, Option<String>, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let prefix = match *parts.first()? {
        "api" => 2,
        "apis" => 3,
        _ => return None,
    };
    let mut i = prefix;
    if parts.get(i) == Some(&"namespaces") && parts.len() > i + 2 {
        i += 2;
    }
    let collection = format!("/{}", parts.get(..=i)?.join("/"));
    Some((
        collection,
        parts.get(i + 1).map(|s| s.to_string()),
        parts.get(i + 2).map(|s| s.to_string()),
    ))
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().unwrap_or_else(|| unreachable!());
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message, "code": code}),
    )
}

impl FakeApi {
    /// Serves on a loopback port; returns the base URL.
    pub async fn start(&self) -> String {
        self.start_on("127.0.0.1:0").await
    }

    /// Serves on `address` (`ip:port`); returns the base URL.
    pub async fn start_on(&self, address: &str) -> String {
        self.try_start_on(address)
            .await
            .unwrap_or_else(|e| panic!("bind {address}: {e}"))
    }

    /// [`FakeApi::start_on`], a taken or invalid address an error (the program's user
    /// gave it) instead of a panic.
    pub async fn try_start_on(&self, address: &str) -> std::io::Result<String> {
        let listener = TcpListener::bind(address).await?;
        let addr = listener.local_addr().expect("addr");
        let api = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let api = api.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let api = api.clone();
                        async move { Ok::<_, Infallible>(api.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(format!("http://{addr}"))
    }

    /// Writes a kubeconfig for this server to `path`.
    pub fn kubeconfig(url: &str, path: &std::path::Path) {
        Self::try_kubeconfig(url, path).expect("kubeconfig");
    }

    /// [`FakeApi::kubeconfig`], a path that cannot be written an error.
    pub fn try_kubeconfig(url: &str, path: &std::path::Path) -> std::io::Result<()> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
        );
        std::fs::write(path, text)
    }

    /// Makes `token` authenticate as `user`.
    pub fn token(&self, token: &str, user: &str, groups: &[&str]) {
        let mut st = self.state.lock().expect("state");
        st.tokens.insert(
            token.to_owned(),
            (
                user.to_owned(),
                groups.iter().map(|g| g.to_string()).collect(),
            ),
        );
    }

    /// Lets `user` do `verb` on `target` (a path, or `ns/resource/subresource/name`).
    /// As RBAC's nonResourceURLs, a target ending in `*` matches every path it prefixes;
    /// a `user` of `group:NAME` grants to the members of that group.
    pub fn allow(&self, user: &str, verb: &str, target: &str) {
        self.state.lock().expect("state").allowed.push((
            user.to_owned(),
            verb.to_owned(),
            target.to_owned(),
        ));
    }

    fn review(st: &State, path: &str, body: &Value) -> Option<Value> {
        if path == "/apis/authentication.k8s.io/v1/tokenreviews" {
            let token = body["spec"]["token"].as_str().unwrap_or_default();
            let status = match st.tokens.get(token) {
                Some((user, groups)) => {
                    json!({"authenticated": true, "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups}})
                }
                None => json!({"authenticated": false, "error": "invalid token"}),
            };
            return Some(
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {}, "spec": body["spec"], "status": status}),
            );
        }
        if path == "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
            let spec = &body["spec"];
            let user = spec["user"].as_str().unwrap_or_default();
            let (verb, target) = if spec["resourceAttributes"].is_object() {
                let r = &spec["resourceAttributes"];
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
                (
                    s("verb"),
                    format!(
                        "{}/{}/{}/{}",
                        s("namespace"),
                        s("resource"),
                        s("subresource"),
                        s("name")
                    ),
                )
            } else {
                let n = &spec["nonResourceAttributes"];
                (
                    n["verb"].as_str().unwrap_or_default().to_owned(),
                    n["path"].as_str().unwrap_or_default().to_owned(),
                )
            };
            let groups: Vec<&str> = spec["groups"]
                .as_array()
                .map(|g| g.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let allowed = st.allowed.iter().any(|(u, v, t)| {
                let subject = match u.strip_prefix("group:") {
                    Some(g) => groups.contains(&g),
                    None => u == user,
                };
                let matches = match t.strip_suffix('*') {
                    Some(prefix) => target.starts_with(prefix),
                    None => *t == target,
                };
                subject && *v == verb && matches
            });
            return Some(
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": spec, "status": {"allowed": allowed}}),
            );
        }
        None
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().expect("state").seen.clone()
    }

    /// Panics unless every request seen so far is one `calls` declares (the list the
    /// service keeps next to its code, which the manifests' RBAC is tested against).
    /// `own` lists the test's own requests (method, path) to leave out. Returns how many
    /// requests were checked, so a caller can tell it checked some.
    pub fn assert_calls_within(
        &self,
        service: &str,
        calls: &[overcast_kube::ApiCall],
        own: &[(&str, &str)],
    ) -> usize {
        let seen: Vec<Seen> = self
            .seen()
            .into_iter()
            .filter(|s| !own.iter().any(|(m, p)| s.method == *m && s.path == *p))
            .collect();
        for s in &seen {
            let Some(RbacRequest {
                group,
                resource,
                verb,
                namespace: ns,
                name,
            }) = s.rbac()
            else {
                panic!(
                    "{service}: {} {} is not a resource request",
                    s.method, s.path
                );
            };
            // A create names no object to RBAC (the name is in the body).
            let name = if verb == "create" { None } else { name };
            assert!(
                calls.iter().any(|c| c.covers(&group, &resource, &verb, ns.as_deref(), name.as_deref())),
                "{service} made a call its API_CALLS list lacks: {verb} {group}/{resource} ns={ns:?} name={name:?} ({} {})",
                s.method,
                s.path
            );
        }
        seen.len()
    }

    /// The conditions a discoverer published (the `d8-cloud-provider-conditions`
    /// ConfigMap's `conditions` list in kube-system), waiting up to 10 s for them.
    pub async fn published_conditions(&self) -> Vec<Value> {
        const CONFIGMAPS: &str = "/api/v1/namespaces/kube-system/configmaps";
        const NAME: &str = "d8-cloud-provider-conditions";
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.get(CONFIGMAPS, NAME).is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {NAME} ConfigMap within 10 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let cm = self.get(CONFIGMAPS, NAME).expect("published");
        serde_json::from_str(cm["data"]["conditions"].as_str().expect("conditions"))
            .expect("a JSON list")
    }

    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        self.state
            .lock()
            .expect("state")
            .objects
            .get(&(collection.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every object of `collection` (`/apis/events.k8s.io/v1/namespaces/default/events`).
    pub fn list(&self, collection: &str) -> Vec<Value> {
        self.state
            .lock()
            .expect("state")
            .objects
            .iter()
            .filter(|((c, _), _)| c == collection)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Stores an object as a client's create would, and tells the watchers.
    pub fn put(&self, collection: &str, mut object: Value) {
        let mut st = self.state.lock().expect("state");
        st.version += 1;
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        object["metadata"]["resourceVersion"] = json!(st.version.to_string());
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] =
                json!(format!("00000000-0000-0000-0000-{:012}", st.version));
        }
        let kind = if st
            .objects
            .contains_key(&(collection.to_owned(), name.clone()))
        {
            "MODIFIED"
        } else {
            "ADDED"
        };
        st.objects
            .insert((collection.to_owned(), name), object.clone());
        notify(&mut st, collection, kind, &object);
    }

    async fn handle(&self, req: Request<hyper::body::Incoming>) -> Response<Body> {
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or_default().to_owned();
        let apply = req
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/apply-patch"));
        let json_patch = req
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json-patch"));
        let bytes = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let watch = query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        {
            let mut st = self.state.lock().expect("state");
            st.seen.push(Seen {
                method: method.clone(),
                path: path.clone(),
                watch,
                body: body.clone(),
            });
        }
        if method == "GET" && watch {
            return self.watch(&path, &query);
        }
        let (code, value) = if json_patch && method == "PATCH" {
            self.json_patch(&path, &query, body)
        } else {
            self.respond(&method, &path, &query, body, apply)
        };
        let mut resp = Response::new(
            Full::new(Bytes::from(serde_json::to_vec(&value).unwrap_or_default())).boxed(),
        );
        *resp.status_mut() =
            hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
        resp.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/json"),
        );
        resp
    }

    /// An RFC 6902 JSON patch (what kube's finalizer() sends): applied to the current
    /// object, then stored as a PUT of the result would be; a failed `test` is refused
    /// as the API server refuses it (422), changing nothing.
    fn json_patch(&self, path: &str, query: &str, body: Value) -> (u16, Value) {
        let (code, mut current) = self.respond("GET", path, query, Value::Null, false);
        if code != 200 {
            return (code, current);
        }
        // The API server's JSON patch (evanphx/json-patch) reads a missing member as
        // null in a `test`, which kube's finalizer() relies on for an object with no
        // finalizers yet; the json_patch crate does not, so the member is made null first.
        for op in body.as_array().into_iter().flatten() {
            let (Some("test"), Some(path), Some(Value::Null)) =
                (op["op"].as_str(), op["path"].as_str(), op.get("value"))
            else {
                continue;
            };
            if current.pointer(path).is_none() {
                if let Some((parent, member)) = path.rsplit_once('/') {
                    if let Some(Value::Object(o)) = current.pointer_mut(parent) {
                        o.insert(member.to_owned(), Value::Null);
                    }
                }
            }
        }
        let patch: json_patch::Patch = match serde_json::from_value(body) {
            Ok(p) => p,
            Err(e) => return status(400, "BadRequest", &e.to_string()),
        };
        if let Err(e) = json_patch::patch(&mut current, &patch) {
            return status(422, "Invalid", &e.to_string());
        }
        self.respond("PUT", path, query, current, false)
    }

    fn watch(&self, collection: &str, query: &str) -> Response<Body> {
        let (tx, rx) = mpsc::unbounded_channel();
        let since = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("resourceVersion="))
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|v| *v > 0);
        let mut st = self.state.lock().expect("state");
        match since {
            Some(since) => {
                for (version, changed, line) in &st.history {
                    if *version > since && watch_sees(collection, changed) {
                        let _ = tx.send(line.clone());
                    }
                }
            }
            // No resourceVersion (or "0"): the current objects as synthetic ADDED events,
            // then what changes — the real server's "start at the most recent".
            None => {
                for ((changed, _), object) in &st.objects {
                    if watch_sees(collection, changed) {
                        let event = json!({"type": "ADDED", "object": object});
                        let _ = tx.send(Bytes::from(format!("{event}\n")));
                    }
                }
            }
        }
        st.watchers.push((collection.to_owned(), tx));
        drop(st);
        let stream = futures::StreamExt::map(
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
            |b| Ok(Frame::data(b)),
        );
        let mut resp = Response::new(StreamBody::new(stream).boxed());
        resp.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/json"),
        );
        resp
    }

    fn respond(
        &self,
        method: &str,
        path: &str,
        query: &str,
        body: Value,
        apply: bool,
    ) -> (u16, Value) {
        let mut st = self.state.lock().expect("state");
        if method == "POST" {
            if let Some(review) = Self::review(&st, path, &body) {
                return (201, review);
            }
        }
        let Some((collection, name, _sub)) = split_path(path) else {
            return status(404, "NotFound", path);
        };
        // Collection requests: list and create.
        if name.is_none() {
            let path = collection.as_str();
            return match method {
                "GET" => {
                    let (kind, api_version) = kind_of(path);
                    // A cluster-wide list of a namespaced kind spans every namespace.
                    let all = !path.contains("/namespaces/");
                    let items: Vec<Value> = st
                        .objects
                        .iter()
                        .filter(|((c, _), _)| {
                            c == path
                                || (all && c.ends_with(path.rsplit('/').next().unwrap_or_default()))
                        })
                        .map(|(_, v)| v.clone())
                        .collect();
                    // Pages as a real server does for `limit`: the continue token here is
                    // the offset of the next item.
                    let param = |k: &str| {
                        query
                            .split('&')
                            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                            .and_then(|v| v.parse::<usize>().ok())
                    };
                    let start = param("continue").unwrap_or(0).min(items.len());
                    let end = param("limit")
                        .filter(|l| *l > 0)
                        .map_or(items.len(), |l| (start + l).min(items.len()));
                    let mut metadata = json!({"resourceVersion": st.version.to_string()});
                    if end < items.len() {
                        metadata["continue"] = json!(end.to_string());
                        metadata["remainingItemCount"] = json!(items.len() - end);
                    }
                    (
                        200,
                        json!({"kind": format!("{kind}List"), "apiVersion": api_version, "metadata": metadata, "items": items[start..end]}),
                    )
                }
                "POST" => {
                    let mut object = body;
                    let name = object["metadata"]["name"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| format!("generated-{}", st.version + 1));
                    if st.objects.contains_key(&(path.to_owned(), name.clone())) {
                        return status(409, "AlreadyExists", "already exists");
                    }
                    st.version += 1;
                    object["metadata"]["name"] = json!(name);
                    object["metadata"]["resourceVersion"] = json!(st.version.to_string());
                    st.objects.insert((path.to_owned(), name), object.clone());
                    notify(&mut st, path, "ADDED", &object);
                    (201, object)
                }
                _ => status(405, "MethodNotAllowed", method),
            };
        }
        // Object requests: <collection>/<name>[/<subresource>].
        let name = name.unwrap_or_default();
        let collection = collection.as_str();
        let key = (collection.to_owned(), name.clone());
        let current = match st.objects.get(&key).cloned() {
            Some(c) => c,
            // Server-side apply creates what does not exist yet.
            None if method == "PATCH" && apply => {
                st.applied.insert(
                    (collection.to_owned(), name.clone(), field_manager(query)),
                    body.clone(),
                );
                let mut object = body;
                st.version += 1;
                object["metadata"]["name"] = json!(name);
                object["metadata"]["resourceVersion"] = json!(st.version.to_string());
                st.objects.insert(key, object.clone());
                notify(&mut st, collection, "ADDED", &object);
                return (201, object);
            }
            None => return status(404, "NotFound", path),
        };
        match method {
            "GET" => (200, current),
            "PATCH" | "PUT" => {
                let wanted = body["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_owned);
                if let Some(rv) = wanted.filter(|rv| {
                    Some(rv.as_str()) != current["metadata"]["resourceVersion"].as_str()
                }) {
                    return status(409, "Conflict", &format!("stale resourceVersion {rv}"));
                }
                let next = if method == "PUT" {
                    body
                } else if apply {
                    // Server-side apply: the fields this manager applied last time and no
                    // longer sends are removed (it owned them), then the rest is merged.
                    // One manager per field, as this fake's callers use it.
                    let manager = (collection.to_owned(), name.clone(), field_manager(query));
                    let mut n = current.clone();
                    if let Some(before) = st.applied.get(&manager) {
                        drop_unsent(&mut n, before, &body, 0);
                    }
                    merge(&mut n, &body);
                    st.applied.insert(manager, body);
                    n
                } else {
                    let mut n = current.clone();
                    merge(&mut n, &body);
                    n
                };
                let mut next = next;
                st.version += 1;
                next["metadata"]["resourceVersion"] = json!(st.version.to_string());
                // Deleting and out of finalizers: gone.
                let finalized = !next["metadata"]["deletionTimestamp"].is_null()
                    && next["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(|f| f.is_empty());
                if finalized {
                    st.objects.remove(&key);
                    notify(&mut st, collection, "DELETED", &next);
                } else {
                    st.objects.insert(key, next.clone());
                    notify(&mut st, collection, "MODIFIED", &next);
                }
                (200, next)
            }
            "DELETE" => {
                let finalizers = current["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty());
                if finalizers {
                    let mut next = current;
                    st.version += 1;
                    next["metadata"]["deletionTimestamp"] = json!("2026-11-22T00:00:00Z");
                    next["metadata"]["resourceVersion"] = json!(st.version.to_string());
                    st.objects.insert(key, next.clone());
                    notify(&mut st, collection, "MODIFIED", &next);
                    (200, next)
                } else {
                    // A deletion has its own resourceVersion, as on a real server.
                    st.applied
                        .retain(|(c, n, _), _| !(c == collection && *n == name));
                    let mut gone = current;
                    st.version += 1;
                    gone["metadata"]["resourceVersion"] = json!(st.version.to_string());
                    st.objects.remove(&key);
                    notify(&mut st, collection, "DELETED", &gone);
                    (200, gone)
                }
            }
            _ => status(405, "MethodNotAllowed", method),
        }
    }
}

/// Whether a watch on `watched` sees changes in `collection`: its own, and for a
/// cluster-wide watch of a namespaced kind, every namespace's.
fn watch_sees(watched: &str, collection: &str) -> bool {
    let resource = collection.rsplit('/').next().unwrap_or_default();
    watched == collection
        || (!watched.contains("/namespaces/") && watched.ends_with(&format!("/{resource}")))
}

/// Tells the watchers, and remembers the event for watches that start later from an
/// older resourceVersion. Every caller has just bumped `st.version` for this change.
fn notify(st: &mut State, collection: &str, kind: &str, object: &Value) {
    let line = Bytes::from(format!("{}\n", json!({"type": kind, "object": object})));
    let version = st.version;
    st.history
        .push((version, collection.to_owned(), line.clone()));
    st.watchers
        .retain(|(path, tx)| !watch_sees(path, collection) || tx.send(line.clone()).is_ok());
}

/// The `fieldManager` of a request's query (kube-rs always sends one with apply).
fn field_manager(query: &str) -> String {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("fieldManager="))
        .unwrap_or_default()
        .to_owned()
}

/// Removes from `object` what `before` (a manager's last applied configuration) set and
/// `now` (its new one) no longer does; maps are followed field by field, anything else
/// (lists included: atomic here) is one field. Identity fields stay.
fn drop_unsent(object: &mut Value, before: &Value, now: &Value, depth: usize) {
    let (Some(obj), Some(before)) = (object.as_object_mut(), before.as_object()) else {
        return;
    };
    for (k, was) in before {
        if depth == 0 && matches!(k.as_str(), "apiVersion" | "kind") {
            continue;
        }
        if depth == 1 && matches!(k.as_str(), "name" | "namespace") {
            continue;
        }
        match now.get(k) {
            None | Some(Value::Null) => {
                obj.remove(k);
            }
            Some(next) if was.is_object() && next.is_object() => {
                if let Some(child) = obj.get_mut(k) {
                    drop_unsent(child, was, next, depth + 1);
                }
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_side_apply_removes_what_its_manager_stopped_sending() {
        let api = FakeApi::default();
        let path = "/api/v1/namespaces/kube-system/configmaps/c";
        let q = "fieldManager=me&force=true";
        let first = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "1", "b": "2"}},
            "data": {"x": "1", "y": "2"}});
        assert_eq!(api.respond("PATCH", path, q, first, true).0, 201);
        // Someone else's field, set by a merge patch: not this manager's to remove.
        api.respond(
            "PATCH",
            path,
            "",
            json!({"metadata": {"annotations": {"theirs": "1"}}}),
            false,
        );
        let second = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "1"}},
            "data": {"y": "3"}});
        let (code, got) = api.respond("PATCH", path, q, second, true);
        assert_eq!(code, 200);
        assert_eq!(
            got["data"],
            json!({"y": "3"}),
            "x was dropped by its manager"
        );
        assert_eq!(got["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(got["metadata"]["annotations"], json!({"theirs": "1"}));
        assert_eq!(got["metadata"]["name"], "c");
    }

    /// A watch's events as (type, name, resourceVersion), read off a raw HTTP connection.
    struct WatchEvents(tokio::io::Lines<tokio::io::BufReader<tokio::net::TcpStream>>);

    impl WatchEvents {
        async fn open(url: &str, path_and_query: &str) -> Self {
            use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
            let addr = url.trim_start_matches("http://");
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            let req = format!("GET {path_and_query} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
            conn.write_all(req.as_bytes()).await.unwrap();
            Self(tokio::io::BufReader::new(conn).lines())
        }

        async fn next(&mut self) -> (String, String, String) {
            loop {
                let line =
                    tokio::time::timeout(std::time::Duration::from_secs(5), self.0.next_line())
                        .await
                        .expect("an event in time")
                        .unwrap()
                        .expect("the stream stays open");
                // Headers and chunk sizes interleave with the JSON lines.
                let Ok(event) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if !event.is_object() {
                    continue;
                }
                let text = |v: &Value| v.as_str().unwrap().to_owned();
                return (
                    text(&event["type"]),
                    text(&event["object"]["metadata"]["name"]),
                    text(&event["object"]["metadata"]["resourceVersion"]),
                );
            }
        }
    }

    fn event(t: &str, n: &str, rv: &str) -> (String, String, String) {
        (t.to_owned(), n.to_owned(), rv.to_owned())
    }

    /// A watch from an older resourceVersion first gets what changed since — the gap
    /// between a client's list and its watch loses nothing — and then the live events;
    /// one without a resourceVersion gets the current objects as ADDED, then the live ones.
    #[tokio::test]
    async fn a_watch_replays_what_changed_after_its_resource_version() {
        let api = FakeApi::default();
        let url = api.start().await;
        api.put("/api/v1/nodes", json!({"metadata": {"name": "a"}}));
        api.put("/api/v1/nodes", json!({"metadata": {"name": "b"}}));
        api.put(
            "/api/v1/namespaces/x/services",
            json!({"metadata": {"name": "s"}}),
        );
        api.put(
            "/api/v1/nodes",
            json!({"metadata": {"name": "a", "labels": {"l": "1"}}}),
        );
        let mut since_1 =
            WatchEvents::open(&url, "/api/v1/nodes?watch=true&resourceVersion=1").await;
        let mut fresh = WatchEvents::open(&url, "/api/v1/nodes?watch=true").await;
        assert_eq!(since_1.next().await, event("ADDED", "b", "2"));
        assert_eq!(since_1.next().await, event("MODIFIED", "a", "4"));
        assert_eq!(fresh.next().await, event("ADDED", "a", "4"));
        assert_eq!(fresh.next().await, event("ADDED", "b", "2"));
        api.put("/api/v1/nodes", json!({"metadata": {"name": "c"}}));
        assert_eq!(since_1.next().await, event("ADDED", "c", "5"));
        assert_eq!(fresh.next().await, event("ADDED", "c", "5"));
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut v = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge(&mut v, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(v, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }
}
