//! The service controller: a Service of type LoadBalancer gets a balancer in the cloud,
//! its address in `status.loadBalancer.ingress`, and the
//! `service.kubernetes.io/load-balancer-cleanup` finalizer so it cannot vanish before the
//! balancer does. Backends follow the nodes; a Service asking for another
//! `loadBalancerClass` is left to its own controller.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use overcast_cloud::{
    Backend, LbPort, LoadBalancerRef, LoadBalancerSpec, LoadBalancerStatus, LoadBalancers,
    Protocol, ServiceRef,
};
use serde_json::json;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::nodes::ready;
use crate::retry::Backoff;
use crate::{Error, Result};

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
/// The label an EndpointSlice names its Service by.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Reconciles one Service at a time (the controller in [`run`] runs many of these at once).
pub struct ServiceSync {
    pub client: Client,
    pub cloud: Arc<dyn LoadBalancers>,
    pub recorder: Option<Recorder>,
    pub metrics: Arc<Metrics>,
    /// The loadBalancerClass we answer for besides the default (none set).
    pub class: Option<String>,
    /// A Service whose balancer was ensured and has not changed is ensured again after
    /// this long (repairs drift in the cloud); a change to it or to the backends, sooner.
    pub resync: Duration,
    /// Per-Service retry delays; outlives the controller (a leadership), so a broken
    /// Service does not start over at the shortest delay when this replica leads again.
    pub backoff: Arc<Mutex<Backoff>>,
    /// What each Service's balancer was last ensured as, and when, by Service uid: a
    /// watch event that changes nothing the cloud sees (our own status patch, an
    /// annotation) costs no cloud call.
    ensured: Mutex<HashMap<String, Ensured>>,
}

