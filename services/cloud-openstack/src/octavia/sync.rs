//! Making a load balancer in one call, and bringing an existing one's listeners, pools,
//! members and monitors to what the Service asks, one awaited change at a time.

use std::collections::BTreeSet;

use http::Method;
use overcast_cloud::{Backend, CloudError, LbPort, LoadBalancerSpec, Result};
use serde_json::{json, Value};

use super::api::{LoadBalancer, Pool};
use super::conf::{Features, ServiceConf};
use super::{neutron, OctaviaLoadBalancers};
use crate::volumes::encode;

/// What a pass over one Service's existing load balancer works from.
#[derive(Clone, Copy)]
pub(super) struct Pass<'a> {
    pub lb: &'a LoadBalancer,
    pub spec: &'a LoadBalancerSpec,
    pub c: &'a ServiceConf,
    pub f: Features,
    /// The load balancer's name for this Service (its listeners' tag).
    pub name: &'a str,
    pub nodes: &'a [&'a Backend],
}

impl OctaviaLoadBalancers {
    /// Makes the load balancer with everything on it, in one call.
    pub(super) async fn create(
        &self,
        spec: &LoadBalancerSpec,
        c: &ServiceConf,
        f: Features,
        name: &str,
        nodes: &[&Backend],
    ) -> Result<LoadBalancer> {
        let mut vip_subnet = c.subnet_id.clone();
        if c.port_id.is_none() && vip_subnet.is_none() && c.network_id.is_none() {
            let first = nodes.first().ok_or_else(|| {
                CloudError::FailedPrecondition(format!(
                    "{}: no node to find the load balancer's subnet from; set [LoadBalancer] subnet-id",
                    spec.service
                ))
            })?;
            vip_subnet = Some(neutron::subnet_of_address(self.os(), &first.address).await?);
        }
        let member_subnet = c.member_subnet_id.clone().or_else(|| vip_subnet.clone());
        let mut body = json!({
            "name": name,
            "description": format!(
                "Kubernetes external service {} from cluster {}",
                spec.service, self.cluster
            ),
            "provider": self.opts.lb_provider,
        });
        if f.tags {
            body["tags"] = json!([name]);
        }
        if let Some(flavor) = &c.flavor_id {
            body["flavor_id"] = json!(flavor);
        }
        if let Some(az) = &c.availability_zone {
            body["availability_zone"] = json!(az);
        }
        match &c.port_id {
            Some(port) => body["vip_port_id"] = json!(port),
            None => {
                if let Some(s) = &vip_subnet {
                    body["vip_subnet_id"] = json!(s);
                }
                if let Some(n) = &c.network_id {
                    body["vip_network_id"] = json!(n);
                }
            }
        }
        // For an external load balancer spec.loadBalancerIP is the floating IP's.
        if let (true, Some(ip)) = (c.internal, &spec.load_balancer_ip) {
            body["vip_address"] = json!(ip);
        }
        let mut listeners = Vec::new();
        // `provider-requires-serial-api-calls`: the load balancer alone; the listeners
        // and the rest are then added one by one, as on an existing one.
        let ports = if self.opts.provider_requires_serial_api_calls {
            &[][..]
        } else {
            &spec.ports[..]
        };
        for (i, p) in ports.iter().enumerate() {
            let mut l = self.listener_body(i, name, p, c, f);
            let mut pool = self.pool_body(
                i,
                name,
                &c.listener_protocol(p.protocol.as_str()),
                c,
                spec.client_ip_affinity,
            );
            pool["members"] = json!(self.members(p, nodes, c, member_subnet.as_deref()));
            if let Some(m) = self.monitor_body(i, name, p, c, f) {
                pool["healthmonitor"] = m;
            }
            l["default_pool"] = pool;
            listeners.push(l);
        }
        body["listeners"] = json!(listeners);
        tracing::info!(service = %spec.service, load_balancer = %name, "creating load balancer");
        self.api.create_load_balancer(body).await
    }

