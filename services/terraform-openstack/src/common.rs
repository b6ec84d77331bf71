//! What every OpenStack resource shares: the client with the provider's region, calls to
//! each service answered as diagnostics (a 404 as "gone" where the upstream provider takes
//! it so), the attributes every resource of terraform-provider-openstack has (`region`,
//! Neutron's `tags`/`all_tags`, `value_specs`, the SDK's `timeouts` block), and the waits.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use overcast_cloud::CloudError;
use overcast_cloud_openstack::{OpenStack, Service};
use serde_json::{json, Value as J};

use crate::cty::{Type, Value};
use crate::resource::{Diag, Outcome};
use crate::schema::{optional, s, string, Attr, Block, Nesting, Obj};

/// The client, and the region the provider block (or `OS_REGION_NAME`) names: every
/// resource records it (upstream's `GetRegion`).
pub struct Os {
    pub api: Arc<OpenStack>,
    pub region: String,
    /// One change at a time per key: a security group's rules are added one by one, as
    /// upstream's per-group mutex does (Neutron refuses or fails concurrent ones).
    locks: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Os {
    pub fn new(api: Arc<OpenStack>, region: String) -> Self {
        Self {
            api,
            region,
            locks: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Held while `key`'s children change.
    pub async fn serialized(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(locks.entry(key.to_owned()).or_default())
        };
        lock.lock_owned().await
    }
}

pub type Cloud = Arc<Os>;

/// `region`: Optional, Computed, ForceNew on every resource and data source.
pub fn region() -> Attr {
    optional(
        "region",
        Type::String,
        "The region (the provider's when left out).",
    )
    .force_new()
    .kept()
}

/// Neutron's and Nova's `tags` (the user's) and `all_tags` (every tag the object has).
pub fn tags() -> [Attr; 2] {
    [
        optional(
            "tags",
            Type::Set(Box::new(Type::String)),
            "Tags the object carries.",
        ),
        crate::schema::computed(
            "all_tags",
            Type::Set(Box::new(Type::String)),
            "Every tag the object has.",
        ),
    ]
}

/// A block upstream declares optional and computed (its Read fills it where nobody gave
/// it: a router's gateway addresses, a network's segments) as an optional, computed
/// attribute of a list — or set — of objects of `fields`: Terraform 1.0 takes no block a
/// provider fills, and reads a block written for such an attribute as its value
/// ("attributes as blocks"). Its state is the same list of objects.
pub fn filled_blocks(
    name: &'static str,
    fields: &[(&str, Type)],
    set: bool,
    about: &'static str,
) -> Attr {
    let object = Type::Object(
        fields
            .iter()
            .map(|(k, t)| ((*k).to_owned(), t.clone()))
            .collect(),
    );
    let ty = if set {
        Type::Set(Box::new(object))
    } else {
        Type::List(Box::new(object))
    };
    optional(name, ty, about).kept()
}

/// `value_specs`: keys merged into the create request's object (never read back).
pub fn value_specs() -> Attr {
    optional(
        "value_specs",
        Type::Map(Box::new(Type::String)),
        "Extra keys of the create request.",
    )
    .force_new()
}

/// The SDK's `timeouts { create = "10m" … }`, a single block of the keys a resource has.
pub fn with_timeouts(block: Block, keys: &[&'static str]) -> Block {
    let attrs = keys
        .iter()
        .map(|k| {
            optional(
                k,
                Type::String,
                "How long the operation may take (10m, 1h).",
            )
        })
        .collect();
    block.with_nesting(
        "timeouts",
        Block::new("How long operations may take.", attrs),
        false,
        Nesting::Single,
    )
}

/// A `timeouts` entry (`"10m"`, `"1h30m"`, `"45s"`) as a duration; `default` when absent
/// or unreadable.
pub fn timeout(o: &Obj, key: &str, default: Duration) -> Duration {
    let Some(Value::Map(t)) = o.get("timeouts") else {
        return default;
    };
    let Some(Value::String(text)) = t.get(key) else {
        return default;
    };
    parse_duration(text).unwrap_or(default)
}

/// Go's `time.ParseDuration` for the units a timeout uses (h, m, s).
fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut number = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let n: f64 = number.parse().ok()?;
        number.clear();
        total += n * match c {
            'h' => 3600.0,
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
    }
    number.is_empty().then(|| Duration::from_secs_f64(total))
}

/// One call to `service`; its status must be one of `ok`, else a diagnostic saying what
/// failed (`what`) with the service's own words. A `None` body for 204.
// The client's `expect` and the words of its failure: grouping them would only rename them.
#[allow(clippy::too_many_arguments)]
pub async fn call(
    os: &Os,
    service: Service,
    name: &'static str,
    method: Method,
    path: &str,
    body: Option<&J>,
    ok: &[u16],
    what: &str,
) -> Outcome<J> {
    let resp = os
        .api
        .expect(service, name, method, path, body, ok)
        .await
        .map_err(|e| Diag::cloud(what, e))?;
    if resp.body.is_empty() {
        return Ok(J::Null);
    }
    serde_json::from_slice(&resp.body).map_err(|e| {
        Diag::new(
            format!("Failed to {what}"),
            format!("{name}: an answer that is not JSON: {e}"),
        )
    })
}

/// An idempotent call (a GET, a DELETE) tried again while the service answers 5xx — an
/// SQL deadlock, a worker restarting — a few times over some seconds (upstream retries
/// 500 and 503 around a server's create); any other answer as it came.
pub async fn transient<T, F, Fut>(mut call: F) -> Result<T, CloudError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CloudError>>,
{
    let mut pause = Duration::from_millis(500);
    for _ in 0..4 {
        match call().await {
            Err(CloudError::Unavailable(_)) => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
    call().await
}

/// A GET whose 404 means the object is gone (`None`).
pub async fn get(os: &Os, service: Service, name: &'static str, path: &str) -> Outcome<Option<J>> {
    let answer = transient(|| {
        os.api
            .expect(service, name, Method::GET, path, None, &[200])
    })
    .await;
    match answer {
        Ok(resp) => serde_json::from_slice(&resp.body).map(Some).map_err(|e| {
            Diag::new(
                format!("Failed to read {name}"),
                format!("an answer that is not JSON: {e}"),
            )
        }),
        Err(CloudError::NotFound { .. }) => Ok(None),
        Err(e) => Err(Diag::cloud(&format!("read {path}"), e)),
    }
}

/// A DELETE where a 404 (already gone) is done.
pub async fn delete(os: &Os, service: Service, name: &'static str, path: &str) -> Outcome<()> {
    let answer = transient(|| {
        os.api
            .expect(service, name, Method::DELETE, path, None, &[200, 202, 204])
    })
    .await;
    match answer {
        Ok(_) | Err(CloudError::NotFound { .. }) => Ok(()),
        Err(e) => Err(Diag::cloud(&format!("delete {path}"), e)),
    }
}

/// Looks with `look` every second until it answers something, for at most `limit`;
/// `what` is said when it never came.
pub async fn wait<T, F, Fut>(what: &str, limit: Duration, mut look: F) -> Outcome<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Outcome<Option<T>>>,
{
    let started = Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        if let Some(v) = look().await? {
            return Ok(v);
        }
        if started.elapsed() > limit {
            return Err(Diag::new(
                "Timed out",
                format!("waited {} s for {what}", limit.as_secs()),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// The id in a path (`/v2.0/ports/<id>`): an OpenStack id is letters, digits and `-`
/// (a name for keypairs: no `/`, no `?`, no `..`); anything else is refused before a call.
pub fn path_id(o: &Obj, attr: &str) -> Outcome<String> {
    match string(o, attr) {
        Some(v) if safe(v) => Ok(v.to_owned()),
        Some(v) => Err(Diag::at(
            attr,
            format!("{attr} is not an OpenStack id"),
            format!("{v:?} cannot name an object in a path"),
        )),
        None => Err(Diag::at(attr, format!("{attr} is required"), "")),
    }
}

/// Whether `v` may stand in a URL path segment as it is.
pub fn safe(v: &str) -> bool {
    !v.is_empty()
        && v != "."
        && v != ".."
        && v.len() <= 255
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | ':'))
}

/// `key=value` for a query string.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        for b in v.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// A JSON string, or `""` (upstream's zero value for a missing field).
pub fn text(v: &J) -> Value {
    s(v.as_str().unwrap_or_default())
}

/// A JSON bool, or false.
pub fn flag(v: &J) -> Value {
    Value::Bool(v.as_bool().unwrap_or(false))
}

/// A JSON number, or 0.
pub fn number(v: &J) -> Value {
    Value::Number(
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .unwrap_or(0)
            .into(),
    )
}

/// A JSON array of strings as a list value (`[]` when absent).
pub fn strings(v: &J) -> Value {
    Value::List(
        v.as_array()
            .map(|a| a.iter().filter_map(J::as_str).map(s).collect())
            .unwrap_or_default(),
    )
}

/// A JSON object of strings as a map value (`{}` when absent).
pub fn string_map(v: &J) -> Value {
    Value::Map(
        v.as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| {
                        let t = v
                            .as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string());
                        (k.clone(), Value::String(t))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    )
}

/// The strings of a list or set attribute.
pub fn list_of(o: &Obj, attr: &str) -> Vec<String> {
    match o.get(attr) {
        Some(Value::List(l)) => l
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The string map attribute `attr` as JSON (`value_specs`, `metadata`).
pub fn map_json(o: &Obj, attr: &str) -> serde_json::Map<String, J> {
    match o.get(attr) {
        Some(Value::Map(m)) => m
            .iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k.clone(), J::String(s.clone()))),
                _ => None,
            })
            .collect(),
        _ => serde_json::Map::new(),
    }
}

/// The objects of a nested block (none when it is not given).
pub fn blocks<'a>(o: &'a Obj, name: &str) -> Vec<&'a Obj> {
    match o.get(name) {
        Some(Value::List(b)) => b
            .iter()
            .filter_map(|v| match v {
                Value::Map(m) => Some(m),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `body` with `value_specs`' keys merged in (upstream's `AddValueSpecs`).
pub fn add_value_specs(p: &Obj, body: &mut serde_json::Map<String, J>) {
    body.extend(map_json(p, "value_specs"));
}

/// The region a resource records: its own, else the provider's.
pub fn region_of(os: &Os, o: &Obj) -> Value {
    s(string(o, "region")
        .filter(|r| !r.is_empty())
        .unwrap_or(&os.region))
}

/// Neutron's tags of a new object (`PUT /v2.0/<kind>/<id>/tags`), only when the user gave
/// some.
pub async fn put_tags(os: &Os, kind: &str, id: &str, p: &Obj) -> Outcome<()> {
    let tags = list_of(p, "tags");
    if tags.is_empty() {
        return Ok(());
    }
    call(
        os,
        Service::Network,
        "tags_replace",
        Method::PUT,
        &format!("/v2.0/{kind}/{id}/tags"),
        Some(&json!({ "tags": tags })),
        &[200],
        &format!("tag {kind} {id}"),
    )
    .await
    .map(|_| ())
}

/// `all_tags` as the object has them; `tags` only where one the user gave is missing
/// (upstream's `expandObjectReadTags`).
pub fn read_tags(seen: &mut Obj, state: &Obj, all: &J) {
    let all: Vec<String> = all
        .as_array()
        .map(|a| a.iter().filter_map(J::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let wanted = list_of(state, "tags");
    let actual: Vec<String> = wanted.iter().filter(|t| all.contains(t)).cloned().collect();
    if actual.len() != wanted.len() {
        seen.insert(
            "tags".into(),
            Value::List(actual.into_iter().map(Value::String).collect()),
        );
    }
    seen.insert(
        "all_tags".into(),
        Value::List(all.into_iter().map(Value::String).collect()),
    );
}

/// A Neutron object changed in place: `body` (the changed attributes, none: no call) PUT
/// under its `key` at `/v2.0/<plural>/<id>`, then its tags brought to the plan's.
#[allow(clippy::too_many_arguments)]
pub async fn neutron_update(
    os: &Os,
    name: &'static str,
    key: &str,
    plural: &str,
    id: &str,
    body: serde_json::Map<String, J>,
    prior: &Obj,
    planned: &Obj,
) -> Outcome<()> {
    if !body.is_empty() {
        let mut doc = serde_json::Map::new();
        doc.insert(key.to_owned(), J::Object(body));
        call(
            os,
            Service::Network,
            name,
            Method::PUT,
            &format!("/v2.0/{plural}/{id}"),
            Some(&J::Object(doc)),
            &[200],
            &format!("update the {}", key.replace('_', " ")),
        )
        .await?;
    }
    update_tags(os, plural, id, prior, planned).await
}

/// A Neutron object's delete, asked again while Neutron says it is in use (409: a port
/// not yet released) until `limit`; gone (404) is done, as upstream.
pub async fn delete_when_free(
    os: &Os,
    name: &'static str,
    path: &str,
    what: &str,
    limit: Duration,
) -> Outcome<()> {
    wait(&format!("{what} deleted"), limit, || async {
        match os
            .api
            .expect(Service::Network, name, Method::DELETE, path, None, &[204])
            .await
        {
            Ok(_) | Err(CloudError::NotFound { .. }) => Ok(Some(())),
            Err(CloudError::Conflict(_)) => Ok(None),
            Err(e) => Err(Diag::cloud(&format!("delete {what}"), e)),
        }
    })
    .await
}

/// A state's tags changed in place: `(all − old) ∪ new` (upstream's update).
pub async fn update_tags(os: &Os, kind: &str, id: &str, prior: &Obj, planned: &Obj) -> Outcome<()> {
    let (old, new) = (list_of(prior, "tags"), list_of(planned, "tags"));
    if old == new {
        return Ok(());
    }
    let mut all: Vec<String> = list_of(prior, "all_tags")
        .into_iter()
        .filter(|t| !old.contains(t))
        .collect();
    for t in new {
        if !all.contains(&t) {
            all.push(t);
        }
    }
    call(
        os,
        Service::Network,
        "tags_replace",
        Method::PUT,
        &format!("/v2.0/{kind}/{id}/tags"),
        Some(&json!({ "tags": all })),
        &[200],
        &format!("tag {kind} {id}"),
    )
    .await
    .map(|_| ())
}

/// The id alone, as an import or `migrate-state` leaves an object for the refresh to fill.
pub fn id_only(id: &str) -> Obj {
    BTreeMap::from([("id".to_owned(), s(id))])
}
