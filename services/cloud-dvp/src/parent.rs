//! The parent cluster: a Kubernetes client for the namespace holding this cluster's VMs,
//! every call under a deadline, counted and timed per request name
//! (`dvp_api_request_duration_seconds{request}`, `dvp_api_requests_total`,
//! `dvp_api_request_errors_total`), and every failure turned into a [`CloudError`] by
//! what a retry would do. Whether the parent's API server answers is said as it happens,
//! as cloud-http says it for the other clouds: a warning naming the endpoint when a call
//! fails unanswered or waits [`SLOW`], an info line when it answers again, and
//! `dvp_api_last_success_timestamp_seconds{endpoint}`. Nothing here logs a credential:
//! the kubeconfig stays inside the client.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, ListParams, ObjectList};
use kube::config::KubeConfigOptions;
use kube::core::{ApiResource, DynamicObject, Object};
use kube::runtime::wait::{await_condition, Condition};
use kube::Client;
use overcast_cloud::{CloudError, Result};
use overcast_cloud_http::ApiMetrics;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api;
use crate::Config;

/// How long one API call may take before its outcome counts as unknown.
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// How long a call waits before it is said to be waiting (cloud-http's figure).
pub const SLOW: Duration = Duration::from_secs(10);
/// Objects per page of a list (the API server's continue tokens page the rest).
pub const PAGE: u32 = 500;

