//! Octavia's v2 API as the balancers use it: its objects as it answers them, and the
//! calls, each mutation followed by the wait for the load balancer to be `ACTIVE` again
//! (Octavia refuses any change while it is `PENDING_*`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use overcast_cloud::{CloudError, Result};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::client::{json, json_at, OpenStack, Service};
use crate::volumes::encode;

#[derive(Debug, Clone, Deserialize)]
pub struct LoadBalancer {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub provisioning_status: String,
    #[serde(default)]
    pub vip_address: String,
    #[serde(default)]
    pub vip_port_id: String,
    #[serde(default)]
    pub vip_subnet_id: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Listener {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub protocol: String,
    pub protocol_port: u16,
    #[serde(default)]
    pub connection_limit: i64,
    #[serde(default)]
    pub insert_headers: BTreeMap<String, String>,
    #[serde(default)]
    pub timeout_client_data: Option<i64>,
    #[serde(default)]
    pub timeout_member_connect: Option<i64>,
    #[serde(default)]
    pub timeout_member_data: Option<i64>,
    #[serde(default)]
    pub timeout_tcp_inspect: Option<i64>,
    #[serde(default)]
    pub allowed_cidrs: Option<Vec<String>>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub default_pool_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Pool {
    pub id: String,
    pub protocol: String,
    #[serde(default)]
    pub lb_algorithm: String,
    #[serde(default)]
    pub listeners: Vec<IdOnly>,
    #[serde(default)]
    pub healthmonitor_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct IdOnly {
    pub id: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    #[serde(default)]
    pub name: String,
    pub address: String,
    pub protocol_port: u16,
    #[serde(default)]
    pub monitor_port: Option<u16>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HealthMonitor {
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub delay: u32,
    pub timeout: u32,
    pub max_retries: u32,
    #[serde(default)]
    pub max_retries_down: u32,
}

/// How long and how often the wait for `ACTIVE` polls: OCCM waits up to about five
/// minutes, polling from 1 s up; the first look comes sooner here (a no-op or quick
/// provider is done in well under a second).
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    pub first: Duration,
    pub longest: Duration,
    pub deadline: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            first: Duration::from_millis(250),
            longest: Duration::from_secs(5),
            deadline: Duration::from_secs(300),
        }
    }
}

pub struct Octavia {
    pub os: Arc<OpenStack>,
    pub waits: Waits,
}

impl Octavia {
    async fn send(
        &self,
        name: &'static str,
        method: Method,
        path: &str,
        body: Option<&Value>,
        ok: &[u16],
    ) -> Result<overcast_cloud_http::Response> {
        self.os
            .expect(Service::LoadBalancer, name, method, path, body, ok)
            .await
    }

    async fn get_list<T: serde::de::DeserializeOwned>(
        &self,
        name: &'static str,
        path: &str,
        key: &str,
    ) -> Result<Vec<T>> {
        let resp = self.send(name, Method::GET, path, None, &[200]).await?;
        json_at(name, &resp, key)
    }

    /// One object, `None` when Octavia answers 404.
    async fn get_one<T: serde::de::DeserializeOwned>(
        &self,
        name: &'static str,
        path: &str,
        key: &str,
    ) -> Result<Option<T>> {
        let resp = self
            .send(name, Method::GET, path, None, &[200, 404])
            .await?;
        if resp.status.as_u16() == 404 {
            return Ok(None);
        }
        json_at(name, &resp, key).map(Some)
    }

