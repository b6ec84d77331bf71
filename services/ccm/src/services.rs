//! The service controller: a Service of type LoadBalancer gets a balancer in the cloud,
//! its address in `status.loadBalancer.ingress`, and the
//! `service.kubernetes.io/load-balancer-cleanup` finalizer so it cannot vanish before the
//! balancer does. Backends follow the nodes; a Service asking for another
//! `loadBalancerClass` is left to its own controller.

use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use overcast_cloud::{Backend, LbPort, LoadBalancerSpec, LoadBalancers, Protocol};
use serde_json::json;

use crate::metrics::Metrics;
use crate::nodes::ready;
use crate::{Error, Result};

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

pub struct ServiceSync<'a> {
    pub client: Client,
    pub cloud: &'a dyn LoadBalancers,
    pub recorder: Option<&'a Recorder>,
    pub metrics: &'a Metrics,
    /// The loadBalancerClass we answer for besides the default (none set).
    pub class: Option<String>,
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

/// Nodes traffic may go to: Ready, not excluded, not leaving; by their first InternalIP.
pub fn backends(nodes: &[Node]) -> Vec<Backend> {
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
            })
        })
        .collect();
    out.sort();
    out
}

impl ServiceSync<'_> {
    fn wants_balancer(&self, svc: &Service) -> bool {
        let Some(spec) = &svc.spec else { return false };
        spec.type_.as_deref() == Some("LoadBalancer")
            && svc.meta().deletion_timestamp.is_none()
            && match &spec.load_balancer_class {
                None => true,
                Some(c) => self.class.as_deref() == Some(c.as_str()),
            }
    }

    pub async fn reconcile(&self, svc: &Service, nodes: &[Node]) -> Result<()> {
        let started = Instant::now();
        let result = self.apply(svc, nodes).await;
        self.metrics.reconciled(
            "service",
            started.elapsed().as_secs_f64(),
            result.as_ref().err(),
        );
        result
    }

    async fn apply(&self, svc: &Service, nodes: &[Node]) -> Result<()> {
        let ns = svc.namespace().unwrap_or_else(|| "default".into());
        let api: Api<Service> = Api::namespaced(self.client.clone(), &ns);
        let name = svc.name_any();
        let ours = svc.finalizers().iter().any(|f| f == FINALIZER);
        if self.wants_balancer(svc) {
            if !ours {
                let mut finalizers = svc.finalizers().to_vec();
                finalizers.push(FINALIZER.to_owned());
                let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": svc.resource_version()}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            let mut spec = self.spec(svc)?;
            spec.backends = backends(nodes);
            self.metrics.cloud_call("ensure_load_balancer");
            let status = match self.cloud.ensure_load_balancer(&spec).await {
                Ok(s) => s,
                Err(e) => {
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
            let ingress: Vec<serde_json::Value> = status
                .ingress_ips
                .iter()
                .map(|ip| json!({"ip": ip}))
                .chain(
                    status
                        .ingress_hostnames
                        .iter()
                        .map(|h| json!({"hostname": h})),
                )
                .collect();
            let current = serde_json::to_value(
                svc.status
                    .as_ref()
                    .and_then(|s| s.load_balancer.as_ref())
                    .and_then(|l| l.ingress.clone())
                    .unwrap_or_default(),
            )
            .unwrap_or_default();
            if current != json!(ingress) {
                let patch = json!({"status": {"loadBalancer": {"ingress": ingress}}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                let note = format!("load balancer at {}", status.ingress_ips.join(", "));
                self.event(svc, EventType::Normal, "EnsuredLoadBalancer", note)
                    .await;
            }
            return Ok(());
        }
        if !ours {
            return Ok(());
        }
        // No longer ours to balance (deleted, another type or class): tear down, then let go.
        self.metrics.cloud_call("delete_load_balancer");
        self.cloud.delete_load_balancer(&balancer_name(svc)).await?;
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
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        let finalizers: Vec<&String> = svc
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .collect();
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": svc.resource_version()}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
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
        Ok(LoadBalancerSpec {
            name: balancer_name(svc),
            service: format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any()),
            ports,
            backends: Vec::new(),
            // Keep the address a restart found, or the one the user asked for.
            requested_ip: spec
                .load_balancer_ip
                .clone()
                .filter(|s| !s.is_empty())
                .or(existing_ip),
        })
    }

    async fn event(&self, svc: &Service, type_: EventType, reason: &str, note: String) {
        let Some(recorder) = self.recorder else {
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