#[derive(Clone)]
pub struct Parent {
    pub client: Client,
    pub namespace: String,
    pub metrics: Arc<ApiMetrics>,
    /// The parent API server's `host:port`, as warnings and the gauge name it.
    pub endpoint: String,
    /// This cluster's UUID (`dvp.deckhouse.io/cluster-uuid`), when configured.
    pub cluster: Option<String>,
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parent")
            .field("namespace", &self.namespace)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Parent {
    /// A client for the parent cluster the configuration names. Nothing is contacted.
    pub async fn connect(config: &Config, metrics: Arc<ApiMetrics>) -> anyhow::Result<Self> {
        let kube_config = kube::Config::from_custom_kubeconfig(
            config.kubeconfig.clone(),
            &KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("the parent cluster's kubeconfig: {e}"))?;
        Ok(Self {
            cluster: config.cluster_uuid.clone(),
            ..Self::from_config(kube_config, config.namespace.clone(), metrics)?
        })
    }

    /// A client for `config` without kube's own retries: kube retries a 429/503/504 up to
    /// 15 times over minutes, so an outage would hold every call until its deadline. Here
    /// a call answers at once (Unavailable) and the caller's retry policy decides — the
    /// CSI sidecars' backoff, the ccm's per-Service backoff, the node sync's retry.
    pub fn from_config(
        mut config: kube::Config,
        namespace: String,
        metrics: Arc<ApiMetrics>,
    ) -> anyhow::Result<Self> {
        config.default_retry = false;
        let endpoint = config
            .cluster_url
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_else(|| config.cluster_url.to_string());
        let client = Client::try_from(config)
            .map_err(|e| anyhow::anyhow!("a client for the parent cluster: {e}"))?;
        Ok(Self {
            endpoint,
            ..Self::new(client, namespace, metrics)
        })
    }

    /// A parent over a client made elsewhere (tests, benchmarks), whose endpoint is
    /// named `parent`: kube's client does not say its URL.
    pub fn new(client: Client, namespace: String, metrics: Arc<ApiMetrics>) -> Self {
        Self {
            client,
            namespace,
            metrics,
            endpoint: "parent".into(),
            cluster: None,
        }
    }

    /// The same parent, for the cluster `uuid`.
    pub fn for_cluster(self, uuid: impl Into<String>) -> Self {
        Self {
            cluster: Some(uuid.into()),
            ..self
        }
    }

    pub fn disks(&self) -> Api<api::VirtualDisk> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &api::virtual_disk())
    }
    pub fn snapshots(&self) -> Api<api::VirtualDiskSnapshot> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &api::virtual_disk_snapshot(),
        )
    }
    pub fn vmbdas(&self) -> Api<api::Vmbda> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &api::vmbda())
    }
    pub fn vms(&self) -> Api<api::VirtualMachine> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &api::virtual_machine(),
        )
    }

    /// Runs one API call under the deadline, counted as `name`.
    pub async fn call<T, F>(&self, name: &'static str, what: &str, fut: F) -> Result<T>
    where
        F: Future<Output = kube::Result<T>>,
    {
        let started = Instant::now();
        let mut fut = std::pin::pin!(fut);
        let out = match tokio::time::timeout(SLOW, fut.as_mut()).await {
            Ok(r) => Ok(r),
            Err(_) => {
                // Still waiting: said now, while it goes on waiting.
                self.metrics.endpoint_unanswered(
                    CLOUD,
                    &self.endpoint,
                    name,
                    &format!("no answer after {SLOW:?}; waiting up to {CALL_DEADLINE:?}"),
                    started,
                );
                tokio::time::timeout(CALL_DEADLINE - SLOW, fut.as_mut()).await
            }
        };
        let out = match out {
            Ok(Ok(v)) => {
                self.metrics.endpoint_answered(CLOUD, &self.endpoint);
                Ok(v)
            }
            Ok(Err(e)) => {
                if answered(&e) {
                    self.metrics.endpoint_answered(CLOUD, &self.endpoint);
                } else {
                    // As cloud-http says its errors: a URL's or a header's secret never.
                    let why = overcast_cloud_http::redact(&e.to_string());
                    self.metrics
                        .endpoint_unanswered(CLOUD, &self.endpoint, name, &why, started);
                }
                Err(to_cloud_error(what, e))
            }
            Err(_) => {
                let e =
                    format!("{what}: the parent cluster did not answer within {CALL_DEADLINE:?}");
                self.metrics
                    .endpoint_unanswered(CLOUD, &self.endpoint, name, &e, started);
                Err(CloudError::DeadlineExceeded(e))
            }
        };
        self.metrics.observe(name, started.elapsed(), out.is_ok());
        out
    }

    /// Like [`Parent::call`], with "not found" as `None`.
    pub async fn get_opt<K>(
        &self,
        name: &'static str,
        api: &Api<K>,
        object: &str,
    ) -> Result<Option<K>>
    where
        K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        self.call(name, &format!("get {object}"), api.get_opt(object))
            .await
    }

    /// Every object the selector matches, page by page (one counted call per page).
    pub async fn list_all<P, U>(
        &self,
        name: &'static str,
        api: &Api<Object<P, U>>,
        selector: Option<&str>,
    ) -> Result<Vec<Object<P, U>>>
    where
        P: Clone + DeserializeOwned + Serialize + std::fmt::Debug,
        U: Clone + DeserializeOwned + Serialize + std::fmt::Debug + Default,
    {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let (page, next) = self
                .list_page(name, api, selector, PAGE, token.as_deref())
                .await?;
            out.extend(page);
            match next {
                Some(next) => token = Some(next),
                None => return Ok(out),
            }
        }
    }

    /// One page of at most `limit` objects the selector matches, in the API server's
    /// order (by name within a namespace), from `token` (a continue token of the page
    /// before); the next page's token when more follow.
    pub async fn list_page<P, U>(
        &self,
        name: &'static str,
        api: &Api<Object<P, U>>,
        selector: Option<&str>,
        limit: u32,
        token: Option<&str>,
    ) -> Result<(Vec<Object<P, U>>, Option<String>)>
    where
        P: Clone + DeserializeOwned + Serialize + std::fmt::Debug,
        U: Clone + DeserializeOwned + Serialize + std::fmt::Debug + Default,
    {
        let mut lp = ListParams::default().limit(limit.max(1));
        if let Some(s) = selector {
            lp = lp.labels(s);
        }
        if let Some(t) = token {
            lp = lp.continue_token(t);
        }
        let page: ObjectList<Object<P, U>> = self
            .call(name, &format!("list {name}"), api.list(&lp))
            .await?;
        let next = page.metadata.continue_.filter(|c| !c.is_empty());
        Ok((page.items, next))
    }

    /// Waits up to `limit` for `cond` on the named object — one list and one watch of it,
    /// counted as `<request>_wait_list` and `<request>_wait_watch`. `Ok(None)` when the time
    /// ran out, `Ok(Some(None))` when the object is gone.
    pub async fn wait<K>(
        &self,
        request: &str,
        api: Api<K>,
        name: &str,
        limit: Duration,
        cond: impl Condition<K>,
    ) -> Result<Option<Option<K>>>
    where
        K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let started = Instant::now();
        let out = tokio::time::timeout(limit, await_condition(api, name, cond)).await;
        let (took, ok) = (started.elapsed(), !matches!(out, Ok(Err(_))));
        self.metrics
            .observe(&format!("{request}_wait_list"), took, ok);
        self.metrics
            .observe(&format!("{request}_wait_watch"), took, ok);
        match out {
            Err(_) => Ok(None),
            Ok(Ok(obj)) => Ok(Some(obj)),
            Ok(Err(e)) => Err(CloudError::Unavailable(format!(
                "watching {name} on the parent cluster: {e}"
            ))),
        }
    }

    /// Deletes `name`, counted as `request`; one that is already gone is deleted.
    pub async fn delete<K>(
        &self,
        request: &'static str,
        api: &Api<K>,
        name: &str,
        dp: &DeleteParams,
    ) -> Result<()>
    where
        K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        match self
            .call(request, &format!("delete {name}"), api.delete(name, dp))
            .await
        {
            Ok(_) | Err(CloudError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Untyped objects of another API (the parent's Nodes, StorageClasses, quotas).
    pub fn dynamic(&self, ar: &ApiResource, namespaced: bool) -> Api<DynamicObject> {
        if namespaced {
            Api::namespaced_with(self.client.clone(), &self.namespace, ar)
        } else {
            Api::all_with(self.client.clone(), ar)
        }
    }
}

/// The cloud's name in the endpoint warnings.
const CLOUD: &str = "dvp";

/// Whether a failed call was the API server's answer (a 404, a conflict, a refusal):
/// it answers. A 429/502/503/504, a connection that failed, or an answer that does not
/// read as the API's is no answer — as cloud-http counts them.
fn answered(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if !matches!(s.code, 429 | 502 | 503 | 504))
}

/// What a failed parent-cluster call means, by what a retry would do. Only a 404 says
/// an object is gone; everything the caller cannot classify is retried.
pub fn to_cloud_error(what: &str, e: kube::Error) -> CloudError {
    match e {
        kube::Error::Api(s) => {
            let msg = format!("{what}: {} ({}, {})", s.message, s.reason, s.code);
            match s.code {
                404 => CloudError::not_found("object", what.to_owned()),
                409 => CloudError::Conflict(msg),
                401 => CloudError::Unauthenticated(msg),
                // A namespace ResourceQuota refusing a create is a 403 "exceeded quota".
                403 if s.message.contains("exceeded quota") => CloudError::ResourceExhausted(msg),
                403 => CloudError::PermissionDenied(msg),
                400 | 422 => CloudError::InvalidArgument(msg),
                429 => CloudError::ResourceExhausted(msg),
                504 => CloudError::DeadlineExceeded(msg),
                _ => CloudError::Unavailable(msg),
            }
        }
        // The answer could not be read: not the API we expect (a proxy's page, a
        // truncated body). Unknown, so never "gone".
        kube::Error::SerdeError(e) => CloudError::Unavailable(format!(
            "{what}: the parent cluster's answer does not read: {e}"
        )),
        other => CloudError::Unavailable(format!(
            "{what}: the parent cluster is unreachable: {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_a_404_is_gone_and_every_outage_is_retried() {
        let e = to_cloud_error("get x", api(404, "not found"));
        assert!(e.is_not_found());
        let quota = to_cloud_error(
            "create x",
            api(403, "exceeded quota: q, requested: requests.storage=1Gi"),
        );
        assert!(
            matches!(quota, CloudError::ResourceExhausted(_)),
            "{quota:?}"
        );
        let denied = to_cloud_error("create x", api(403, "forbidden"));
        assert!(
            matches!(denied, CloudError::PermissionDenied(_)),
            "{denied:?}"
        );
        for (code, retryable) in [
            (401, true),
            (409, true),
            (422, false),
            (429, true),
            (500, true),
            (503, true),
            (504, true),
        ] {
            let e = to_cloud_error("x", api(code, "m"));
            assert!(!e.is_not_found(), "{code}: {e:?}");
            assert_eq!(e.is_retryable(), retryable, "{code}: {e:?}");
        }
        let html: serde_json::Error =
            serde_json::from_str::<serde_json::Value>("<html>").unwrap_err();
        let e = to_cloud_error("list x", kube::Error::SerdeError(html));
        assert!(matches!(e, CloudError::Unavailable(_)), "{e:?}");
    }
}
