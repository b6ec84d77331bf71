//! The VMs and the inventory around them, read in one PropertyCollector call per sync:
//! every VM's identity, shape, guest networking and state, and every host, cluster,
//! folder and datacenter with its parent (what zones and regions are read from).

use std::collections::BTreeMap;

use overcast_cloud::CloudError;

use crate::inventory::{Props, View};
use crate::soap::Moref;
use crate::xml::Element;

/// The managed entity types the view holds.
pub const VIEW_TYPES: &[&str] = &[
    "VirtualMachine",
    "HostSystem",
    "ComputeResource",
    "Folder",
    "Datacenter",
];

const VM_PATHS: &[&str] = &[
    "name",
    "summary.config",
    "guest.hostName",
    "guest.net",
    "runtime.powerState",
    "runtime.connectionState",
    "runtime.host",
];
const PARENT_PATHS: &[&str] = &["name", "parent"];

/// One guest NIC as VMware Tools reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestNic {
    /// The port group (network) name.
    pub network: String,
    pub ips: Vec<String>,
    /// -1: not a virtual NIC of the VM (a bridge, a container interface).
    pub device_config_id: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    pub moref: Moref,
    pub name: String,
    /// The BIOS UUID (`config.uuid`), lower-case: the providerID's id.
    pub uuid: Option<String>,
    pub template: bool,
    pub num_cpu: u32,
    pub memory_mb: u64,
    pub guest_id: String,
    pub host_name: Option<String>,
    pub nics: Vec<GuestNic>,
    /// `poweredOn`, `poweredOff`, `suspended`.
    pub power: String,
    /// `connected`, `disconnected`, `orphaned`, `inaccessible`, `invalid`.
    pub connection: String,
    pub host: Option<Moref>,
    /// Properties the vCenter could not read for it.
    pub unreadable: Vec<String>,
}

/// A parent in the inventory tree.
#[derive(Debug, Clone)]
pub struct Entity {
    pub name: String,
    pub parent: Option<Moref>,
}

/// Everything one sync reads.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub vms: Vec<Vm>,
    pub entities: BTreeMap<Moref, Entity>,
}

impl Snapshot {
    /// `obj` and its ancestors up to the root folder, nearest first.
    pub fn ancestors(&self, obj: &Moref) -> Vec<Moref> {
        let mut out = Vec::new();
        let mut at = Some(obj.clone());
        while let Some(m) = at {
            if out.contains(&m) || out.len() > 64 {
                break;
            }
            at = self.entities.get(&m).and_then(|e| e.parent.clone());
            out.push(m);
        }
        out
    }
}

/// One call: every VM and every parent entity.
pub async fn snapshot(view: &View) -> Result<Snapshot, CloudError> {
    let props = view
        .retrieve(&[
            ("VirtualMachine", VM_PATHS),
            ("HostSystem", PARENT_PATHS),
            ("ComputeResource", PARENT_PATHS),
            ("Folder", PARENT_PATHS),
            ("Datacenter", PARENT_PATHS),
        ])
        .await?;
    let mut snap = Snapshot::default();
    for p in props {
        if p.obj.kind == "VirtualMachine" {
            snap.vms.push(vm(p));
        } else {
            snap.entities.insert(
                p.obj.clone(),
                Entity {
                    name: p.text("name").unwrap_or_default().to_owned(),
                    parent: p.get("parent").and_then(Moref::of),
                },
            );
        }
    }
    Ok(snap)
}

fn vm(p: Props) -> Vm {
    let config = p.get("summary.config");
    let cfg = |name: &str| config.and_then(|c| c.text_at(&[name]));
    let nics = p
        .get("guest.net")
        .map(|net| net.all("GuestNicInfo").map(nic).collect())
        .unwrap_or_default();
    Vm {
        name: p.text("name").unwrap_or_default().to_owned(),
        uuid: cfg("uuid")
            .filter(|u| !u.is_empty())
            .map(str::to_ascii_lowercase),
        template: cfg("template") == Some("true"),
        num_cpu: cfg("numCpu").and_then(|v| v.parse().ok()).unwrap_or(0),
        memory_mb: cfg("memorySizeMB")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        guest_id: cfg("guestId").unwrap_or_default().to_owned(),
        host_name: p
            .text("guest.hostName")
            .filter(|h| !h.is_empty())
            .map(str::to_owned),
        nics,
        power: p.text("runtime.powerState").unwrap_or_default().to_owned(),
        connection: p
            .text("runtime.connectionState")
            .unwrap_or_default()
            .to_owned(),
        host: p.get("runtime.host").and_then(Moref::of),
        unreadable: p.missing.clone(),
        moref: p.obj,
    }
}

fn nic(e: &Element) -> GuestNic {
    GuestNic {
        network: e.text_at(&["network"]).unwrap_or_default().to_owned(),
        ips: e
            .all("ipAddress")
            .map(|a| a.text.trim().to_owned())
            .collect(),
        device_config_id: e
            .text_at(&["deviceConfigId"])
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1),
    }
}