struct Ensured {
    spec: LoadBalancerSpec,
    status: LoadBalancerStatus,
    at: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A Service's backoff and cache key: its uid, so a Service deleted and made again under
/// the same name starts afresh instead of inheriting the old one's delay.
pub fn service_key(svc: &Service) -> String {
    svc.metadata.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            svc.metadata.namespace.as_deref().unwrap_or_default(),
            svc.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

/// The balancer's name: `a` + the Service uid without dashes, cut to 32 characters
/// (stable for the Service's life, unique, and short enough for every cloud).
pub fn balancer_name(svc: &Service) -> String {
    let uid: String = svc
        .uid()
        .unwrap_or_default()
        .chars()
        .filter(|c| *c != '-')
        .collect();
    format!("a{uid}").chars().take(32).collect()
}

pub fn service_ref(svc: &Service) -> ServiceRef {
    ServiceRef {
        namespace: svc.namespace().unwrap_or_default(),
        name: svc.name_any(),
        uid: svc.uid().unwrap_or_default(),
    }
}

/// What names the Service's balancer, also when its spec cannot be read.
pub fn balancer_ref(svc: &Service) -> LoadBalancerRef {
    LoadBalancerRef {
        name: balancer_name(svc),
        service: service_ref(svc),
        annotations: svc.annotations().clone(),
    }
}

/// Nodes traffic may go to: Ready, not excluded, not leaving; by their first InternalIP.
pub fn backends(nodes: &[Arc<Node>]) -> Vec<Backend> {
    let mut out: Vec<Backend> = nodes
        .iter()
        .filter(|n| {
            ready(n)
                && n.meta().deletion_timestamp.is_none()
                && !n.labels().contains_key(EXCLUDE_LABEL)
        })
        .filter_map(|n| {
            let addresses = n.status.as_ref()?.addresses.as_ref()?;
            let pick = |t: &str| {
                addresses
                    .iter()
                    .find(|a| a.type_ == t)
                    .map(|a| a.address.clone())
            };
            let address = pick("InternalIP").or_else(|| pick("ExternalIP"))?;
            Some(Backend {
                node: n.name_any(),
                address,
                labels: n.labels().clone(),
            })
        })
        .collect();
    out.sort();
    out
}

impl ServiceSync {
    pub fn new(client: Client, cloud: Arc<dyn LoadBalancers>, metrics: Arc<Metrics>) -> Self {
        Self {
            client,
            cloud,
            recorder: None,
            metrics,
            class: None,
            resync: Duration::from_secs(300),
            backoff: Arc::new(Mutex::new(Backoff::new(
                Duration::from_secs(5),
                Duration::from_secs(300),
            ))),
            ensured: Mutex::new(HashMap::new()),
        }
    }

    fn wants_balancer(&self, svc: &Service) -> bool {
        let Some(spec) = &svc.spec else { return false };
        spec.type_.as_deref() == Some("LoadBalancer")
            && svc.meta().deletion_timestamp.is_none()
            && match &spec.load_balancer_class {
                None => true,
                Some(c) => self.class.as_deref() == Some(c.as_str()),
            }
    }

    /// One pass over one Service, with its retry delay: a Service still waiting out a
    /// failure is put back until then without a call (unless its spec changed: a new
    /// `metadata.generation` is tried at once).
    pub async fn reconcile(&self, svc: Arc<Service>, nodes: &[Arc<Node>]) -> Result<Action> {
        let key = service_key(&svc);
        let generation = svc.metadata.generation;
        {
            let b = lock(&self.backoff);
            if !b.ready(&key, generation, Instant::now()) {
                return Ok(Action::requeue(b.remaining(&key, Instant::now())));
            }
        }
        let started = std::time::Instant::now();
        let result = self.apply(Arc::clone(&svc), nodes).await;
        self.metrics.reconciled(
            "service",
            started.elapsed().as_secs_f64(),
            result.as_ref().err(),
        );
        let mut b = lock(&self.backoff);
        match &result {
            Ok(_) => b.succeeded(&key),
            Err(e) => {
                let delay = b.failed(&key, generation, Instant::now());
                tracing::warn!(namespace = ?svc.metadata.namespace, service = ?svc.metadata.name, error = %e, retry_in = ?delay, failures = b.failures(&key), "service reconcile failed");
            }
        }
        self.metrics.service_backoff.set(b.waiting() as i64);
        result
    }

    /// When a failed Service is tried again (the controller's error policy).
    pub fn retry_after(&self, svc: &Service) -> Action {
        Action::requeue(lock(&self.backoff).remaining(&service_key(svc), Instant::now()))
    }

    async fn apply(&self, svc: Arc<Service>, nodes: &[Arc<Node>]) -> Result<Action> {
        let ours = svc.finalizers().iter().any(|f| f == FINALIZER);
        if !ours && !self.wants_balancer(&svc) {
            return Ok(Action::await_change());
        }
        let ns = svc.namespace().unwrap_or_else(|| "default".into());
        let api: Api<Service> = Api::namespaced(self.client.clone(), &ns);
        // finalizer() adds ours before the first balancer is made (so the Service cannot
        // vanish with its balancer still in the cloud) and removes it once Cleanup
        // succeeded; both patches are JSON patches that test the list they change.
        finalizer(&api, FINALIZER, svc, |event| async {
            match event {
                finalizer::Event::Apply(svc) if self.wants_balancer(&svc) => {
                    self.ensure(&api, &svc, nodes).await
                }
                // Still ours but no longer a balancer of ours (another type or class):
                // tear down, clear the address, let go.
                finalizer::Event::Apply(svc) => {
                    self.tear_down(&api, &svc).await?;
                    release(&api, &svc).await?;
                    Ok(Action::await_change())
                }
                finalizer::Event::Cleanup(svc) => {
                    self.tear_down(&api, &svc).await?;
                    Ok(Action::await_change())
                }
            }
        })
        .await
        .map_err(|e| match e {
            finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
            finalizer::Error::AddFinalizer(e) | finalizer::Error::RemoveFinalizer(e) => e.into(),
            other => Error::Invalid(other.to_string()),
        })
    }

    async fn ensure(
        &self,
        api: &Api<Service>,
        svc: &Service,
        nodes: &[Arc<Node>],
    ) -> Result<Action> {
        let key = service_key(svc);
        let mut spec = self.spec(svc)?;
        spec.backends = backends(nodes);
        if spec.local_traffic {
            let serving = self.nodes_with_ready_endpoints(svc).await?;
            spec.backends.retain(|b| serving.contains(&b.node));
        }
        let current = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.clone())
            .unwrap_or_default();
        let current = serde_json::to_value(current).unwrap_or_default();
        let unchanged = lock(&self.ensured).get(&key).and_then(|e| {
            let fresh = e.at.elapsed() < self.resync;
            (fresh && e.spec == spec && same_ingress(&current, &ingress(&e.status)))
                .then(|| self.resync.saturating_sub(e.at.elapsed()))
        });
        if let Some(left) = unchanged {
            return Ok(Action::requeue(left));
        }
        self.metrics.cloud_call("ensure_load_balancer");
        let status = match self.cloud.ensure_load_balancer(&spec).await {
            Ok(s) => s,
            Err(e) => {
                lock(&self.ensured).remove(&key);
                self.event(
                    svc,
                    EventType::Warning,
                    "SyncLoadBalancerFailed",
                    format!("{e}"),
                )
                .await;
                return Err(e.into());
            }
        };
        let missing: serde_json::Map<String, serde_json::Value> = status
            .annotations
            .iter()
            .filter(|(k, v)| svc.annotations().get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        if !missing.is_empty() {
            let patch = json!({"metadata": {"annotations": missing}});
            api.patch(
                &svc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        }
        let wanted = ingress(&status);
        if !same_ingress(&current, &wanted) {
            let patch = json!({"status": {"loadBalancer": {"ingress": wanted}}});
            api.patch_status(
                &svc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            let note = format!("load balancer at {}", status.ingress_ips.join(", "));
            self.event(svc, EventType::Normal, "EnsuredLoadBalancer", note)
                .await;
        }
        // The next pass reads the address we just wrote back as the one to keep: the
        // same balancer, not a change.
        if spec.requested_ip.is_none() {
            spec.requested_ip = status.ingress_ips.first().cloned();
        }
        // Nor are the annotations the cloud asked us to record.
        spec.annotations.extend(status.annotations.clone());
        lock(&self.ensured).insert(
            key,
            Ensured {
                spec,
                status,
                at: Instant::now(),
            },
        );
        Ok(Action::requeue(self.resync))
    }

    /// The nodes holding a ready endpoint of `svc` (its EndpointSlices, one list call):
    /// where `externalTrafficPolicy: Local` traffic may go.
    async fn nodes_with_ready_endpoints(&self, svc: &Service) -> Result<BTreeSet<String>> {
        let ns = svc.namespace().unwrap_or_else(|| "default".into());
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &ns);
        let lp = ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={}", svc.name_any()));
        Ok(slices
            .list(&lp)
            .await?
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter())
            // A missing `ready` means ready (the EndpointSlice API's rule).
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
            .filter_map(|e| e.node_name.clone())
            .collect())
    }

    async fn tear_down(&self, api: &Api<Service>, svc: &Service) -> Result<()> {
        self.metrics.cloud_call("delete_load_balancer");
        self.cloud.delete_load_balancer(&balancer_ref(svc)).await?;
        lock(&self.ensured).remove(&service_key(svc));
        self.event(
            svc,
            EventType::Normal,
            "DeletedLoadBalancer",
            "load balancer deleted".into(),
        )
        .await;
        let has_ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .is_some_and(|i| !i.is_empty());
        if svc.meta().deletion_timestamp.is_none() && has_ingress {
            let patch = json!({"status": {"loadBalancer": {"ingress": null}}});
            api.patch_status(
                &svc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        }
        Ok(())
    }

    fn spec(&self, svc: &Service) -> Result<LoadBalancerSpec> {
        let spec = svc
            .spec
            .as_ref()
            .ok_or_else(|| Error::Invalid("service without spec".into()))?;
        let mut ports = Vec::new();
        for p in spec.ports.iter().flatten() {
            let protocol = match p.protocol.as_deref().unwrap_or("TCP") {
                "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                "SCTP" => Protocol::Sctp,
                other => {
                    return Err(Error::Invalid(format!(
                        "protocol {other} is not supported by this cloud's balancers"
                    )))
                }
            };
            let node_port = p
                .node_port
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| Error::Invalid(format!("port {} has no nodePort yet", p.port)))?;
            let port = u16::try_from(p.port)
                .map_err(|_| Error::Invalid(format!("port {} is out of range", p.port)))?;
            ports.push(LbPort {
                name: p.name.clone().unwrap_or_default(),
                protocol,
                port,
                node_port,
            });
        }
        let existing_ip = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .and_then(|i| i.first())
            .and_then(|i| i.ip.clone());
        let load_balancer_ip = spec.load_balancer_ip.clone().filter(|s| !s.is_empty());
        Ok(LoadBalancerSpec {
            name: balancer_name(svc),
            service: service_ref(svc),
            ports,
            backends: Vec::new(),
            // Keep the address a restart found, or the one the user asked for.
            requested_ip: load_balancer_ip.clone().or(existing_ip),
            load_balancer_ip,
            local_traffic: spec.external_traffic_policy.as_deref() == Some("Local"),
            health_check_node_port: spec
                .health_check_node_port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0),
            client_ip_affinity: spec.session_affinity.as_deref() == Some("ClientIP"),
            source_ranges: spec.load_balancer_source_ranges.clone().unwrap_or_default(),
            annotations: svc.annotations().clone(),
            class: spec.load_balancer_class.clone(),
        })
    }

    async fn event(&self, svc: &Service, type_: EventType, reason: &str, note: String) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &svc.object_ref(&())).await {
            tracing::warn!(error = %e, "could not record an event");
        }
    }
}

