//! The CPI's instances: every VM of the configured datacenters as a node, from one
//! PropertyCollector call per vCenter per sync (and, with `[Labels]`, one tag call):
//! providerID `vsphere://<bios-uuid>`, the instance type
//! `vsphere-vm.cpu-<n>.mem-<GiB>gb.os-<guest>`, addresses chosen as upstream, zone and
//! region from the tags in the configured categories on the VM's host, cluster or
//! datacenter (the nearest wins), `poweredOff`/`suspended` = shut down.
//!
//! A VM is gone only when no answer lists it. An answer that cannot say who a VM is —
//! one that is orphaned, inaccessible or unreadable and has no BIOS UUID to show — makes
//! the whole listing an error, so no node is ever judged gone on it
//! (cloud-provider-vsphere#642 deleted nodes on such answers).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use overcast_cloud::{CloudError, Instance, InstanceKey, InstanceState, Instances, Result, Zone};

use crate::config::{Config, IpFamily, Nodes};
use crate::inventory::View;
use crate::session::Vcenter;
use crate::soap::Moref;
use crate::tags::{nearest, Tags};
use crate::vms::{snapshot, Snapshot, Vm, VIEW_TYPES};

pub const PROVIDER: &str = "vsphere";

/// One vCenter as the instances see it.
pub struct Source {
    pub view: View,
    pub tags: Tags,
    pub datacenters: Vec<String>,
    pub ip_family: Vec<IpFamily>,
}

impl Source {
    pub fn new(vc: Arc<Vcenter>, datacenters: Vec<String>, ip_family: Vec<IpFamily>) -> Self {
        Self {
            view: View::new(Arc::clone(&vc), VIEW_TYPES),
            tags: Tags::new(vc),
            datacenters,
            ip_family,
        }
    }
}

pub struct VsphereInstances {
    sources: Vec<Source>,
    nodes: Nodes,
    zone_category: Option<String>,
    region_category: Option<String>,
}

impl VsphereInstances {
    pub fn new(sources: Vec<Source>, config: &Config) -> Self {
        Self {
            sources,
            nodes: config.nodes.clone(),
            zone_category: config.zone_category.clone(),
            region_category: config.region_category.clone(),
        }
    }

    async fn list_one(&self, source: &Source) -> Result<Vec<Instance>> {
        let snap = snapshot(&source.view).await?;
        let server = source.view.vcenter().server().to_owned();
        let vms = select(&snap, &source.datacenters, &server)?;
        let zones = self.zones(source, &snap, &vms).await?;
        Ok(vms
            .into_iter()
            .filter_map(|vm| {
                let uuid = vm.uuid.clone()?;
                Some(Instance {
                    node_name: vm.host_name.clone().unwrap_or_else(|| vm.name.clone()),
                    provider_id: format!("{PROVIDER}://{uuid}"),
                    instance_type: format!(
                        "vsphere-vm.cpu-{}.mem-{}gb.os-{}",
                        vm.num_cpu,
                        vm.memory_mb / 1024,
                        crate::guest_os::shorthand(&vm.guest_id)
                    ),
                    addresses: crate::addresses::of(vm, &self.nodes, &source.ip_family),
                    zone: zones.get(&vm.moref).cloned(),
                    state: power_state(&vm.power, &vm.connection),
                })
            })
            .collect())
    }

    /// Each VM's zone and region from the tags of its host and the host's ancestors
    /// (cluster, folders, datacenter), the nearest tag in each category winning.
    async fn zones(
        &self,
        source: &Source,
        snap: &Snapshot,
        vms: &[&Vm],
    ) -> Result<BTreeMap<Moref, Zone>> {
        if self.zone_category.is_none() && self.region_category.is_none() {
            return Ok(BTreeMap::new());
        }
        let mut chains = BTreeMap::new();
        let mut objects: Vec<Moref> = Vec::new();
        for vm in vms {
            let chain = vm
                .host
                .as_ref()
                .map(|h| snap.ancestors(h))
                .unwrap_or_default();
            for m in &chain {
                if !objects.contains(m) && m.kind != "Folder" {
                    objects.push(m.clone());
                }
            }
            chains.insert(vm.moref.clone(), chain);
        }
        let attached = source.tags.attached(&objects).await?;
        Ok(chains
            .into_iter()
            .filter_map(|(vm, chain)| {
                let zone = Zone {
                    zone: nearest(&chain, &attached, self.zone_category.as_deref()),
                    region: nearest(&chain, &attached, self.region_category.as_deref()),
                };
                (!zone.zone.is_empty() || !zone.region.is_empty()).then_some((vm, zone))
            })
            .collect())
    }
}

