//! The engine's VMs for the Cluster API provider, made as capz makes them: cloned from a
//! template by name into the ZvirtCluster's engine cluster (`POST /vms?clone=true`),
//! `high_performance`, the CPU topology and memory asked (ballooning off, guaranteed =
//! max = memory), the bootstrap data as `initialization.custom_script` and the Machine's
//! name as `host_name`; once `down`, the bootable active disk grown to the root size and
//! one NIC on the vNIC profile, then started; the guest's addresses from its reported
//! devices (`eth0`, as capz reads them). Removal stops the VM, detaches every disk that is
//! not its bootable one — a CSI volume still attached would be deleted with the VM — and
//! removes it with its boot disk.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use overcast_cloud::{CloudError, Machines, Removal, Result, Vm, VmPhase};
use serde_json::{json, Value};

use crate::client::{boolean, members, number, Engine};

/// What capz's ZvirtMachine (and its ZvirtCluster) ask of a VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmSpec {
    /// The engine cluster the VM goes to (`ZvirtCluster.spec.id`).
    pub cluster_id: String,
    /// The template's name.
    pub template: String,
    pub sockets: u32,
    pub cores: u32,
    pub threads: u32,
    pub memory_mib: u64,
    pub root_disk_gib: u64,
    pub nic_name: String,
    pub vnic_profile_id: String,
    /// The guest's host name (the Machine's name).
    pub host_name: String,
}

/// The guest interface whose addresses are the machine's, as capz reads them.
const GUEST_NIC: &str = "eth0";
/// How long a removal waits for the VM to be `down` after a stop, and a start for the
/// boot disk it grew to unlock.
const STOP_WAIT: Duration = Duration::from_secs(120);

pub struct EngineVms {
    engine: Arc<Engine>,
}

