//! Nova servers as the ccm's instances, as openstack-cloud-controller-manager's
//! InstancesV2 describes them — providerID `openstack:///<server-id>` (or
//! `openstack://<region>/<server-id>` with `OS_CCM_REGIONAL=true`), the node matched by
//! server name until it has one, instance type the flavor's `original_name`, zone the
//! server's availability zone, `SHUTOFF` shut down, addresses from its ports and its
//! `addresses` ([`addresses`]). A sync reads what OCCM reads, the cluster's own nodes: a
//! server GET per node (a name search for one without a providerID) and the ports of
//! those servers in one call per 40 ([`of_nodes`]), never the project's every server —
//! a project shared with other clusters costs nothing more. The whole listing (one
//! paginated `/servers/detail` and port list) remains for what asks for everything.
//!
//! An answer that cannot be right is an error, never an empty cloud: a page that is not
//! the JSON asked for (an HTML error page from a proxy), and an empty server list after a
//! non-empty one (the ccm's own nodes are servers; a wrong project or a broken proxy looks
//! exactly like that). Either stops the sync; no node is deleted on it.

pub mod addresses;
mod model;
mod of_nodes;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use http::Method;
use overcast_cloud::instances::{Instance, InstanceKey, InstanceState, Instances, NodeRef};
use overcast_cloud::{is_label_value, CloudError, Result, Zone};
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::client::{json, Microversion, OpenStack, Service};
use crate::config::Networking;
use addresses::{node_addresses, AddressSource, ServerAddress};
use model::{in_nic_order, Flavor, Page, Port, Server};

/// The providerID scheme, OCCM's.
pub const PROVIDER: &str = "openstack";
/// Nova embeds the flavor (with `original_name`) in a server from this microversion.
const EMBEDDED_FLAVOR: Microversion = Microversion(2, 47);
/// Nova's and Neutron's default `max_limit`.
const PAGE: usize = 1000;
/// Devices a port listing names: 40 ids of 36 characters keep the URL near 2 KB, far
/// under the 8 KB request line Apache and eventlet front Neutron with.
const DEVICES_A_CALL: usize = 40;

pub struct NovaInstances {
    os: Arc<OpenStack>,
    networking: Networking,
    region: Option<String>,
    /// `OS_CCM_REGIONAL=true`: providerIDs carry the region.
    regional: bool,
    /// Flavor names by id, for servers listed below microversion 2.47.
    flavors: Mutex<HashMap<String, String>>,
    /// How many servers the last successful listing had (or, read node by node, how
    /// many of the nodes' servers were found).
    last_count: AtomicUsize,
}

impl NovaInstances {
    pub fn new(
        os: Arc<OpenStack>,
        networking: Networking,
        region: Option<String>,
        regional: bool,
    ) -> Self {
        Self {
            os,
            networking,
            region,
            regional,
            flavors: Mutex::new(HashMap::new()),
            last_count: AtomicUsize::new(0),
        }
    }

    pub fn provider_id(&self, server: &str) -> String {
        match (&self.region, self.regional) {
            (Some(region), true) => format!("{PROVIDER}://{region}/{server}"),
            _ => format!("{PROVIDER}:///{server}"),
        }
    }

    /// Every item under `key` of a listing, following the `<key>_links` next link with
    /// the last item's id as marker.
    async fn list<T: serde::de::DeserializeOwned>(
        &self,
        service: Service,
        name: &'static str,
        path: &str,
        key: &str,
        id: impl Fn(&T) -> &str,
        microversion: Option<Microversion>,
    ) -> Result<Vec<T>> {
        let mut out: Vec<T> = Vec::new();
        let mut marker: Option<String> = None;
        let sep = if path.contains('?') { '&' } else { '?' };
        loop {
            let mut url = format!("{path}{sep}limit={PAGE}");
            if let Some(m) = &marker {
                url.push_str(&format!("&marker={}", crate::volumes::encode(m)));
            }
            let resp = self
                .os
                .call(service, name, Method::GET, &url, None, microversion)
                .await?;
            if resp.status.as_u16() != 200 {
                return Err(overcast_cloud_http::status_error("openstack", name, &resp));
            }
            // Straight from the bytes: a `serde_json::Value` on the way would sort the
            // keys of every object, and a server's `addresses` keeps its NICs' order.
            let Page { items, links } = json::<Page<T>>(name, &resp)?;
            let page = items.ok_or_else(|| {
                CloudError::Unavailable(format!("openstack: {name}: the answer has no {key:?}"))
            })?;
            let next = links.iter().any(|l| l.rel == "next");
            let last = page.last().map(|t| id(t).to_owned());
            out.extend(page);
            match (next, last) {
                (true, Some(last)) if marker.as_deref() != Some(last.as_str()) => {
                    marker = Some(last)
                }
                _ => return Ok(out),
            }
        }
    }