/// The VMs that are nodes: not templates, in the configured datacenters, with a BIOS
/// UUID. A VM whose identity or place the vCenter cannot read and that is not plainly
/// connected (orphaned, inaccessible, properties refused) fails the whole listing.
fn select<'a>(snap: &'a Snapshot, datacenters: &[String], server: &str) -> Result<Vec<&'a Vm>> {
    let mut vms = Vec::new();
    for vm in &snap.vms {
        if vm.template {
            continue;
        }
        let plain = vm.connection == "connected" && vm.unreadable.is_empty();
        let Some(dc) = datacenter(snap, vm) else {
            if plain {
                continue;
            }
            return Err(uncertain(server, vm));
        };
        if !datacenters.iter().any(|d| d == &dc) {
            continue;
        }
        if vm.uuid.is_none() {
            if plain {
                continue;
            }
            return Err(uncertain(server, vm));
        }
        vms.push(vm);
    }
    Ok(vms)
}

/// The datacenter a VM is in, by name.
fn datacenter(snap: &Snapshot, vm: &Vm) -> Option<String> {
    // A VM's own parent chain is not read (folders only); its host's leads to the
    // datacenter.
    let host = vm.host.as_ref()?;
    snap.ancestors(host)
        .into_iter()
        .find(|m| m.kind == "Datacenter")
        .and_then(|m| snap.entities.get(&m).map(|e| e.name.clone()))
}

fn uncertain(server: &str, vm: &Vm) -> CloudError {
    CloudError::Unavailable(format!(
        "vsphere: {server}: VM {} ({}) is {} and its identity cannot be read{}; no node is \
         judged gone until it can",
        vm.moref.id,
        vm.name,
        if vm.connection.is_empty() {
            "unreadable"
        } else {
            &vm.connection
        },
        if vm.unreadable.is_empty() {
            String::new()
        } else {
            format!(" ({} unreadable)", vm.unreadable.join(", "))
        }
    ))
}

/// cloud-provider-vsphere's `ConvertK8sUUIDtoNormal`: a BIOS UUID as some guests and the
/// in-tree provider read it (the first three fields byte-swapped, as SMBIOS stores them
/// little-endian) turned into vCenter's, and back again (the swap is its own inverse).
/// Anything shorter than a UUID is left as it is.
pub fn swap_uuid_byte_order(uuid: &str) -> String {
    if uuid.len() < 36 || !uuid.is_ascii() {
        return uuid.to_owned();
    }
    let pair = |i: usize| &uuid[i..i + 2];
    format!(
        "{}{}{}{}-{}{}-{}{}{}",
        pair(6),
        pair(4),
        pair(2),
        pair(0),
        pair(11),
        pair(9),
        pair(16),
        pair(14),
        &uuid[18..]
    )
}

#[async_trait]
impl Instances for VsphereInstances {
    fn provider_name(&self) -> &'static str {
        PROVIDER
    }

    /// cloud-provider-vsphere's reading (`GetUUIDFromProviderID`): the UUID after
    /// `vsphere://`, trimmed and lower-cased — and, as its node manager retries a lookup
    /// that found nothing, the same UUID in the other byte order (in-tree and older VM
    /// hardware wrote it so).
    fn instance_keys(&self, provider_id: &str) -> Result<Vec<InstanceKey>> {
        let uuid = provider_id
            .strip_prefix(PROVIDER)
            .and_then(|r| r.strip_prefix("://"))
            .map(|r| r.trim().to_ascii_lowercase())
            .filter(|u| !u.is_empty() && !u.contains('/'))
            .ok_or_else(|| {
                CloudError::InvalidArgument(format!(
                    "providerID {provider_id:?} is not of the form {PROVIDER}://<bios uuid>"
                ))
            })?;
        let swapped = swap_uuid_byte_order(&uuid);
        let mut keys = vec![InstanceKey(uuid)];
        if swapped != keys[0].0 {
            keys.push(InstanceKey(swapped));
        }
        Ok(keys)
    }

    fn upstream_forms(&self, instance: &Instance) -> Vec<String> {
        let uuid = instance
            .provider_id
            .strip_prefix("vsphere://")
            .unwrap_or_default();
        vec![
            instance.provider_id.clone(),
            format!("{PROVIDER}://{}", uuid.to_ascii_uppercase()),
            format!("{PROVIDER}://{}", swap_uuid_byte_order(uuid)),
            format!(
                "{PROVIDER}://{}",
                swap_uuid_byte_order(uuid).to_ascii_uppercase()
            ),
        ]
    }

    /// Every vCenter's VMs; any vCenter that does not answer fails the listing (an
    /// absent answer is not "gone").
    async fn list_instances(&self) -> Result<Vec<Instance>> {
        let mut all = Vec::new();
        for s in &self.sources {
            all.extend(self.list_one(s).await?);
        }
        Ok(all)
    }
}

