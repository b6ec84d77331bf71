//! Load balancers on DVP, as upstream makes them: a Service of type LoadBalancer in the
//! parent namespace, named as the child's balancer (`a` + its uid, 32 characters), whose
//! ports send each port to the child Service's NodePort, and whose selector
//! `dvp.deckhouse.io/<name>: loadbalancer` picks the VMs labelled so — the backends the
//! ccm chose (for `externalTrafficPolicy: Local`, only the VMs with a ready endpoint).
//! The parent's own load balancer gives the address, which comes back as the child's
//! ingress.
//!
//! Beyond upstream: the VMs' labels are set and taken off in one list of the VMs (not a
//! GET per node), an address that does not come is a retryable error naming the parent
//! Service (not a five-minute poll), and the wait is a watch.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use overcast_cloud::{
    CloudError, LoadBalancerRef, LoadBalancerSpec, LoadBalancerStatus, LoadBalancers, Result,
};
use serde_json::json;

use crate::api;
use crate::parent::Parent;

/// Upstream's prefix of the VM label a parent Service selects by.
pub const LABEL_PREFIX: &str = "dvp.deckhouse.io/";
const SELECTED: &str = "loadbalancer";
/// Labels upstream puts on the parent Service, naming the child Service.
pub const TENANT_SERVICE_NAME: &str = "cluster.x-k8s.io/tenant-service-name";
pub const TENANT_SERVICE_NAMESPACE: &str = "cluster.x-k8s.io/tenant-service-namespace";
/// Ours: the parent Service was made by this provider (never touch another's).
pub const MANAGED_LABEL: &str = "overcast.dev/load-balancer";

/// `dvp.deckhouse.io/<name, lower case, without dashes>`, cut so the key's name part fits
/// a label key (upstream's rule, so a balancer made by upstream keeps its VMs).
pub fn vm_label_key(balancer: &str) -> String {
    let name: String = balancer.to_lowercase().replace('-', "");
    let max = 63 - LABEL_PREFIX.len();
    format!("{LABEL_PREFIX}{}", &name[..name.len().min(max)])
}

pub struct DvpLoadBalancers {
    parent: Parent,
    /// How long an ensure waits for the parent to give the Service an address.
    address_wait: Duration,
}

impl DvpLoadBalancers {
    pub fn new(parent: Parent, address_wait: Duration) -> Self {
        Self {
            parent,
            address_wait,
        }
    }

    fn services(&self) -> Api<Service> {
        Api::namespaced(self.parent.client.clone(), &self.parent.namespace)
    }

    /// Labels exactly the VMs of `nodes` with `key` (and takes it off every other VM),
    /// from one list of the VMs.
    async fn select_vms(&self, key: &str, nodes: &BTreeSet<&str>) -> Result<()> {
        let vms = self
            .parent
            .list_all("virtualmachine_list", &self.parent.vms(), None)
            .await?;
        for vm in &vms {
            let has = vm.labels().get(key).map(String::as_str) == Some(SELECTED);
            let wanted = nodes.contains(api::vm_hostname(vm));
            if has == wanted {
                continue;
            }
            let value = if wanted { json!(SELECTED) } else { json!(null) };
            let patch = json!({"metadata": {"labels": {key: value}}});
            let name = vm.name_any();
            match self
                .parent
                .call(
                    "virtualmachine_patch",
                    &format!("label VirtualMachine {name}"),
                    self.parent
                        .vms()
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await
            {
                // A VM deleted meanwhile has nothing left to select.
                Ok(_) | Err(CloudError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn desired(&self, spec: &LoadBalancerSpec, key: &str) -> Service {
        let (namespace, name) = (&spec.service.namespace, &spec.service.name);
        let ports: Vec<serde_json::Value> = spec
            .ports
            .iter()
            .map(|p| {
                json!({
                    "name": p.name, "port": p.port, "targetPort": p.node_port,
                    "protocol": p.protocol.as_str(),
                })
            })
            .collect();
        let mut svc = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": spec.name,
                "labels": {
                    TENANT_SERVICE_NAME: label_value(name),
                    TENANT_SERVICE_NAMESPACE: label_value(namespace),
                    MANAGED_LABEL: "true",
                },
                "annotations": spec.annotations,
            },
            "spec": {
                "type": "LoadBalancer",
                "ports": ports,
                "selector": {key: SELECTED},
                // The child's Local policy is kept by which VMs are selected; the
                // parent's own kube-proxy should not drop what reaches a VM's node.
                "externalTrafficPolicy": if spec.local_traffic { "Local" } else { "Cluster" },
            },
        });
        if let Some(class) = &spec.class {
            svc["spec"]["loadBalancerClass"] = json!(class);
        }
        if let Some(ip) = &spec.requested_ip {
            svc["spec"]["loadBalancerIP"] = json!(ip);
        }
        serde_json::from_value(svc).unwrap_or_default()
    }
}

/// A label value from any text: at most 63 characters of `[A-Za-z0-9._-]`, starting and
/// ending alphanumeric (Service names and namespaces already are).
fn label_value(s: &str) -> String {
    let cut: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(63)
        .collect();
    cut.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// A port as we set it: name, port, target port, protocol.
type PortKey = (Option<String>, i32, Option<IntOrString>, Option<String>);

/// What of a Service's ports we set (the API server fills in the rest, a nodePort).
fn port_keys(spec: &ServiceSpec) -> Vec<PortKey> {
    spec.ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone(),
                p.port,
                p.target_port.clone(),
                p.protocol.clone(),
            )
        })
        .collect()
}