    /// Brings an existing load balancer's listeners, pools, members and monitors to
    /// what the Service asks, changing only what differs.
    pub(super) async fn sync(&self, pass: Pass<'_>, owner: bool) -> Result<()> {
        let Pass {
            lb,
            spec,
            c,
            f,
            name,
            ..
        } = pass;
        let listeners = self.api.listeners(&lb.id).await?;
        let pools = self.api.pools(&lb.id).await?;
        let mine = |tags: &[String]| tags.iter().any(|t| t == name) || (owner && tags.is_empty());
        for p in &spec.ports {
            let protocol = c.listener_protocol(p.protocol.as_str());
            if let Some(l) = listeners
                .iter()
                .find(|l| l.protocol == protocol && l.protocol_port == p.port)
            {
                if !mine(&l.tags) {
                    return Err(CloudError::FailedPrecondition(format!(
                        "{}: the listener port {} already exists on load balancer {}",
                        spec.service, p.port, lb.id
                    )));
                }
            }
        }
        let member_subnet = c
            .member_subnet_id
            .clone()
            .or_else(|| (!lb.vip_subnet_id.is_empty()).then(|| lb.vip_subnet_id.clone()));
        let mut kept = BTreeSet::new();
        for (i, p) in spec.ports.iter().enumerate() {
            let protocol = c.listener_protocol(p.protocol.as_str());
            let want = self.listener_body(i, name, p, c, f);
            let listener_id = match listeners
                .iter()
                .find(|l| l.protocol == protocol && l.protocol_port == p.port)
            {
                None => {
                    let mut body = want;
                    body["loadbalancer_id"] = json!(lb.id);
                    let made = self
                        .api
                        .mutate(
                            &lb.id,
                            "listener_create",
                            Method::POST,
                            "/v2/lbaas/listeners",
                            Some(json!({"listener": body})),
                        )
                        .await?;
                    made["listener"]["id"]
                        .as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            CloudError::Unavailable(
                                "openstack: listener_create: no id in the answer".into(),
                            )
                        })?
                }
                Some(have) => {
                    let mut update = serde_json::Map::new();
                    if f.tags && !have.tags.iter().any(|t| t == name) {
                        let mut tags = have.tags.clone();
                        tags.push(name.to_owned());
                        update.insert("tags".into(), json!(tags));
                    }
                    if have.connection_limit != c.conn_limit {
                        update.insert("connection_limit".into(), json!(c.conn_limit));
                    }
                    let has_xff = have
                        .insert_headers
                        .get("X-Forwarded-For")
                        .map(String::as_str)
                        == Some("true");
                    if has_xff != c.keep_client_ip {
                        let mut headers = have.insert_headers.clone();
                        if c.keep_client_ip {
                            headers.insert("X-Forwarded-For".into(), "true".into());
                        } else {
                            headers.remove("X-Forwarded-For");
                        }
                        update.insert("insert_headers".into(), json!(headers));
                    }
                    if let Some(t) = c.timeouts {
                        let keys = [
                            "timeout_client_data",
                            "timeout_member_connect",
                            "timeout_member_data",
                            "timeout_tcp_inspect",
                        ];
                        let have_t = [
                            have.timeout_client_data,
                            have.timeout_member_connect,
                            have.timeout_member_data,
                            have.timeout_tcp_inspect,
                        ];
                        for ((k, want), have) in keys.iter().zip(t).zip(have_t) {
                            if have != Some(want) {
                                update.insert((*k).into(), json!(want));
                            }
                        }
                    }
                    if let Some(cidrs) = &c.allowed_cidrs {
                        let have_set: BTreeSet<&String> =
                            have.allowed_cidrs.iter().flatten().collect();
                        let want_set: BTreeSet<&String> = cidrs.iter().collect();
                        if have_set != want_set {
                            update.insert("allowed_cidrs".into(), json!(cidrs));
                        }
                    }
                    if !update.is_empty() {
                        tracing::info!(listener = %have.id, changes = ?update.keys().collect::<Vec<_>>(), "updating listener");
                        self.api
                            .mutate(
                                &lb.id,
                                "listener_update",
                                Method::PUT,
                                &format!("/v2/lbaas/listeners/{}", encode(&have.id)),
                                Some(json!({"listener": Value::Object(update)})),
                            )
                            .await?;
                    }
                    have.id.clone()
                }
            };
            kept.insert(listener_id.clone());
            self.sync_pool(
                pass,
                (i, p),
                &listener_id,
                &protocol,
                &pools,
                member_subnet.as_deref(),
            )
            .await?;
        }
        // Listeners of ports the Service no longer has: this Service's go.
        for l in listeners
            .iter()
            .filter(|l| !kept.contains(&l.id) && mine(&l.tags))
        {
            self.delete_listener(&lb.id, &l.id, &pools).await?;
        }
        Ok(())
    }

    /// The pool of listener `listener` for Service port `i`, its members, its monitor.
    pub(super) async fn sync_pool(
        &self,
        pass: Pass<'_>,
        (i, p): (usize, &LbPort),
        listener: &str,
        listener_protocol: &str,
        pools: &[Pool],
        member_subnet: Option<&str>,
    ) -> Result<()> {
        let Pass {
            lb,
            spec,
            c,
            name,
            nodes,
            ..
        } = pass;
        let want_protocol = c.pool_protocol(listener_protocol);
        let mut pool = pools
            .iter()
            .find(|pool| pool.listeners.iter().any(|l| l.id == listener))
            .cloned();
        if let Some(have) = pool.as_ref().filter(|have| have.protocol != want_protocol) {
            tracing::info!(pool = %have.id, from = %have.protocol, to = %want_protocol, "replacing pool of another protocol");
            self.api
                .delete_child(
                    &lb.id,
                    "pool_delete",
                    &format!("/v2/lbaas/pools/{}", encode(&have.id)),
                )
                .await?;
            pool = None;
        }
        if let Some(have) = pool
            .as_mut()
            .filter(|have| have.lb_algorithm != c.lb_method)
        {
            self.api
                .mutate(
                    &lb.id,
                    "pool_update",
                    Method::PUT,
                    &format!("/v2/lbaas/pools/{}", encode(&have.id)),
                    Some(json!({"pool": {"lb_algorithm": c.lb_method}})),
                )
                .await?;
            have.lb_algorithm = c.lb_method.clone();
        }
        let (pool_id, monitor_id, fresh) = match pool {
            Some(have) => (have.id, have.healthmonitor_id, false),
            None => {
                let mut body =
                    self.pool_body(i, name, listener_protocol, c, spec.client_ip_affinity);
                body["listener_id"] = json!(listener);
                let made = self
                    .api
                    .mutate(
                        &lb.id,
                        "pool_create",
                        Method::POST,
                        "/v2/lbaas/pools",
                        Some(json!({"pool": body})),
                    )
                    .await?;
                let id = made["pool"]["id"]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        CloudError::Unavailable(
                            "openstack: pool_create: no id in the answer".into(),
                        )
                    })?;
                (id, None, true)
            }
        };
        let want: Vec<Value> = self.members(p, nodes, c, member_subnet);
        let key = |name: &str, address: &str, port: u16, monitor: Option<u16>| {
            format!("{name}-{address}-{port}-{}", monitor.unwrap_or(0))
        };
        let want_keys: BTreeSet<String> = nodes
            .iter()
            .map(|b| key(&b.node, &b.address, p.node_port, c.health_check_node_port))
            .collect();
        let have_keys: BTreeSet<String> = if fresh {
            BTreeSet::new()
        } else {
            self.api
                .members(&pool_id)
                .await?
                .iter()
                .map(|m| key(&m.name, &m.address, m.protocol_port, m.monitor_port))
                .collect()
        };
        if want_keys != have_keys {
            tracing::info!(pool = %pool_id, members = want.len(), "updating pool members");
            self.api
                .mutate(
                    &lb.id,
                    "member_batch_update",
                    Method::PUT,
                    &format!("/v2/lbaas/pools/{}/members", encode(&pool_id)),
                    Some(json!({"members": want})),
                )
                .await?;
        }
        self.sync_monitor(pass, (i, p), &pool_id, monitor_id.as_deref())
            .await
    }

    pub(super) async fn sync_monitor(
        &self,
        pass: Pass<'_>,
        (i, p): (usize, &LbPort),
        pool: &str,
        monitor: Option<&str>,
    ) -> Result<()> {
        let Pass { lb, c, f, name, .. } = pass;
        let want = self.monitor_body(i, name, p, c, f);
        let create = |mut body: Value| async move {
            body["pool_id"] = json!(pool);
            self.api
                .mutate(
                    &lb.id,
                    "healthmonitor_create",
                    Method::POST,
                    "/v2/lbaas/healthmonitors",
                    Some(json!({"healthmonitor": body})),
                )
                .await
                .map(|_| ())
        };
        let path = |id: &str| format!("/v2/lbaas/healthmonitors/{}", encode(id));
        match (monitor, want) {
            (None, None) => Ok(()),
            (None, Some(body)) => create(body).await,
            (Some(id), None) => {
                self.api
                    .delete_child(&lb.id, "healthmonitor_delete", &path(id))
                    .await
            }
            (Some(id), Some(body)) => {
                let Some(have) = self.api.health_monitor(id).await? else {
                    return create(body).await;
                };
                if body["type"] != json!(have.kind) {
                    self.api
                        .delete_child(&lb.id, "healthmonitor_delete", &path(id))
                        .await?;
                    return create(body).await;
                }
                let m = c
                    .monitor
                    .as_ref()
                    .expect("a monitor body comes from a monitor");
                if body["name"] != json!(have.name)
                    || (m.delay, m.timeout, m.max_retries, m.max_retries_down)
                        != (
                            have.delay,
                            have.timeout,
                            have.max_retries,
                            have.max_retries_down,
                        )
                {
                    let update = json!({"healthmonitor": {
                        "name": body["name"], "delay": m.delay, "timeout": m.timeout,
                        "max_retries": m.max_retries, "max_retries_down": m.max_retries_down,
                    }});
                    self.api
                        .mutate(
                            &lb.id,
                            "healthmonitor_update",
                            Method::PUT,
                            &path(id),
                            Some(update),
                        )
                        .await?;
                }
                Ok(())
            }
        }
    }

    /// Deletes a listener and its pool (the pool first: Octavia keeps a listener whose
    /// pool is in use).
    pub(super) async fn delete_listener(
        &self,
        lb: &str,
        listener: &str,
        pools: &[Pool],
    ) -> Result<()> {
        for pool in pools
            .iter()
            .filter(|p| p.listeners.iter().any(|l| l.id == listener))
        {
            self.api
                .delete_child(
                    lb,
                    "pool_delete",
                    &format!("/v2/lbaas/pools/{}", encode(&pool.id)),
                )
                .await?;
        }
        self.api
            .delete_child(
                lb,
                "listener_delete",
                &format!("/v2/lbaas/listeners/{}", encode(listener)),
            )
            .await
    }
}
