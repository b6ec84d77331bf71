//! Services of type LoadBalancer on Octavia, as openstack-cloud-controller-manager makes
//! them — so a cluster moving from OCCM adopts its load balancers instead of making
//! second ones: the load balancer `kube_service_<cluster>_<namespace>_<name>` (or the
//! legacy `a<uid>`, or the one `loadbalancer.openstack.org/load-balancer-id` names),
//! tagged with that name; a listener `listener_<i>_<lb>` per Service port, its pool
//! `pool_<i>_<lb>` of the nodes' InternalIPs and NodePorts, `monitor_<i>_<lb>` when asked;
//! a floating IP described "Floating IP for Kubernetes external service …" on its VIP port.
//!
//! A new load balancer is made in one call, fully populated (or alone, its children
//! then added one by one, with `provider-requires-serial-api-calls`), then awaited
//! `ACTIVE`; an
//! existing one is read (its listeners, pools, each pool's members) and only what
//! differs is changed, one call at a time, each awaited, as Octavia requires. Deletion
//! cascades. A load balancer this Service does not own (adopted by id and named for
//! another) keeps everything but this Service's tagged listeners.

mod address;
pub mod api;
mod bodies;
pub mod conf;
pub mod neutron;
mod sync;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use http::Method;
use overcast_cloud::{
    Backend, CloudError, LoadBalancerRef, LoadBalancerSpec, LoadBalancerStatus, LoadBalancers,
    Result, ServiceRef,
};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::client::OpenStack;
use crate::config::LoadBalancerOpts;
use crate::volumes::encode;
use api::{LoadBalancer, Octavia, Waits};
use conf::{Features, ServiceConf, FIP_DESCRIPTION, LOAD_BALANCER_ID, LOAD_BALANCER_ID_WRITTEN};

