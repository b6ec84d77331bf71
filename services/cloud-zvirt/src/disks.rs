//! Disks on the engine, attached to VMs, for the CSI driver — as the oVirt CSI driver makes
//! them: `POST /disks` on the StorageClass's `storageDomainName`, `thinProvisioning` =
//! cow + sparse, else raw; the disk stays `locked` until the engine has made it (`ok`);
//! attached with `POST /vms/{vm}/diskattachments` (`virtio_scsi`, active, not bootable),
//! whose id is the disk's; detached by deleting the attachment, which keeps the disk.
//!
//! Where a disk is attached is read as the engine gives it: a disk's `vms` only with
//! `all_content=true` (the API model excludes it by default, and listings never carry
//! it), so one disk is read with it and a listing takes the VMs' own attachments
//! (`GET /vms?follow=disk_attachments`, one call). The engine answers "already gone" with
//! 400s whose fault says which (a gone VM, a disk not attached): read from the fault.
//!
//! The node id is the VM's id. The engine keeps no aliases unique, so creates of one name
//! are one at a time in this process and a create first looks the alias up. What the
//! provider needs to know of its disks later (the cluster, the parameters and metadata it
//! was made with, the data center of its storage domain) is kept in the disk's description
//! as JSON.
//!
//! Topology: a zone is an oVirt cluster, its region the cluster's data center. A data
//! storage domain belongs to one data center, and every cluster of it reaches the domain,
//! so a disk's place is its data center alone (`Zone { region, zone: "" }`): its PV names
//! the region, and a create whose requisite topologies are all in other data centers is
//! refused before anything is made.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http::Method;
use overcast_cloud::{
    Attachment, CloudError, Disk, DiskCondition, DiskSpec, Disks, NameClaims, PublishContext,
    Result, Zone,
};
use serde_json::{json, Value};

use crate::client::{boolean, is_id, members, number, Engine};

/// StorageClass parameters, as the oVirt CSI driver names them.
mod attach;
mod create;
mod listing;
mod names;
mod read;

use names::{alias_for, Description};

pub const STORAGE_DOMAIN_PARAMETER: &str = "storageDomainName";
pub const THIN_PARAMETER: &str = "thinProvisioning";

const MIB: u64 = 1 << 20;

/// How long each wait may take.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    /// A new or resized disk leaving `locked`.
    pub unlocked: Duration,
    /// An attachment becoming active.
    pub active: Duration,
    /// An attachment, or a disk, going away.
    pub gone: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            unlocked: Duration::from_secs(300),
            active: Duration::from_secs(120),
            gone: Duration::from_secs(120),
        }
    }
}

pub struct EngineDisks {
    engine: Arc<Engine>,
    cluster: String,
    max_attachments: u64,
    waits: Waits,
    creating: NameClaims,
    /// Storage domain name → its data center's name, as last listed. A create asks the
    /// class's placement (which lists the domains) right before it makes the disk, so
    /// the create records the region without listing them again.
    regions: Mutex<BTreeMap<String, String>>,
    /// CSI name → id of the disks this process made: a search that answers nothing for
    /// one of them (the engine answers a search it cannot parse with an empty list) is
    /// checked by id before "absent" is believed.
    written: Mutex<HashMap<String, String>>,
}

impl EngineDisks {
    pub fn new(engine: Arc<Engine>, cluster: String, max_attachments: u64, waits: Waits) -> Self {
        Self {
            engine,
            cluster,
            max_attachments,
            waits,
            creating: NameClaims::default(),
            regions: Mutex::default(),
            written: Mutex::default(),
        }
    }

    /// The data domains (one call), remembering each one's data center.
    async fn domains(&self) -> Result<BTreeMap<String, Value>> {
        let domains = data_domains(&self.engine).await?;
        let mut regions = self.regions.lock().expect("regions");
        regions.clear();
        regions.extend(
            domains
                .iter()
                .filter_map(|(name, sd)| Some((name.clone(), region_of(sd)?))),
        );
        Ok(domains)
    }

    /// The data center of the domain `name`: remembered, else listed.
    async fn region(&self, name: &str) -> Result<Option<String>> {
        if let Some(r) = self.regions.lock().expect("regions").get(name) {
            return Ok(Some(r.clone()));
        }
        Ok(self.domains().await?.get(name).and_then(region_of))
    }