/// A VM's `runtime.powerState` as an instance state. The power state of a VM the vCenter
/// cannot reach (`runtime.connectionState` other than `connected`: disconnected,
/// orphaned, inaccessible) is the last one it saw, so it says nothing: called running,
/// never off (the shutdown taint and fencing both let volumes be taken away). A
/// suspended VM resumes where it stopped: not off.
fn power_state(power: &str, connection: &str) -> InstanceState {
    match (power, connection) {
        (_, c) if c != "connected" => InstanceState::Running,
        ("poweredOff", _) => InstanceState::Shutdown,
        ("suspended", _) => InstanceState::Suspended,
        _ => InstanceState::Running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cloud-provider-vsphere's own example (`util.go`), both ways.
    #[test]
    fn a_k8s_uuid_turns_into_vcenter_s_and_back() {
        let k8s = "56492e42-22ad-3911-6d72-59cc8f26bc90";
        let vmware = "422e4956-ad22-1139-6d72-59cc8f26bc90";
        assert_eq!(swap_uuid_byte_order(k8s), vmware);
        assert_eq!(swap_uuid_byte_order(vmware), k8s);
        assert_eq!(swap_uuid_byte_order("short"), "short");
    }
    use crate::vms::Entity;

    fn snap(vms: Vec<Vm>) -> Snapshot {
        let mut s = Snapshot {
            vms,
            ..Snapshot::default()
        };
        let entity = |name: &str, parent: Option<Moref>| Entity {
            name: name.into(),
            parent,
        };
        s.entities.insert(
            Moref::new("HostSystem", "host-1"),
            entity("h1", Some(Moref::new("ComputeResource", "cr-1"))),
        );
        s.entities.insert(
            Moref::new("ComputeResource", "cr-1"),
            entity("c1", Some(Moref::new("Folder", "f-1"))),
        );
        s.entities.insert(
            Moref::new("Folder", "f-1"),
            entity("host", Some(Moref::new("Datacenter", "dc-1"))),
        );
        s.entities
            .insert(Moref::new("Datacenter", "dc-1"), entity("DC0", None));
        s
    }

    fn vm(id: &str, uuid: Option<&str>, connection: &str) -> Vm {
        Vm {
            moref: Moref::new("VirtualMachine", id),
            name: id.into(),
            uuid: uuid.map(str::to_owned),
            template: false,
            num_cpu: 1,
            memory_mb: 1024,
            guest_id: String::new(),
            host_name: None,
            nics: Vec::new(),
            power: "poweredOff".into(),
            connection: connection.into(),
            host: Some(Moref::new("HostSystem", "host-1")),
            unreadable: Vec::new(),
        }
    }

    #[test]
    fn an_unidentifiable_vm_that_is_not_plainly_connected_fails_the_listing() {
        let dcs = vec!["DC0".to_owned()];
        // Orphaned or inaccessible but with its UUID: listed (never gone).
        let s = snap(vec![
            vm("vm-1", Some("u1"), "orphaned"),
            vm("vm-2", Some("u2"), "inaccessible"),
        ]);
        assert_eq!(select(&s, &dcs, "vc").unwrap().len(), 2);
        // Without one: the listing is an error, not a shorter list.
        for c in ["orphaned", "inaccessible", "invalid", "disconnected"] {
            let s = snap(vec![
                vm("vm-1", Some("u1"), "connected"),
                vm("vm-2", None, c),
            ]);
            let e = select(&s, &dcs, "vc").unwrap_err();
            assert!(
                matches!(e, CloudError::Unavailable(ref m) if m.contains("vm-2") && m.contains(c)),
                "{e:?}"
            );
        }
        let mut refused = vm("vm-3", None, "connected");
        refused.unreadable = vec!["summary.config".into()];
        assert!(select(&snap(vec![refused]), &dcs, "vc").is_err());
        // A connected VM without a UUID, a template, another datacenter's VM: skipped.
        let mut template = vm("vm-4", Some("u4"), "connected");
        template.template = true;
        let s = snap(vec![vm("vm-5", None, "connected"), template]);
        assert!(select(&s, &dcs, "vc").unwrap().is_empty());
        assert!(select(
            &snap(vec![vm("vm-6", Some("u6"), "connected")]),
            &["DC9".into()],
            "vc"
        )
        .unwrap()
        .is_empty());
    }

    #[test]
    fn only_a_connected_powered_off_vm_is_off() {
        for (power, connection, want) in [
            ("poweredOn", "connected", InstanceState::Running),
            ("poweredOff", "connected", InstanceState::Shutdown),
            ("suspended", "connected", InstanceState::Suspended),
            ("poweredOff", "disconnected", InstanceState::Running),
            ("poweredOff", "orphaned", InstanceState::Running),
            ("poweredOff", "inaccessible", InstanceState::Running),
            ("", "connected", InstanceState::Running),
        ] {
            assert_eq!(power_state(power, connection), want, "{power}/{connection}");
        }
    }
}