    /// The microversion servers are read at: 2.47 (the flavor embedded) where Nova has it.
    async fn server_version(&self) -> Result<Microversion> {
        Ok(match self.os.max_microversion(Service::Compute).await? {
            Some(v) if v >= EMBEDDED_FLAVOR => EMBEDDED_FLAVOR,
            _ => Microversion(2, 1),
        })
    }

    /// Ports (the fields the addresses need): the project's, or those of `devices` alone
    /// (Neutron takes a repeated `device_id` as "any of", [`DEVICES_A_CALL`] a call).
    async fn ports(&self, devices: Option<&[&str]>) -> Result<Vec<Port>> {
        let fields = [
            "id",
            "device_id",
            "device_owner",
            "status",
            "fixed_ips",
            "created_at",
            "mac_address",
        ]
        .map(|f| format!("fields={f}"))
        .join("&");
        let queries: Vec<String> = match devices {
            None => vec![fields],
            Some(devices) => devices
                .chunks(DEVICES_A_CALL)
                .map(|chunk| {
                    let ids: Vec<String> = chunk
                        .iter()
                        .map(|d| format!("device_id={}", crate::volumes::encode(d)))
                        .collect();
                    format!("{fields}&{}", ids.join("&"))
                })
                .collect(),
        };
        let mut out = Vec::new();
        for query in queries {
            out.extend(
                self.list(
                    Service::Network,
                    "port_list",
                    &format!("/v2.0/ports?{query}"),
                    "ports",
                    |p: &Port| &p.id,
                    None,
                )
                .await?,
            );
        }
        Ok(out)
    }

    /// `servers` as instances, their addresses from `ports`.
    async fn to_instances(&self, servers: &[Server], ports: &[Port]) -> Result<Vec<Instance>> {
        let mut by_server: HashMap<&str, Vec<&Port>> = HashMap::new();
        for p in ports {
            if p.device_owner.starts_with("compute:") && !p.device_id.is_empty() {
                by_server.entry(p.device_id.as_str()).or_default().push(p);
            }
        }
        let mut out = Vec::with_capacity(servers.len());
        for s in servers {
            if s.status == "DELETED" {
                continue;
            }
            let mut ports = by_server.remove(s.id.as_str()).unwrap_or_default();
            in_nic_order(&mut ports, &s.addresses);
            let port_ips = ports
                .iter()
                .filter(|p| p.status == "ACTIVE")
                .flat_map(|p| p.fixed_ips.iter().map(|ip| ip.ip_address.as_str()))
                .collect();
            let by_name: BTreeMap<String, Vec<ServerAddress>> =
                s.addresses.0.iter().cloned().collect();
            let src = AddressSource {
                port_ips,
                access_ipv4: s.access_ipv4.as_deref(),
                access_ipv6: s.access_ipv6.as_deref(),
                hostname: s.metadata.get("hostname").map(String::as_str),
                addresses: Some(&by_name),
            };
            let zone = s
                .availability_zone
                .as_deref()
                .map(sanitize_label)
                .filter(|z| !z.is_empty())
                .map(|zone| Zone {
                    zone,
                    region: self.region.clone().unwrap_or_default(),
                });
            out.push(Instance {
                node_name: s.name.clone(),
                provider_id: self.provider_id(&s.id),
                instance_type: self.instance_type(&s.flavor).await?,
                addresses: node_addresses(&src, &self.networking),
                zone,
                state: if s.status == "SHUTOFF" {
                    InstanceState::Shutdown
                } else {
                    InstanceState::Running
                },
            });
        }
        Ok(out)
    }

    async fn instance_type(&self, flavor: &Flavor) -> Result<String> {
        if let Some(name) = flavor
            .original_name
            .as_deref()
            .filter(|n| is_label_value(n))
        {
            return Ok(name.to_owned());
        }
        // Embedded flavors (2.47+) carry no id: a name that is no label value leaves the
        // node without an instance type (OCCM fails the node's metadata instead).
        let Some(id) = flavor.id.as_deref() else {
            return Ok(String::new());
        };
        if let Some(name) = self.flavors.lock().await.get(id) {
            return Ok(name.clone());
        }
        let resp = self
            .os
            .call(
                Service::Compute,
                "flavor_get",
                Method::GET,
                &format!("/flavors/{}", crate::volumes::encode(id)),
                None,
                Some(Microversion(2, 1)),
            )
            .await?;
        let name = match resp.status.as_u16() {
            200 => {
                #[derive(Deserialize)]
                struct One {
                    flavor: Named,
                }
                #[derive(Deserialize)]
                struct Named {
                    name: String,
                }
                let name = json::<One>("flavor_get", &resp)?.flavor.name;
                // OCCM: the name when it is a valid label value, else the id.
                if is_label_value(&name) {
                    name
                } else if is_label_value(id) {
                    id.to_owned()
                } else {
                    String::new()
                }
            }
            // A flavor deleted since the server was made: its id is all there is (when it
            // can be a label value).
            404 if is_label_value(id) => id.to_owned(),
            404 => String::new(),
            _ => {
                return Err(overcast_cloud_http::status_error(
                    "openstack",
                    "flavor_get",
                    &resp,
                ))
            }
        };
        self.flavors
            .lock()
            .await
            .insert(id.to_owned(), name.clone());
        Ok(name)
    }
}