/// OCCM's names are cut to Octavia's 255 characters (`Sprintf255`).
pub(crate) fn cut255(s: String) -> String {
    if s.len() <= 255 {
        return s;
    }
    let mut end = 255;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// `kube_service_<cluster>_<namespace>_<name>`: OCCM's load-balancer name.
pub fn load_balancer_name(cluster: &str, service: &ServiceRef) -> String {
    cut255(format!(
        "kube_service_{cluster}_{}_{}",
        service.namespace, service.name
    ))
}

const SERVICE_PREFIX: &str = "kube_service_";

/// Whether a load balancer named `lb_name` is this Service's own: OCCM's name for it
/// (under any cluster name — OCCM renames those after a cluster rename), or the legacy
/// `a<uid>` name. Not merely any `kube_service_` one: a Service that names another's load
/// balancer by `load-balancer-id` shares it, and its deletion must not take it along.
fn owns(lb_name: &str, cluster: &str, service: &ServiceRef, legacy: &str) -> bool {
    lb_name == legacy
        || lb_name == load_balancer_name(cluster, service)
        || (lb_name.starts_with(SERVICE_PREFIX)
            && lb_name.ends_with(&format!("_{}_{}", service.namespace, service.name)))
}

pub struct OctaviaLoadBalancers {
    api: Octavia,
    opts: LoadBalancerOpts,
    cluster: String,
    features: OnceCell<Features>,
}

impl OctaviaLoadBalancers {
    pub fn new(os: Arc<OpenStack>, opts: LoadBalancerOpts, cluster: String) -> Self {
        if opts.manage_security_groups {
            tracing::warn!("[LoadBalancer] manage-security-groups is not in this build: no security groups are made for the members");
        }
        Self {
            api: Octavia {
                os,
                waits: Waits::default(),
            },
            opts,
            cluster,
            features: OnceCell::new(),
        }
    }

    pub fn with_waits(mut self, waits: Waits) -> Self {
        self.api.waits = waits;
        self
    }

    async fn features(&self) -> Result<Features> {
        self.features
            .get_or_try_init(|| async {
                let version = self.api.version().await?;
                tracing::info!(?version, provider = %self.opts.lb_provider, "Octavia API version");
                Ok(Features::of(version, &self.opts.lb_provider))
            })
            .await
            .copied()
    }

    fn os(&self) -> &OpenStack {
        &self.api.os
    }

    /// The Service's load balancer: the one its annotation names, else by OCCM's name,
    /// else by the legacy name; one being deleted does not count. An annotation naming a
    /// balancer that is gone is judged by who wrote it: this ccm (the id it recorded
    /// beside it) — the balancer it made is gone, and is found by name or made anew —
    /// or anyone else, whose balancer this ccm never replaces (NOT_FOUND, said on the
    /// Service).
    async fn find(
        &self,
        lb: &LoadBalancerRef,
        lb_id: Option<&str>,
    ) -> Result<Option<LoadBalancer>> {
        if let Some(id) = lb_id {
            match self.api.load_balancer(id).await? {
                Some(found) => return Ok(Some(found)),
                None if lb.annotations.get(LOAD_BALANCER_ID_WRITTEN).map(String::as_str) == Some(id) => {
                    tracing::warn!(service = %lb.service, load_balancer = %id, "the load balancer this ccm made for the Service is gone: looking for it by name, else making it anew");
                }
                None => {
                    return Err(CloudError::NotFound {
                        kind: "load balancer",
                        id: format!(
                            "{id} (named by {LOAD_BALANCER_ID} on {}, not written by this ccm: it is not replaced; remove the annotation to have one made)",
                            lb.service
                        ),
                    })
                }
            }
        }
        let name = load_balancer_name(&self.cluster, &lb.service);
        for candidate in [name.as_str(), lb.name.as_str()] {
            let live: Vec<LoadBalancer> = self
                .api
                .load_balancers_named(candidate)
                .await?
                .into_iter()
                .filter(|l| !matches!(l.provisioning_status.as_str(), "DELETED" | "PENDING_DELETE"))
                .collect();
            match live.len() {
                0 => continue,
                1 => return Ok(live.into_iter().next()),
                n => {
                    return Err(CloudError::FailedPrecondition(format!(
                        "openstack: {n} load balancers are named {candidate}; delete the extra ones"
                    )))
                }
            }
        }
        Ok(None)
    }

    /// The Service's load balancer if there is one: a `load-balancer-id` naming one that
    /// is gone (or `DELETED`) is none.
    async fn existing(&self, r: &LoadBalancerRef) -> Result<Option<LoadBalancer>> {
        let id = r
            .annotations
            .get(LOAD_BALANCER_ID)
            .filter(|s| !s.is_empty());
        match self.find(r, id.map(String::as_str)).await {
            Err(CloudError::NotFound { .. }) => Ok(None),
            Ok(Some(lb)) if lb.provisioning_status == "DELETED" => Ok(None),
            other => other,
        }
    }

    /// Waits out a `PENDING_*` load balancer; `ERROR` is an error.
    async fn settled(&self, lb: LoadBalancer) -> Result<LoadBalancer> {
        match lb.provisioning_status.as_str() {
            "ACTIVE" => Ok(lb),
            "ERROR" => Err(CloudError::Unavailable(format!(
                "openstack: load balancer {} is in ERROR; see Octavia's logs",
                lb.id
            ))),
            _ => self.api.wait_active(&lb.id).await,
        }
    }
}

fn selected(selector: &BTreeMap<String, String>, b: &Backend) -> bool {
    selector.iter().all(|(k, v)| match b.labels.get(k) {
        Some(have) => v.is_empty() || have == v,
        None => false,
    })
}

#[async_trait]
impl LoadBalancers for OctaviaLoadBalancers {
    async fn get_load_balancer(&self, r: &LoadBalancerRef) -> Result<Option<LoadBalancerStatus>> {
        let Some(lb) = self.existing(r).await? else {
            return Ok(None);
        };
        let fip = if lb.vip_port_id.is_empty() {
            None
        } else {
            neutron::floating_ip_of_port(self.os(), &lb.vip_port_id).await?
        };
        Ok(Some(LoadBalancerStatus {
            ingress_ips: vec![fip.map(|f| f.floating_ip_address).unwrap_or(lb.vip_address)],
            ..LoadBalancerStatus::default()
        }))
    }

    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancerStatus> {
        if !self.opts.enabled {
            return Err(CloudError::FailedPrecondition(
                "openstack: [LoadBalancer] enabled = false: this cloud makes no load balancers"
                    .into(),
            ));
        }
        let f = self.features().await?;
        let c = ServiceConf::read(spec, &self.opts, f)?;
        let name = load_balancer_name(&self.cluster, &spec.service);
        let nodes: Vec<&Backend> = spec
            .backends
            .iter()
            .filter(|b| selected(&c.node_selector, b))
            .collect();
        let found = self.find(&spec.reference(), c.lb_id.as_deref()).await?;
        let (lb, owner, created) = match found {
            Some(lb)
                if lb.provisioning_status == "ERROR"
                    && owns(&lb.name, &self.cluster, &spec.service, &spec.name) =>
            {
                // OCCM leaves such a Service broken until someone deletes the load
                // balancer by hand; it is ours, so it goes (the delete waits until Octavia
                // has removed it, and its VIP port with it) and is made again in this same
                // pass, so the Service's ingress and annotations name the new one at once
                // (its floating IP is found again by the Service's address).
                tracing::warn!(service = %spec.service, load_balancer = %lb.id, "load balancer in ERROR: deleting it to make it again");
                self.api.delete_load_balancer(&lb.id, true).await?;
                (
                    self.create(spec, &c, f, &name, &nodes).await?,
                    true,
                    !self.opts.provider_requires_serial_api_calls,
                )
            }
            Some(lb) => {
                let owner = owns(&lb.name, &self.cluster, &spec.service, &spec.name);
                (self.settled(lb).await?, owner, false)
            }
            None => (
                self.create(spec, &c, f, &name, &nodes).await?,
                true,
                !self.opts.provider_requires_serial_api_calls,
            ),
        };
        if !owner {
            if !f.tags {
                return Err(CloudError::FailedPrecondition(format!(
                    "{}: a shared load balancer needs Octavia's tags (API 2.5+)",
                    spec.service
                )));
            }
            let shared = lb
                .tags
                .iter()
                .filter(|t| t.starts_with(SERVICE_PREFIX))
                .count();
            if !lb.tags.contains(&name) && shared + 1 > self.opts.max_shared_lb as usize {
                return Err(CloudError::FailedPrecondition(format!(
                    "{}: load balancer {} is already shared with {shared} Services ([LoadBalancer] max-shared-lb)",
                    spec.service, lb.id
                )));
            }
            if c.internal {
                return Err(CloudError::FailedPrecondition(format!(
                    "{}: an internal Service cannot share a load balancer",
                    spec.service
                )));
            }
        }
        if !created {
            let pass = sync::Pass {
                lb: &lb,
                spec,
                c: &c,
                f,
                name: &name,
                nodes: &nodes,
            };
            self.sync(pass, owner).await?;
        }
        let address = if lb.vip_address.contains(':') {
            // IPv6 load balancers take no floating IP.
            lb.vip_address.clone()
        } else {
            self.ensure_floating_ip(&lb, spec, &c, owner).await?
        };
        if f.tags && !lb.tags.contains(&name) {
            let mut tags = lb.tags.clone();
            tags.push(name.clone());
            self.api
                .mutate(
                    &lb.id,
                    "loadbalancer_update",
                    Method::PUT,
                    &format!("/v2/lbaas/loadbalancers/{}", encode(&lb.id)),
                    Some(json!({"loadbalancer": {"tags": tags}})),
                )
                .await?;
        }
        Ok(self.status(&c, &lb, &address))
    }

    async fn delete_load_balancer(&self, r: &LoadBalancerRef) -> Result<()> {
        let Some(lb) = self.existing(r).await? else {
            return Ok(());
        };
        if !matches!(lb.provisioning_status.as_str(), "ACTIVE" | "ERROR") {
            return Err(CloudError::Unavailable(format!(
                "openstack: load balancer {} is {}; its deletion is retried",
                lb.id, lb.provisioning_status
            )));
        }
        let name = load_balancer_name(&self.cluster, &r.service);
        let ours = owns(&lb.name, &self.cluster, &r.service, &r.name);
        let shared = lb
            .tags
            .iter()
            .any(|t| t != &name && t.starts_with(SERVICE_PREFIX));
        let delete_lb = ours && !shared;
        let keep_fip = r
            .annotations
            .get(conf::KEEP_FLOATING_IP)
            .map(String::as_str)
            == Some("true");
        if delete_lb && !keep_fip && !lb.vip_port_id.is_empty() {
            if let Some(fip) = neutron::floating_ip_of_port(self.os(), &lb.vip_port_id).await? {
                if fip.description.contains(FIP_DESCRIPTION) {
                    tracing::info!(service = %r.service, address = %fip.floating_ip_address, "deleting floating IP");
                    neutron::delete_floating_ip(self.os(), &fip.id).await?;
                }
            }
        }
        if delete_lb && self.opts.cascade_delete {
            tracing::info!(service = %r.service, load_balancer = %lb.id, "deleting load balancer");
            return self.api.delete_load_balancer(&lb.id, true).await;
        }
        let listeners = self.api.listeners(&lb.id).await?;
        let pools = self.api.pools(&lb.id).await?;
        for l in listeners
            .iter()
            .filter(|l| delete_lb || l.tags.iter().any(|t| t == &name))
        {
            for pool in pools
                .iter()
                .filter(|p| p.listeners.iter().any(|x| x.id == l.id))
            {
                if let Some(m) = &pool.healthmonitor_id {
                    self.api
                        .delete_child(
                            &lb.id,
                            "healthmonitor_delete",
                            &format!("/v2/lbaas/healthmonitors/{}", encode(m)),
                        )
                        .await?;
                }
            }
            self.delete_listener(&lb.id, &l.id, &pools).await?;
        }
        if delete_lb {
            return self.api.delete_load_balancer(&lb.id, false).await;
        }
        if lb.tags.contains(&name) {
            let tags: Vec<&String> = lb.tags.iter().filter(|t| *t != &name).collect();
            self.api
                .mutate(
                    &lb.id,
                    "loadbalancer_update",
                    Method::PUT,
                    &format!("/v2/lbaas/loadbalancers/{}", encode(&lb.id)),
                    Some(json!({"loadbalancer": {"tags": tags}})),
                )
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_occms() {
        let svc = ServiceRef {
            namespace: "shop".into(),
            name: "web".into(),
            uid: String::new(),
        };
        assert_eq!(
            load_balancer_name("kubernetes", &svc),
            "kube_service_kubernetes_shop_web"
        );
        let long = ServiceRef {
            namespace: "n".repeat(63),
            name: "s".repeat(253),
            uid: String::new(),
        };
        assert_eq!(load_balancer_name("c", &long).len(), 255);
    }

    #[test]
    fn a_service_owns_only_its_own_load_balancer() {
        let web = ServiceRef {
            namespace: "shop".into(),
            name: "web".into(),
            uid: String::new(),
        };
        assert!(owns("kube_service_c1_shop_web", "c1", &web, "a0123"));
        // Made by OCCM under the cluster's earlier name.
        assert!(owns("kube_service_old_shop_web", "c1", &web, "a0123"));
        assert!(owns("a0123", "c1", &web, "a0123"));
        // Another Service's, named by this one's load-balancer-id annotation.
        assert!(!owns("kube_service_c1_shop_api", "c1", &web, "a0123"));
        assert!(!owns("kube_service_c1_shop_web2", "c1", &web, "a0123"));
        assert!(!owns("shared-by-hand", "c1", &web, "a0123"));
    }

    #[test]
    fn node_selectors_match_labels() {
        let b = Backend {
            node: "n1".into(),
            address: "10.0.0.1".into(),
            labels: BTreeMap::from([("role".into(), "edge".into())]),
        };
        assert!(selected(&BTreeMap::new(), &b));
        assert!(selected(&conf::selector("role=edge"), &b));
        assert!(selected(&conf::selector("role"), &b));
        assert!(!selected(&conf::selector("role=core"), &b));
        assert!(!selected(&conf::selector("zone"), &b));
    }
}