    /// The API version the service speaks (`v2.26` → (2, 26)): the newest of its version
    /// document, as OCCM reads it to know which fields it may send.
    pub async fn version(&self) -> Result<(u32, u32)> {
        let resp = self
            .send("version_list", Method::GET, "/", None, &[200, 300])
            .await?;
        #[derive(Deserialize)]
        struct Versions {
            versions: Vec<Version>,
        }
        #[derive(Deserialize)]
        struct Version {
            id: String,
        }
        let versions: Versions = json("version_list", &resp)?;
        versions
            .versions
            .iter()
            .filter_map(|v| {
                let (a, b) = v.id.trim_start_matches('v').split_once('.')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .max()
            .ok_or_else(|| {
                CloudError::Unavailable("openstack: Octavia lists no API version".into())
            })
    }

    pub async fn load_balancer(&self, id: &str) -> Result<Option<LoadBalancer>> {
        self.get_one(
            "loadbalancer_get",
            &format!("/v2/lbaas/loadbalancers/{}", encode(id)),
            "loadbalancer",
        )
        .await
    }

    pub async fn load_balancers_named(&self, name: &str) -> Result<Vec<LoadBalancer>> {
        self.get_list(
            "loadbalancer_list",
            &format!("/v2/lbaas/loadbalancers?name={}", encode(name)),
            "loadbalancers",
        )
        .await
    }

    pub async fn listeners(&self, lb: &str) -> Result<Vec<Listener>> {
        self.get_list(
            "listener_list",
            &format!("/v2/lbaas/listeners?loadbalancer_id={}", encode(lb)),
            "listeners",
        )
        .await
    }

    pub async fn pools(&self, lb: &str) -> Result<Vec<Pool>> {
        self.get_list(
            "pool_list",
            &format!("/v2/lbaas/pools?loadbalancer_id={}", encode(lb)),
            "pools",
        )
        .await
    }

    pub async fn members(&self, pool: &str) -> Result<Vec<Member>> {
        self.get_list(
            "member_list",
            &format!("/v2/lbaas/pools/{}/members", encode(pool)),
            "members",
        )
        .await
    }

    pub async fn health_monitor(&self, id: &str) -> Result<Option<HealthMonitor>> {
        self.get_one(
            "healthmonitor_get",
            &format!("/v2/lbaas/healthmonitors/{}", encode(id)),
            "healthmonitor",
        )
        .await
    }

    /// Creates a load balancer (fully populated: its listeners, pools, members and
    /// monitors in this one call) and waits for it to be `ACTIVE`.
    pub async fn create_load_balancer(&self, body: Value) -> Result<LoadBalancer> {
        let resp = self
            .send(
                "loadbalancer_create",
                Method::POST,
                "/v2/lbaas/loadbalancers",
                Some(&json!({ "loadbalancer": body })),
                &[201],
            )
            .await?;
        let made: LoadBalancer = json_at("loadbalancer_create", &resp, "loadbalancer")?;
        self.wait_active(&made.id).await
    }

    /// One change to a load balancer's tree, then the wait for it to settle; the answer
    /// (the object made or changed) when there is one.
    pub async fn mutate(
        &self,
        lb: &str,
        name: &'static str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let resp = self
            .send(name, method, path, body.as_ref(), &[200, 201, 202, 204])
            .await?;
        let answer = if resp.body.is_empty() {
            Value::Null
        } else {
            json(name, &resp)?
        };
        self.wait_active(lb).await?;
        Ok(answer)
    }

    /// Deletes a child (a listener, a pool, a monitor): one already gone is deleted.
    pub async fn delete_child(&self, lb: &str, name: &'static str, path: &str) -> Result<()> {
        let resp = self
            .send(name, Method::DELETE, path, None, &[204, 404])
            .await?;
        if resp.status.as_u16() == 204 {
            self.wait_active(lb).await?;
        }
        Ok(())
    }

    /// Polls until the load balancer is `ACTIVE`. `ERROR` is an error at once; still
    /// `PENDING_*` at the deadline is `DeadlineExceeded` (retried later, nothing undone).
    pub async fn wait_active(&self, id: &str) -> Result<LoadBalancer> {
        let started = tokio::time::Instant::now();
        let mut delay = self.waits.first;
        loop {
            tokio::time::sleep(delay).await;
            let lb = self.load_balancer(id).await?.ok_or_else(|| {
                CloudError::Unavailable(format!(
                    "openstack: load balancer {id} disappeared while it was being changed"
                ))
            })?;
            match lb.provisioning_status.as_str() {
                "ACTIVE" => return Ok(lb),
                "ERROR" => {
                    return Err(CloudError::Unavailable(format!(
                        "openstack: load balancer {id} went into ERROR; see Octavia's logs"
                    )))
                }
                _ if started.elapsed() >= self.waits.deadline => {
                    return Err(CloudError::DeadlineExceeded(format!(
                        "openstack: load balancer {id} is still {} after {:?}",
                        lb.provisioning_status, self.waits.deadline
                    )))
                }
                _ => delay = (delay.mul_f32(1.5)).min(self.waits.longest),
            }
        }
    }

    /// Deletes a load balancer (with everything on it when `cascade`) and waits until it
    /// is gone.
    pub async fn delete_load_balancer(&self, id: &str, cascade: bool) -> Result<()> {
        let path = format!(
            "/v2/lbaas/loadbalancers/{}{}",
            encode(id),
            if cascade { "?cascade=true" } else { "" }
        );
        let resp = self
            .send(
                "loadbalancer_delete",
                Method::DELETE,
                &path,
                None,
                &[204, 404, 409],
            )
            .await?;
        if resp.status.as_u16() == 409 {
            // Still PENDING_* from someone else's change: later.
            return Err(CloudError::Unavailable(format!(
                "openstack: load balancer {id} is busy; its deletion is retried"
            )));
        }
        let started = tokio::time::Instant::now();
        let mut delay = self.waits.first;
        loop {
            tokio::time::sleep(delay).await;
            match self.load_balancer(id).await? {
                None => return Ok(()),
                Some(lb) if lb.provisioning_status == "DELETED" => return Ok(()),
                // The deletion failed in Octavia's worker: the next pass deletes again.
                Some(lb) if lb.provisioning_status == "ERROR" => {
                    return Err(CloudError::Unavailable(format!(
                        "openstack: deleting load balancer {id} failed in Octavia (ERROR); it is deleted again"
                    )))
                }
                Some(lb) if started.elapsed() >= self.waits.deadline => {
                    return Err(CloudError::DeadlineExceeded(format!(
                        "openstack: load balancer {id} is still {} after {:?}",
                        lb.provisioning_status, self.waits.deadline
                    )))
                }
                Some(_) => delay = (delay.mul_f32(1.5)).min(self.waits.longest),
            }
        }
    }
}
