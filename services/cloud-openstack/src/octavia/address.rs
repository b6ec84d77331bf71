//! The address a Service is reached at: the floating IP on the load balancer's VIP port
//! (OCCM's `ensureFloatingIP`), and the status the ccm writes.

use std::collections::BTreeMap;

use overcast_cloud::{CloudError, LoadBalancerSpec, LoadBalancerStatus, Result};
use serde_json::json;

use super::api::LoadBalancer;
use super::conf::{
    ServiceConf, FIP_DESCRIPTION, LOAD_BALANCER_ADDRESS, LOAD_BALANCER_ID, LOAD_BALANCER_ID_WRITTEN,
};
use super::{neutron, OctaviaLoadBalancers};

impl OctaviaLoadBalancers {
    /// The address the Service is reached at (OCCM's `ensureFloatingIP`).
    pub(super) async fn ensure_floating_ip(
        &self,
        lb: &LoadBalancer,
        spec: &LoadBalancerSpec,
        c: &ServiceConf,
        owner: bool,
    ) -> Result<String> {
        let port = lb.vip_port_id.as_str();
        let found = if port.is_empty() {
            None
        } else {
            neutron::floating_ip_of_port(self.os(), port).await?
        };
        if c.internal && owner {
            if let Some(fip) = found {
                let ours = fip.description.contains(FIP_DESCRIPTION);
                if ours && !c.keep_floating_ip {
                    tracing::info!(service = %spec.service, address = %fip.floating_ip_address, "deleting the floating IP of a now internal load balancer");
                    neutron::delete_floating_ip(self.os(), &fip.id).await?;
                } else {
                    neutron::move_floating_ip(self.os(), &fip.id, None).await?;
                }
            }
            return Ok(lb.vip_address.clone());
        }
        if let Some(fip) = found {
            return Ok(fip.floating_ip_address);
        }
        if !owner {
            return Err(CloudError::FailedPrecondition(format!(
                "{}: cannot attach a floating IP to a load balancer shared with other Services; only its owner Service can",
                spec.service
            )));
        }
        // spec.loadBalancerIP (OCCM's), else the address the Service already has: a load
        // balancer made again keeps its floating IP.
        let explicit = spec.load_balancer_ip.is_some();
        if let Some(ip) = spec
            .load_balancer_ip
            .as_ref()
            .or(spec.requested_ip.as_ref())
        {
            if let Some(fip) = neutron::floating_ip_by_address(self.os(), ip).await? {
                match fip.port_id.as_deref().filter(|p| !p.is_empty()) {
                    None => {
                        return Ok(neutron::move_floating_ip(self.os(), &fip.id, Some(port))
                            .await?
                            .floating_ip_address)
                    }
                    Some(_) if explicit => {
                        return Err(CloudError::FailedPrecondition(format!(
                            "{}: floating IP {ip} is not available",
                            spec.service
                        )))
                    }
                    // The Service's old address, still on another port: a new one.
                    Some(_) => {}
                }
            }
        }
        let network = match &c.floating_network_id {
            Some(n) => Some(n.clone()),
            None => neutron::external_network(self.os()).await?,
        };
        let Some(network) = network else {
            tracing::warn!(service = %spec.service, "no floating network configured or found: the load balancer is internal");
            return Ok(lb.vip_address.clone());
        };
        let mut body = json!({
            "floating_network_id": network,
            "port_id": port,
            "description": format!("{FIP_DESCRIPTION} {} from cluster {}", spec.service, self.cluster),
        });
        if let Some(s) = &c.floating_subnet_id {
            body["subnet_id"] = json!(s);
        }
        if let Some(ip) = &spec.load_balancer_ip {
            body["floating_ip_address"] = json!(ip);
        }
        tracing::info!(service = %spec.service, load_balancer = %lb.id, "creating floating IP");
        Ok(neutron::create_floating_ip(self.os(), body)
            .await?
            .floating_ip_address)
    }

    pub(super) fn status(
        &self,
        c: &ServiceConf,
        lb: &LoadBalancer,
        address: &str,
    ) -> LoadBalancerStatus {
        let mut status = LoadBalancerStatus {
            annotations: BTreeMap::from([
                (LOAD_BALANCER_ID.to_owned(), lb.id.clone()),
                (LOAD_BALANCER_ID_WRITTEN.to_owned(), lb.id.clone()),
                (LOAD_BALANCER_ADDRESS.to_owned(), address.to_owned()),
            ]),
            ..LoadBalancerStatus::default()
        };
        if let Some(h) = &c.hostname {
            status.ingress_hostnames.push(h.clone());
        } else if c.proxy_protocol.is_some() && self.opts.enable_ingress_hostname {
            status
                .ingress_hostnames
                .push(format!("{address}.{}", self.opts.ingress_hostname_suffix));
        } else {
            status.ingress_ips.push(address.to_owned());
            status.proxy_ip_mode = c.proxy_protocol.is_some();
        }
        status
    }
}