    async fn get(&self, id: &str) -> Result<Value> {
        if !is_id(id) {
            return Err(CloudError::not_found("disk", id));
        }
        match self
            .engine
            // `vms` (where the disk is attached) only comes with all_content: the API
            // model excludes it by default.
            .json(
                "disk_get",
                Method::GET,
                &format!("/disks/{id}?all_content=true"),
                None,
            )
            .await
        {
            Err(CloudError::NotFound { .. }) => Err(CloudError::not_found("disk", id)),
            other => other,
        }
    }

    /// Polls the disk until `done`, within `limit`; `illegal` is an error.
    async fn wait(
        &self,
        id: &str,
        what: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            let d = self.get(id).await?;
            if done(&d) {
                return Ok(d);
            }
            let status = d["status"].as_str().unwrap_or_default().to_owned();
            if status == "illegal" {
                return Err(CloudError::Internal(format!(
                    "zvirt: disk {id} is illegal while {what}"
                )));
            }
            if started.elapsed() + delay > limit {
                return Err(CloudError::DeadlineExceeded(format!(
                    "zvirt: disk {id} is still {status} after {limit:?} {what}"
                )));
            }
            tokio::time::sleep(delay).await;
            delay = next_delay(started, delay);
        }
    }

    /// The VM `node`, or NotFound (an id that cannot be one included).
    async fn vm(&self, node: &str) -> Result<Value> {
        if !is_id(node) {
            return Err(CloudError::not_found("vm", node));
        }
        match self
            .engine
            .json("vm_get", Method::GET, &format!("/vms/{node}"), None)
            .await
        {
            Err(CloudError::NotFound { .. }) => Err(CloudError::not_found("vm", node)),
            other => other,
        }
    }

    /// The attachment of disk `id` to VM `node`, if there is one.
    async fn attachment(&self, id: &str, node: &str) -> Result<Option<Value>> {
        let resp = self
            .engine
            .json(
                "diskattachment_get",
                Method::GET,
                &format!("/vms/{node}/diskattachments/{id}"),
                None,
            )
            .await;
        match resp {
            Ok(a) => Ok(Some(a)),
            Err(CloudError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The poll schedule: every 100 ms for the first 2 s (the engine's usual transitions — a
/// lock, an activation — last under a second or two), then 50 ms more each time up to
/// 500 ms, every 2 s past 10 s. Doubling from 50 ms answered an attach 170 ms after the
/// engine reported it active, +50 ms steps 119 ms (BENCHMARKS.md).
fn next_delay(started: Instant, delay: Duration) -> Duration {
    let elapsed = started.elapsed();
    if elapsed > Duration::from_secs(10) {
        return Duration::from_secs(2);
    }
    if elapsed < Duration::from_secs(2) {
        return Duration::from_millis(100);
    }
    (delay + Duration::from_millis(50)).min(Duration::from_millis(500))
}

/// The engine's data storage domains, by name, each with its data centers inline (one
/// call: `follow` saves a `/datacenters` listing).
pub(crate) async fn data_domains(engine: &Engine) -> Result<BTreeMap<String, Value>> {
    let doc = engine
        .json(
            "storagedomain_list",
            Method::GET,
            "/storagedomains?follow=data_centers",
            None,
        )
        .await?;
    Ok(members(&doc, "storage_domain")
        .filter(|sd| sd["type"] == "data")
        .filter_map(|sd| Some((sd["name"].as_str()?.to_owned(), sd.clone())))
        .collect())
}

/// The name of the data center a data domain is attached to (one at most; an unattached
/// domain has none, and the engine makes no disk on it).
fn region_of(sd: &Value) -> Option<String> {
    members(&sd["data_centers"], "data_center")
        .find_map(|dc| dc["name"].as_str())
        .map(str::to_owned)
}

/// Whether a cluster of `zone`'s data center reaches the domain (any does, without a
/// zone or a region to go by).
fn reaches(zone: Option<&Zone>, sd: &Value) -> bool {
    match zone.map(|z| z.region.as_str()) {
        None | Some("") => true,
        Some(region) => region_of(sd).as_deref() == Some(region),
    }
}

/// What the node needs to find the disk: the engine gives the disk id as the virtual
/// disk's serial (`scsi-0QEMU_QEMU_HARDDISK_<id[:20]>`, `virtio-<id[:20]>`).
fn context(id: &str) -> BTreeMap<String, String> {
    PublishContext {
        serial: Some(id.to_owned()),
        ..Default::default()
    }
    .to_map()
}

/// An engine refusal for lack of space is the CSI's RESOURCE_EXHAUSTED.
fn space_error(e: CloudError) -> CloudError {
    let text = e.to_string();
    if text.contains("Low disk space") || text.contains("disk space") {
        return CloudError::ResourceExhausted(text);
    }
    e
}

#[async_trait]
impl Disks for EngineDisks {
    /// The engine's clusters (upstream has no topology), each in its data center's region.
    async fn zones(&self) -> Result<Vec<Zone>> {
        let doc = self
            .engine
            .json(
                "cluster_list",
                Method::GET,
                "/clusters?follow=data_center",
                None,
            )
            .await?;
        Ok(members(&doc, "cluster")
            .filter_map(|c| {
                Some(Zone {
                    zone: c["name"].as_str()?.to_owned(),
                    region: c["data_center"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                })
            })
            .collect())
    }

    /// The data center of the class's storage domain: its disks are reachable from that
    /// data center's clusters alone. `None` when the engine knows no such attached domain
    /// (the create then gets the engine's own refusal).
    async fn placement(&self, parameters: &BTreeMap<String, String>) -> Result<Option<Zone>> {
        let Some(name) = parameters.get(STORAGE_DOMAIN_PARAMETER).map(|s| s.trim()) else {
            return Ok(None);
        };
        Ok(self
            .domains()
            .await?
            .get(name)
            .and_then(region_of)
            .map(|region| Zone {
                region,
                zone: String::new(),
            }))
    }

    fn size_granularity(&self) -> u64 {
        MIB
    }

    fn max_disk_size(&self) -> u64 {
        // The engine's own limit on a disk's provisioned size (8 TiB on block storage
        // domains; file domains take more, but one limit keeps a class portable).
        8 << 40
    }

    fn max_attachments_per_node(&self) -> u64 {
        self.max_attachments
    }

    fn overcommits(&self, parameters: &BTreeMap<String, String>) -> bool {
        parameters
            .get(THIN_PARAMETER)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        match parameters.get(STORAGE_DOMAIN_PARAMETER).map(|s| s.trim()) {
            None | Some("") => {
                return Err(CloudError::InvalidArgument(format!(
                    "zvirt: the StorageClass parameter {STORAGE_DOMAIN_PARAMETER} is required"
                )))
            }
            Some(_) => {}
        }
        self.validate_capacity_parameters(parameters)
    }

    fn validate_capacity_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<()> {
        if let Some(v) = parameters.get(THIN_PARAMETER) {
            if !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false") {
                return Err(CloudError::InvalidArgument(format!(
                    "zvirt: {THIN_PARAMETER} must be true or false, not {v:?}"
                )));
            }
        }
        for key in parameters.keys() {
            if key != STORAGE_DOMAIN_PARAMETER && key != THIN_PARAMETER {
                return Err(CloudError::InvalidArgument(format!(
                    "zvirt: unknown StorageClass parameter {key:?} ({STORAGE_DOMAIN_PARAMETER}, {THIN_PARAMETER})"
                )));
            }
        }
        Ok(())
    }

    async fn create_disk(&self, spec: DiskSpec) -> Result<Disk> {
        self.create(spec).await
    }

    async fn disk(&self, id: &str) -> Result<Disk> {
        let d = self.get(id).await?;
        Ok(self.to_disk(&d))
    }

    async fn disk_by_name(&self, name: &str) -> Result<Option<Disk>> {
        Ok(self.by_alias(name).await?.first().map(|d| self.to_disk(d)))
    }

    /// This cluster's disks, each read with where it is attached (a listing never says:
    /// see [`EngineDisks::ours_listed`]).
    async fn list_disks(&self) -> Result<Vec<Disk>> {
        let ours = self.ours_listed().await?;
        self.with_attachments(ours).await
    }

    /// A page of [`EngineDisks::ours_listed`], each disk read with its attachments. A page
    /// whose every disk went away since the listing is not answered empty while more
    /// follow (an empty page would end the CO's listing): the next one is read instead.
    async fn list_disks_page(&self, after: Option<&str>, max: usize) -> Result<(Vec<Disk>, bool)> {
        let ours = self.ours_listed().await?;
        let mut after = after.map(str::to_owned);
        loop {
            let (page, more) = overcast_cloud::page_of(
                ours.clone(),
                |d| d["id"].as_str().unwrap_or_default(),
                after.as_deref(),
                max,
            );
            let last = page
                .last()
                .and_then(|d| d["id"].as_str())
                .map(str::to_owned);
            let disks = self.with_attachments(page).await?;
            if !disks.is_empty() || !more {
                return Ok((disks, more));
            }
            after = last;
        }
    }

    async fn delete_disk(&self, id: &str) -> Result<()> {
        let d = match self.get(id).await {
            Err(CloudError::NotFound { .. }) => return Ok(()),
            other => other?,
        };
        let on: Vec<&str> = members(&d["vms"], "vm")
            .filter_map(|vm| vm["id"].as_str())
            .collect();
        if !on.is_empty() {
            return Err(CloudError::FailedPrecondition(format!(
                "zvirt: disk {id} is attached to VM {}",
                on.join(", ")
            )));
        }
        match self
            .engine
            .json("disk_remove", Method::DELETE, &format!("/disks/{id}"), None)
            .await
        {
            Ok(_) | Err(CloudError::NotFound { .. }) => {}
            // Attached since it was read (ACTION_TYPE_FAILED_VM_IS_NOT_DOWN): detach first.
            Err(CloudError::Conflict(why)) if why.contains("VMs is not down") => {
                return Err(CloudError::FailedPrecondition(why))
            }
            Err(e) => return Err(e),
        }
        self.written.lock().expect("written").retain(|_, v| v != id);
        let started = Instant::now();
        loop {
            match self.get(id).await {
                Err(CloudError::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(e),
                Ok(_) if started.elapsed() > self.waits.gone => {
                    return Err(CloudError::DeadlineExceeded(format!(
                        "zvirt: disk {id} still there {:?} after its removal",
                        self.waits.gone
                    )))
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn attach_disk(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        self.attach(id, node, readonly).await
    }

    async fn detach_disk(&self, id: &str, node: &str) -> Result<()> {
        self.detach(id, node).await
    }

    async fn expand_disk(&self, id: &str, size_bytes: u64) -> Result<u64> {
        let d = self.get(id).await?;
        let have = number(&d["provisioned_size"]).unwrap_or(0);
        if size_bytes <= have {
            return Ok(have);
        }
        let want = size_bytes.div_ceil(MIB) * MIB;
        let body = json!({"provisioned_size": want.to_string()});
        self.engine
            .json(
                "disk_update",
                Method::PUT,
                &format!("/disks/{id}"),
                Some(&body),
            )
            .await
            .map_err(space_error)?;
        let d = self
            .wait(id, "being resized", self.waits.unlocked, move |d| {
                d["status"] == "ok" && number(&d["provisioned_size"]).unwrap_or(0) >= want
            })
            .await?;
        Ok(number(&d["provisioned_size"]).unwrap_or(want))
    }

    /// A class's domain's free space; without one, the largest of any data domain. A
    /// zone in another data center than the domain's has none of it.
    async fn available_capacity_for(
        &self,
        zone: Option<&Zone>,
        parameters: &BTreeMap<String, String>,
    ) -> Result<u64> {
        let Some(name) = parameters.get(STORAGE_DOMAIN_PARAMETER).map(|s| s.trim()) else {
            return self.available_capacity(zone).await;
        };
        let domains = self.domains().await?;
        Ok(domains
            .get(name)
            .filter(|sd| reaches(zone, sd))
            .and_then(|sd| number(&sd["available"]))
            .unwrap_or(0))
    }

    async fn available_capacity(&self, zone: Option<&Zone>) -> Result<u64> {
        // A disk lands on one domain: the largest free space is the largest disk that
        // can be made (in the zone's data center, when a zone is asked for).
        let domains = self.domains().await?;
        Ok(domains
            .values()
            .filter(|sd| reaches(zone, sd))
            .filter_map(|sd| number(&sd["available"]))
            .max()
            .unwrap_or(0))
    }

    async fn node_exists(&self, node: &str) -> Result<bool> {
        match self.vm(node).await {
            Ok(_) => Ok(true),
            Err(CloudError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn probe(&self) -> Result<()> {
        self.engine
            .json("api_get", Method::GET, "", None)
            .await
            .map(|_| ())
    }
}