fn status_of(svc: &Service) -> LoadBalancerStatus {
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.clone())
        .unwrap_or_default();
    LoadBalancerStatus {
        ingress_ips: ingress.iter().filter_map(|i| i.ip.clone()).collect(),
        ingress_hostnames: ingress.iter().filter_map(|i| i.hostname.clone()).collect(),
        ..LoadBalancerStatus::default()
    }
}

fn has_address(svc: &Service) -> bool {
    let s = status_of(svc);
    !(s.ingress_ips.is_empty() && s.ingress_hostnames.is_empty())
}

fn is_ours(svc: &Service) -> bool {
    svc.labels().get(MANAGED_LABEL).map(String::as_str) == Some("true")
        || svc.labels().contains_key(TENANT_SERVICE_NAME)
}

#[async_trait]
impl LoadBalancers for DvpLoadBalancers {
    async fn get_load_balancer(&self, lb: &LoadBalancerRef) -> Result<Option<LoadBalancerStatus>> {
        let name = lb.name.as_str();
        if !crate::disks::is_name(name) {
            return Ok(None);
        }
        Ok(self
            .parent
            .get_opt("service_get", &self.services(), name)
            .await?
            .filter(is_ours)
            .map(|s| status_of(&s)))
    }

    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancerStatus> {
        if !crate::disks::is_name(&spec.name) {
            return Err(CloudError::InvalidArgument(format!(
                "balancer name {:?} cannot name a Service",
                spec.name
            )));
        }
        let key = vm_label_key(&spec.name);
        let nodes: BTreeSet<&str> = spec.backends.iter().map(|b| b.node.as_str()).collect();
        self.select_vms(&key, &nodes).await?;
        let want = self.desired(spec, &key);
        let existing = self
            .parent
            .get_opt("service_get", &self.services(), &spec.name)
            .await?;
        let svc = match existing {
            Some(have) if !is_ours(&have) => {
                return Err(CloudError::FailedPrecondition(format!(
                    "the parent namespace already has a Service {} that this provider did not make",
                    spec.name
                )))
            }
            Some(have) => {
                let w = want.spec.clone().unwrap_or_default();
                let patch = json!({
                    "metadata": {"labels": want.metadata.labels, "annotations": want.metadata.annotations},
                    "spec": {"ports": w.ports, "selector": w.selector, "externalTrafficPolicy": w.external_traffic_policy},
                });
                let unchanged = {
                    let h = have.spec.clone().unwrap_or_default();
                    let same_ports = port_keys(&h) == port_keys(&w);
                    same_ports
                        && h.selector == w.selector
                        && h.external_traffic_policy == w.external_traffic_policy
                        && have.metadata.annotations.clone().unwrap_or_default()
                            == want.metadata.annotations.clone().unwrap_or_default()
                };
                if unchanged {
                    have
                } else {
                    self.parent
                        .call(
                            "service_patch",
                            &format!("update the parent Service {}", spec.name),
                            self.services().patch(
                                &spec.name,
                                &PatchParams::default(),
                                &Patch::Strategic(&patch),
                            ),
                        )
                        .await?
                }
            }
            None => match self
                .parent
                .call(
                    "service_create",
                    &format!("create the parent Service {}", spec.name),
                    self.services().create(&PostParams::default(), &want),
                )
                .await
            {
                Ok(made) => made,
                Err(CloudError::Conflict(_)) => self
                    .parent
                    .get_opt("service_get", &self.services(), &spec.name)
                    .await?
                    .ok_or_else(|| {
                        CloudError::Conflict(format!("{} was deleted as it was made", spec.name))
                    })?,
                Err(e) => return Err(e),
            },
        };
        if has_address(&svc) {
            return Ok(status_of(&svc));
        }
        let waited = self
            .parent
            .wait(
                "service",
                self.services(),
                &spec.name,
                self.address_wait,
                |s: Option<&Service>| s.is_none_or(has_address),
            )
            .await?;
        match waited {
            Some(Some(s)) => Ok(status_of(&s)),
            Some(None) => Err(CloudError::Unavailable(format!(
                "the parent Service {} was deleted while waiting for its address",
                spec.name
            ))),
            None => Err(CloudError::DeadlineExceeded(format!(
                "the parent Service {}/{} has no address after {:?}: its load balancer has not given one yet",
                self.parent.namespace, spec.name, self.address_wait
            ))),
        }
    }

    async fn delete_load_balancer(&self, lb: &LoadBalancerRef) -> Result<()> {
        let name = lb.name.as_str();
        if !crate::disks::is_name(name) {
            return Ok(());
        }
        // The VMs first: a Service gone with its VMs still labelled would leave labels
        // nobody takes off.
        self.select_vms(&vm_label_key(name), &BTreeSet::new())
            .await?;
        let Some(svc) = self
            .parent
            .get_opt("service_get", &self.services(), name)
            .await?
        else {
            return Ok(());
        };
        if !is_ours(&svc) {
            return Ok(());
        }
        self.parent
            .delete(
                "service_delete",
                &self.services(),
                name,
                &DeleteParams::default(),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_label_key_is_upstreams() {
        assert_eq!(
            vm_label_key("a1b2c3d4e5f60718293a4b5c6d7e8f90"),
            "dvp.deckhouse.io/a1b2c3d4e5f60718293a4b5c6d7e8f90"
        );
        let long = "A-".repeat(60);
        let key = vm_label_key(&long);
        assert_eq!(key.len(), 63);
        assert!(key.starts_with("dvp.deckhouse.io/aaaa"));
        assert_eq!(label_value("-web.frontend_"), "web.frontend");
    }
}