#[async_trait]
impl Instances for NovaInstances {
    fn provider_name(&self) -> &'static str {
        PROVIDER
    }

    /// OCCM's reading (`instanceIDFromProviderID`, `^openstack://([^/]*)/([^/]+)$`):
    /// `openstack:///<id>`, `openstack://<region>/<id>` (what OCCM writes with
    /// `OS_CCM_REGIONAL=true`), and `/<id>`, which it reads as the first (kubernetes#85731).
    /// A region other than this ccm's is an error, as OCCM's "didn't match supported
    /// region": another region's server is not this cloud's to call gone.
    fn instance_keys(&self, provider_id: &str) -> Result<Vec<InstanceKey>> {
        let full;
        let pid = if provider_id.is_empty() || provider_id.contains("://") {
            provider_id
        } else {
            full = format!("{PROVIDER}://{provider_id}");
            &full
        };
        let (region, id) = pid
            .strip_prefix(PROVIDER)
            .and_then(|r| r.strip_prefix("://"))
            .and_then(|r| r.split_once('/'))
            .filter(|(_, id)| !id.is_empty() && !id.contains('/'))
            .ok_or_else(|| {
                CloudError::InvalidArgument(format!(
                    "providerID {provider_id:?} is not of the form {PROVIDER}://[<region>]/<server id>"
                ))
            })?;
        if !region.is_empty() && Some(region) != self.region.as_deref() {
            return Err(CloudError::FailedPrecondition(format!(
                "providerID {provider_id:?} names region {region:?}; this cloud is region {:?}",
                self.region.as_deref().unwrap_or_default()
            )));
        }
        Ok(vec![InstanceKey(id.to_owned())])
    }

    fn upstream_forms(&self, instance: &Instance) -> Vec<String> {
        let Ok(keys) = self.instance_keys(&instance.provider_id) else {
            return vec![instance.provider_id.clone()];
        };
        let id = &keys[0].0;
        let mut forms = vec![
            instance.provider_id.clone(),
            format!("{PROVIDER}:///{id}"),
            format!("/{id}"),
        ];
        if let Some(region) = &self.region {
            forms.push(format!("{PROVIDER}://{region}/{id}"));
        }
        forms.dedup();
        forms
    }

    async fn list_instances(&self) -> Result<Vec<Instance>> {
        let version = self.server_version().await?;
        let servers: Vec<Server> = self
            .list(
                Service::Compute,
                "server_list",
                "/servers/detail",
                "servers",
                |s: &Server| &s.id,
                Some(version),
            )
            .await?;
        let before = self.last_count.load(Ordering::Relaxed);
        if servers.is_empty() && before > 0 {
            return Err(CloudError::Unavailable(format!(
                "openstack: Nova listed no server where the last listing had {before}: taken as a wrong answer, not as every server gone"
            )));
        }
        let ports = self.ports(None).await?;
        let out = self.to_instances(&servers, &ports).await?;
        self.last_count.store(servers.len(), Ordering::Relaxed);
        Ok(out)
    }

    /// A server GET per node with a providerID, a name search per node without one, and
    /// their ports by device: what the cluster's nodes are, whatever else the project
    /// holds ([`of_nodes`]).
    async fn instances_of(&self, nodes: &[NodeRef<'_>]) -> Result<Vec<Instance>> {
        let servers = self.servers_of(nodes).await?;
        let ids: Vec<&str> = servers.iter().map(|s| s.id.as_str()).collect();
        let ports = self.ports(Some(&ids)).await?;
        let out = self.to_instances(&servers, &ports).await?;
        if !servers.is_empty() {
            self.last_count.store(servers.len(), Ordering::Relaxed);
        }
        Ok(out)
    }
}

/// OCCM's `util.SanitizeLabel`, for the zone: runs of other characters become `-`, the
/// ends are trimmed of `-_.`, and it is cut at 63.
fn sanitize_label(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    let mut in_run = false;
    for c in input.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let trimmed = out.trim_matches(|c| matches!(c, '-' | '_' | '.'));
    trimmed.chars().take(63).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_sanitized_as_occm_does() {
        assert_eq!(sanitize_label("nova"), "nova");
        assert_eq!(sanitize_label("zone a/b"), "zone-a-b");
        assert_eq!(sanitize_label("..zone_1.."), "zone_1");
        assert_eq!(sanitize_label(&"z".repeat(70)).len(), 63);
    }
}