#[cfg(test)]
mod tests;

/// `status.loadBalancer.ingress` for a cloud's answer.
fn ingress(status: &LoadBalancerStatus) -> serde_json::Value {
    let ips = status.ingress_ips.iter().map(|ip| {
        if status.proxy_ip_mode {
            json!({"ip": ip, "ipMode": "Proxy"})
        } else {
            json!({"ip": ip})
        }
    });
    let names = status
        .ingress_hostnames
        .iter()
        .map(|h| json!({"hostname": h}));
    serde_json::Value::Array(ips.chain(names).collect())
}

/// Whether the Service's ingress already says what the cloud answered: the same
/// addresses and names, and the same `ipMode` where the API server keeps that field
/// (1.29+ fills it in; an older one drops it, and a comparison with it would patch on
/// every pass).
fn same_ingress(current: &serde_json::Value, wanted: &serde_json::Value) -> bool {
    let entries = |v: &serde_json::Value| v.as_array().cloned().unwrap_or_default();
    let (have, want) = (entries(current), entries(wanted));
    let modes_kept = have.iter().any(|e| e.get("ipMode").is_some());
    have.len() == want.len()
        && have.iter().zip(&want).all(|(h, w)| {
            let mode = |e: &serde_json::Value, ip: bool| match e.get("ipMode") {
                Some(m) => m.clone(),
                // The API server's default for an entry with an ip.
                None if ip => json!("VIP"),
                None => serde_json::Value::Null,
            };
            h.get("ip") == w.get("ip")
                && h.get("hostname") == w.get("hostname")
                && (!modes_kept || mode(h, h.get("ip").is_some()) == mode(w, w.get("ip").is_some()))
        })
}