impl EngineVms {
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }

    async fn vm_by_id(&self, id: &str) -> Result<Option<Value>> {
        match self
            .engine
            .json("vm_get", Method::GET, &format!("/vms/{id}"), None)
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(CloudError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The template `name`: its latest version where the engine keeps several.
    async fn template(&self, name: &str) -> Result<String> {
        let doc = self
            .engine
            .json(
                "template_search",
                Method::GET,
                &format!("/templates?{}", search("name", name)),
                None,
            )
            .await?;
        members(&doc, "template")
            .filter(|t| t["name"].as_str() == Some(name))
            .max_by_key(|t| number(&t["version"]["version_number"]).unwrap_or(0))
            .and_then(|t| t["id"].as_str().map(str::to_owned))
            .ok_or_else(|| CloudError::not_found("template", name))
    }

    async fn attachments(&self, vm: &str) -> Result<Vec<Value>> {
        let doc = self
            .engine
            .json(
                "diskattachment_list",
                Method::GET,
                &format!("/vms/{vm}/diskattachments"),
                None,
            )
            .await?;
        Ok(members(&doc, "disk_attachment").cloned().collect())
    }

    /// Grows the VM's bootable active disk to `gib` (never shrinks it).
    async fn grow_root_disk(&self, vm: &str, gib: u64) -> Result<()> {
        let boot = self
            .attachments(vm)
            .await?
            .into_iter()
            .find(|a| boolean(&a["bootable"]) && boolean(&a["active"]))
            .ok_or_else(|| {
                CloudError::FailedPrecondition(format!(
                    "zvirt: VM {vm} has no active bootable disk: is its template configured correctly?"
                ))
            })?;
        let disk = boot["disk"]["id"]
            .as_str()
            .or(boot["id"].as_str())
            .unwrap_or_default()
            .to_owned();
        let current = self
            .engine
            .json("disk_get", Method::GET, &format!("/disks/{disk}"), None)
            .await?;
        let want = gib << 30;
        if number(&current["provisioned_size"]).unwrap_or(0) >= want {
            return Ok(());
        }
        self.engine
            .json(
                "disk_update",
                Method::PUT,
                &format!("/disks/{disk}"),
                Some(&json!({"provisioned_size": want.to_string()})),
            )
            .await?;
        // The engine locks a disk while it grows and will not run a VM with a locked disk.
        let started = Instant::now();
        loop {
            let d = self
                .engine
                .json("disk_get", Method::GET, &format!("/disks/{disk}"), None)
                .await?;
            match d["status"].as_str() {
                Some("locked") if started.elapsed() < STOP_WAIT => {
                    tokio::time::sleep(Duration::from_millis(250)).await
                }
                Some("locked") => {
                    return Err(CloudError::Unavailable(format!(
                        "zvirt: VM {vm}'s boot disk {disk} is still locked {} s after it was grown",
                        STOP_WAIT.as_secs()
                    )))
                }
                _ => return Ok(()),
            }
        }
    }

    /// Adds the NIC `name` on the vNIC profile unless the VM has it already.
    async fn ensure_nic(&self, vm: &str, name: &str, profile: &str) -> Result<()> {
        let doc = self
            .engine
            .json("nic_list", Method::GET, &format!("/vms/{vm}/nics"), None)
            .await?;
        if members(&doc, "nic").any(|n| n["name"].as_str() == Some(name)) {
            return Ok(());
        }
        self.engine
            .json(
                "nic_add",
                Method::POST,
                &format!("/vms/{vm}/nics"),
                Some(&json!({"name": name, "vnic_profile": {"id": profile}})),
            )
            .await
            .map(drop)
    }

    async fn action(&self, vm: &str, action: &'static str, name: &'static str) -> Result<()> {
        self.engine
            .json(
                name,
                Method::POST,
                &format!("/vms/{vm}/{action}"),
                Some(&json!({"force": "true"})),
            )
            .await
            .map(drop)
    }

    /// Waits until the VM is `down` (or gone: `false`).
    async fn wait_down(&self, vm: &str) -> Result<bool> {
        let started = Instant::now();
        loop {
            match self.vm_by_id(vm).await? {
                None => return Ok(false),
                Some(v) if v["status"].as_str() == Some("down") => return Ok(true),
                Some(v) if started.elapsed() > STOP_WAIT => {
                    return Err(CloudError::Unavailable(format!(
                        "zvirt: VM {vm} is still {} {} s after it was stopped",
                        v["status"].as_str().unwrap_or("?"),
                        STOP_WAIT.as_secs()
                    )))
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
}

/// `search=<key>="<value>"`, encoded.
pub fn search(key: &str, value: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("search", &format!("{key}=\"{value}\""))
        .finish()
}

/// A VM's phase from the engine's status (oVirt's `VmStatus`); the states capz treats
/// as failed are failed.
pub fn phase(status: &str) -> VmPhase {
    match status {
        "image_locked" => VmPhase::Creating,
        "down" => VmPhase::Stopped,
        "up" => VmPhase::Running,
        "not_responding" | "paused" | "suspended" | "unassigned" | "unknown" | "image_illegal" => {
            VmPhase::Failed(status.to_owned())
        }
        other => VmPhase::Transitioning(other.to_owned()),
    }
}

fn to_vm(v: &Value) -> Vm {
    Vm {
        id: v["id"].as_str().unwrap_or_default().to_owned(),
        name: v["name"].as_str().unwrap_or_default().to_owned(),
        phase: phase(v["status"].as_str().unwrap_or("unknown")),
        waiting_for: None,
    }
}

/// The addresses of guest interface `eth0` in a `reporteddevices` answer, loopback,
/// link-local and unspecified ones left out.
pub fn guest_addresses(doc: &Value) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for dev in members(doc, "reported_device").filter(|d| d["name"].as_str() == Some(GUEST_NIC)) {
        for ip in members(&dev["ips"], "ip") {
            let Some(ip) = ip["address"]
                .as_str()
                .and_then(|a| a.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let local = match ip {
                IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.is_unspecified(),
                IpAddr::V6(v6) => {
                    v6.is_loopback() || v6.is_unspecified() || v6.is_unicast_link_local()
                }
            };
            if !local && !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    out
}

#[async_trait::async_trait]
impl Machines for EngineVms {
    type Spec = VmSpec;

    async fn find(&self, name: &str) -> Result<Option<Vm>> {
        let doc = self
            .engine
            .json(
                "vm_search",
                Method::GET,
                &format!("/vms?{}", search("name", name)),
                None,
            )
            .await?;
        let found = members(&doc, "vm")
            .find(|v| v["name"].as_str() == Some(name))
            .map(to_vm);
        Ok(found)
    }

    async fn create(&self, name: &str, spec: &VmSpec, bootstrap: &[u8]) -> Result<Vm> {
        let template = self.template(&spec.template).await?;
        let memory = (spec.memory_mib << 20).to_string();
        let body = json!({
            "name": name,
            "cluster": {"id": spec.cluster_id},
            "template": {"id": template},
            "type": "high_performance",
            "cpu": {"topology": {
                "sockets": spec.sockets.to_string(),
                "cores": spec.cores.to_string(),
                "threads": spec.threads.to_string(),
            }},
            "memory": memory,
            "memory_policy": {"guaranteed": memory, "max": memory, "ballooning": "false"},
            "initialization": {
                "custom_script": String::from_utf8_lossy(bootstrap),
                "host_name": spec.host_name,
            },
        });
        let made = self
            .engine
            .json("vm_create", Method::POST, "/vms?clone=true", Some(&body))
            .await?;
        Ok(to_vm(&made))
    }

    async fn start(&self, vm: &Vm, spec: &VmSpec, _bootstrap: &[u8]) -> Result<()> {
        self.grow_root_disk(&vm.id, spec.root_disk_gib).await?;
        self.ensure_nic(&vm.id, &spec.nic_name, &spec.vnic_profile_id)
            .await?;
        self.engine
            .json(
                "vm_start",
                Method::POST,
                &format!("/vms/{}/start", vm.id),
                Some(&json!({})),
            )
            .await
            .map(drop)
    }

    async fn addresses(&self, vm: &Vm) -> Result<Vec<IpAddr>> {
        let doc = self
            .engine
            .json(
                "reporteddevice_list",
                Method::GET,
                &format!("/vms/{}/reporteddevices", vm.id),
                None,
            )
            .await?;
        Ok(guest_addresses(&doc))
    }

    async fn remove(&self, vm: &Vm) -> Result<Removal> {
        let Some(now) = self.vm_by_id(&vm.id).await? else {
            return Ok(Removal::default());
        };
        if now["status"].as_str() != Some("down") {
            match self.action(&vm.id, "stop", "vm_stop").await {
                // Down meanwhile: the engine's 409 "VM is not running"; the wait below
                // tells it from a stop that really failed.
                Ok(()) | Err(CloudError::Conflict(_)) => {}
                Err(CloudError::NotFound { .. }) => return Ok(Removal::default()),
                Err(e) => return Err(e),
            }
            if !self.wait_down(&vm.id).await? {
                return Ok(Removal::default());
            }
        }
        let mut removal = Removal::default();
        for a in self.attachments(&vm.id).await? {
            if boolean(&a["bootable"]) {
                continue;
            }
            let disk = a["disk"]["id"]
                .as_str()
                .or(a["id"].as_str())
                .unwrap_or_default()
                .to_owned();
            match self
                .engine
                .json(
                    "diskattachment_delete",
                    Method::DELETE,
                    &format!("/vms/{}/diskattachments/{disk}", vm.id),
                    None,
                )
                .await
            {
                Ok(_) | Err(CloudError::NotFound { .. }) => removal.detached.push(disk),
                Err(e) => return Err(e),
            }
        }
        match self
            .engine
            .json(
                "vm_delete",
                Method::DELETE,
                &format!("/vms/{}", vm.id),
                None,
            )
            .await
        {
            Ok(_) | Err(CloudError::NotFound { .. }) => Ok(removal),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_s_statuses_are_phases_as_capz_reads_them() {
        assert_eq!(phase("image_locked"), VmPhase::Creating);
        assert_eq!(phase("down"), VmPhase::Stopped);
        assert_eq!(phase("up"), VmPhase::Running);
        for failed in [
            "not_responding",
            "paused",
            "suspended",
            "unassigned",
            "unknown",
        ] {
            assert_eq!(phase(failed), VmPhase::Failed(failed.into()));
        }
        for moving in [
            "wait_for_launch",
            "powering_up",
            "powering_down",
            "migrating",
        ] {
            assert_eq!(phase(moving), VmPhase::Transitioning(moving.into()));
        }
    }

    #[test]
    fn only_eth0_s_routable_addresses_are_the_machine_s() {
        let doc = json!({"reported_device": [
            {"name": "eth0", "ips": {"ip": [
                {"address": "127.0.0.1"}, {"address": "fe80::1"}, {"address": "10.1.2.3"},
                {"address": "2001:db8::5"}, {"address": "10.1.2.3"}]}},
            {"name": "docker0", "ips": {"ip": [{"address": "172.17.0.1"}]}},
        ]});
        let got: Vec<String> = guest_addresses(&doc)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, ["10.1.2.3", "2001:db8::5"]);
        assert!(guest_addresses(&json!({})).is_empty());
    }
}