/// Removes our finalizer from a Service that is not being deleted (it stopped being a
/// balancer of ours). Tests the entry first, as finalizer() does, so a concurrent change
/// to the list fails this patch (and the Service is tried again) instead of removing
/// someone else's finalizer.
async fn release(api: &Api<Service>, svc: &Service) -> Result<()> {
    let Some(i) = svc.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(());
    };
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
    ]))
    .map_err(|e| Error::Invalid(format!("finalizer patch: {e}")))?;
    api.patch(
        &svc.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await?;
    Ok(())
}

/// Runs the service controller until `shutdown`: every Service of type LoadBalancer (and
/// every Service still holding our finalizer) is reconciled on its own changes, on
/// `nodes_changed` (backends follow the nodes), and every `resync`. Up to `concurrency`
/// Services are reconciled at once and never one Service twice at once, so a balancer
/// that takes minutes in the cloud holds only its own Service.
pub async fn run(
    sync: Arc<ServiceSync>,
    nodes: Store<Node>,
    nodes_changed: impl Stream<Item = ()> + Send + 'static,
    concurrency: u16,
) {
    let api: Api<Service> = Api::all(sync.client.clone());
    let controller = Controller::new(api, watcher::Config::default())
        .with_config(
            Config::default()
                .concurrency(concurrency)
                // A burst of node changes settles into one pass.
                .debounce(Duration::from_millis(100)),
        )
        .reconcile_all_on(nodes_changed)
        // An EndpointSlice's change re-runs its Service: the backends of an
        // `externalTrafficPolicy: Local` balancer follow where its endpoints are ready
        // (any other Service's pass is answered from the ensured cache, no cloud call).
        .watches(
            Api::<EndpointSlice>::all(sync.client.clone()),
            watcher::Config::default(),
            |slice| {
                let service = slice.labels().get(SERVICE_NAME_LABEL)?.clone();
                Some(ObjectRef::new(&service).within(&slice.namespace()?))
            },
        );
    let services = controller.store();
    controller
        .run(
            move |svc, sync: Arc<ServiceSync>| {
                // The cache's own Arcs: a pass costs no copy of the nodes.
                let nodes = nodes.state();
                let services = services.clone();
                async move {
                    let result = sync.reconcile(svc, &nodes).await;
                    if result.is_err() {
                        // Forget the delays of Services that are gone.
                        let present: std::collections::HashSet<String> =
                            services.state().iter().map(|s| service_key(s)).collect();
                        lock(&sync.backoff).retain(|k| present.contains(k));
                    }
                    result
                }
            },
            |svc, _error, sync| sync.retry_after(&svc),
            sync,
        )
        .for_each(|_| async {})
        .await;
}
