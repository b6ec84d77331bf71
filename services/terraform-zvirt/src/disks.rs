//! Disks: made (`ovirt_disk`), attached (`ovirt_disk_attachment`), grown
//! (`ovirt_disk_resize`). The engine locks a disk while it makes or grows it; each
//! resource is done when the disk is `ok` again.

use http::Method;
use overcast_cloud_zvirt::client::{boolean as engine_bool, members, number};
use serde_json::{json, Value as J};

use super::{check_uuid, gone, not_found, until, uuid_of, Cloud};
use crate::cty::{Type, Value};
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{boolean, computed, id, int, n, optional, required, s, string, Block, Obj};

/// oVirt's image formats and disk interfaces.
const FORMATS: [&str; 2] = ["raw", "cow"];
const INTERFACES: [&str; 5] = ["virtio", "virtio_scsi", "ide", "sata", "spapr_vscsi"];

async fn disk(engine: &Cloud, id: &str) -> Outcome<Option<J>> {
    match engine
        .json("disk_get", Method::GET, &format!("/disks/{id}"), None)
        .await
    {
        Ok(d) => Ok(Some(d)),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(Diag::cloud("read the disk", e)),
    }
}

/// Waits until the disk is `ok` (no longer locked) and at least `size` bytes.
async fn settled(engine: &Cloud, id: &str, size: u64) -> Outcome<J> {
    until(&format!("disk {id} ok"), || async {
        match disk(engine, id).await? {
            None => Err(Diag::new(
                "The disk is gone",
                format!("disk {id} was removed while the engine worked on it"),
            )),
            Some(d) if d["status"].as_str() == Some("illegal") => Err(Diag::new(
                "The disk is illegal",
                format!("the engine marked disk {id} illegal"),
            )),
            Some(d)
                if d["status"].as_str() == Some("ok")
                    && number(&d["provisioned_size"]).unwrap_or(0) >= size =>
            {
                Ok(Some(d))
            }
            Some(_) => Ok(None),
        }
    })
    .await
}

fn positive(c: &Obj, name: &str, out: &mut Vec<Diag>) {
    if int(c, name).is_some_and(|v| v <= 0) {
        out.push(Diag::at(name, format!("{name} must be positive"), ""));
    }
}

fn one_of(c: &Obj, name: &str, values: &[&str], out: &mut Vec<Diag>) {
    if let Some(v) = string(c, name).filter(|v| !values.contains(v)) {
        out.push(Diag::at(
            name,
            format!("Invalid {name}"),
            format!("{v:?} is not one of {}", values.join(", ")),
        ));
    }
}

// --- ovirt_disk -------------------------------------------------------------------

pub struct Disk;

#[async_trait::async_trait]
impl Resource<Cloud> for Disk {
    fn schema(&self) -> Block {
        Block::new(
            "A disk on a storage domain.",
            vec![
                id("The disk's id."),
                required(
                    "storage_domain_id",
                    Type::String,
                    "The storage domain it is made on.",
                )
                .force_new(),
                required("format", Type::String, "raw or cow.").force_new(),
                required("size", Type::Number, "Its size in bytes.").force_new(),
                optional("alias", Type::String, "Its name."),
                optional("sparse", Type::Bool, "Thin provisioning.").force_new(),
                computed(
                    "total_size",
                    Type::Number,
                    "What it takes on the storage, in bytes.",
                ),
                computed("status", Type::String, "ok, locked or illegal."),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_uuid(c, "storage_domain_id", &mut out);
        one_of(c, "format", &FORMATS, &mut out);
        positive(c, "size", &mut out);
        out
    }

    async fn create(&self, engine: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let domain = uuid_of(p, "storage_domain_id").map_err(|d| (None, d))?;
        let size = int(p, "size").unwrap_or(0).max(0) as u64;
        let mut body = json!({
            "storage_domains": {"storage_domain": [{"id": domain}]},
            "format": string(p, "format").unwrap_or("cow"),
            "provisioned_size": size.to_string(),
        });
        if let Some(a) = string(p, "alias") {
            body["alias"] = json!(a);
        }
        if let Some(sp) = boolean(p, "sparse") {
            body["sparse"] = json!(sp.to_string());
        }
        let made = engine
            .json("disk_add", Method::POST, "/disks", Some(&body))
            .await
            .map_err(|e| (None, Diag::cloud("create the disk", e)))?;
        let id = made["id"].as_str().unwrap_or_default().to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        observe(&mut state, &made);
        match settled(engine, &id, size).await {
            Ok(d) => {
                observe(&mut state, &d);
                Ok(state)
            }
            Err(d) => Err((Some(state), d)),
        }
    }

    async fn read(&self, engine: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = uuid_of(state, "id")?;
        Ok(disk(engine, &id).await?.map(|d| {
            let mut seen = Obj::from([("id".to_owned(), s(&id))]);
            observe(&mut seen, &d);
            if let Some(a) = d["alias"].as_str() {
                seen.insert("alias".into(), s(a));
            }
            if let Some(f) = d["format"].as_str() {
                seen.insert("format".into(), s(f));
            }
            if let Some(sz) = number(&d["provisioned_size"]) {
                seen.insert("size".into(), n(sz as i64));
            }
            if !d["sparse"].is_null() {
                seen.insert("sparse".into(), Value::Bool(engine_bool(&d["sparse"])));
            }
            if let Some(sd) = d["storage_domains"]["storage_domain"][0]["id"].as_str() {
                seen.insert("storage_domain_id".into(), s(sd));
            }
            seen
        }))
    }

    /// The alias is renamed in place; everything else replaces.
    async fn update(&self, engine: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = uuid_of(prior, "id")?;
        let mut state = planned.clone();
        if let Some(a) = string(planned, "alias").filter(|a| Some(*a) != string(prior, "alias")) {
            let d = engine
                .json(
                    "disk_update",
                    Method::PUT,
                    &format!("/disks/{id}"),
                    Some(&json!({"alias": a})),
                )
                .await
                .map_err(|e| Diag::cloud("rename the disk", e))?;
            observe(&mut state, &d);
        }
        Ok(state)
    }

    async fn delete(&self, engine: &Cloud, state: &Obj) -> Outcome<()> {
        let id = uuid_of(state, "id")?;
        match engine
            .json("disk_remove", Method::DELETE, &format!("/disks/{id}"), None)
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(Diag::cloud("remove the disk", e)),
        }
        gone(
            engine,
            "disk_get",
            &format!("/disks/{id}"),
            &format!("disk {id} removed"),
        )
        .await
    }
}

/// The provider's attributes from the engine's disk.
fn observe(state: &mut Obj, d: &J) {
    if let Some(st) = d["status"].as_str() {
        state.insert("status".into(), s(st));
    }
    if let Some(t) = number(&d["total_size"]).or(number(&d["actual_size"])) {
        state.insert("total_size".into(), n(t as i64));
    } else if !state.contains_key("total_size") || state["total_size"] == Value::Unknown {
        state.insert("total_size".into(), n(0));
    }
}

// --- ovirt_disk_attachment --------------------------------------------------------

pub struct DiskAttachment;

#[async_trait::async_trait]
impl Resource<Cloud> for DiskAttachment {
    fn schema(&self) -> Block {
        Block::new(
            "A disk attached to a VM.",
            vec![
                id("The attachment's id (the disk's)."),
                required("vm_id", Type::String, "The VM.").force_new(),
                required("disk_id", Type::String, "The disk.").force_new(),
                required(
                    "disk_interface",
                    Type::String,
                    "virtio, virtio_scsi, ide, sata or spapr_vscsi.",
                )
                .force_new(),
                optional("bootable", Type::Bool, "The VM boots from it.")
                    .force_new()
                    .default(Value::Bool(false)),
                optional("active", Type::Bool, "Plugged into the VM.")
                    .force_new()
                    .default(Value::Bool(true)),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_uuid(c, "vm_id", &mut out);
        check_uuid(c, "disk_id", &mut out);
        one_of(c, "disk_interface", &INTERFACES, &mut out);
        out
    }

    fn import(&self, id: &str) -> Outcome<Obj> {
        let (vm, disk) = id.split_once('/').ok_or_else(|| {
            Diag::at(
                "id",
                "Import a disk attachment as <vm_id>/<disk_id>",
                format!("{id:?} names no VM"),
            )
        })?;
        Ok(Obj::from([
            ("id".into(), s(disk)),
            ("vm_id".into(), s(vm)),
            ("disk_id".into(), s(disk)),
        ]))
    }

    async fn create(&self, engine: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let vm = uuid_of(p, "vm_id").map_err(|d| (None, d))?;
        let disk = uuid_of(p, "disk_id").map_err(|d| (None, d))?;
        let body = json!({
            "disk": {"id": disk},
            "interface": string(p, "disk_interface").unwrap_or("virtio"),
            "bootable": boolean(p, "bootable").unwrap_or(false).to_string(),
            "active": boolean(p, "active").unwrap_or(true).to_string(),
        });
        engine
            .json(
                "diskattachment_add",
                Method::POST,
                &format!("/vms/{vm}/diskattachments"),
                Some(&body),
            )
            .await
            .map_err(|e| (None, Diag::cloud("attach the disk", e)))?;
        let mut state = p.clone();
        state.insert("id".into(), s(&disk));
        // The engine plugs the disk a moment later: the attachment is made when it is
        // active (else the next refresh would see it inactive and plan it again).
        if boolean(p, "active").unwrap_or(true) {
            let look = until(&format!("disk {disk} active on VM {vm}"), || async {
                Ok(self
                    .read(engine, &state)
                    .await?
                    .filter(|a| boolean(a, "active") == Some(true)))
            })
            .await;
            if let Err(d) = look {
                return Err((Some(state), d));
            }
        }
        Ok(state)
    }

    async fn read(&self, engine: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let vm = uuid_of(state, "vm_id")?;
        let disk = uuid_of(state, "id")?;
        match engine
            .json(
                "diskattachment_get",
                Method::GET,
                &format!("/vms/{vm}/diskattachments/{disk}"),
                None,
            )
            .await
        {
            Ok(a) => {
                let mut seen = Obj::from([
                    ("id".to_owned(), s(&disk)),
                    ("vm_id".to_owned(), s(&vm)),
                    ("disk_id".to_owned(), s(&disk)),
                    (
                        "bootable".to_owned(),
                        Value::Bool(engine_bool(&a["bootable"])),
                    ),
                    ("active".to_owned(), Value::Bool(engine_bool(&a["active"]))),
                ]);
                if let Some(i) = a["interface"].as_str() {
                    seen.insert("disk_interface".into(), s(i));
                }
                Ok(Some(seen))
            }
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(Diag::cloud("read the disk attachment", e)),
        }
    }

    /// Detaches the disk (it stays); an attachment already gone is done.
    async fn delete(&self, engine: &Cloud, state: &Obj) -> Outcome<()> {
        let vm = uuid_of(state, "vm_id")?;
        let disk = uuid_of(state, "id")?;
        if self.read(engine, state).await?.is_none() {
            return Ok(());
        }
        match engine
            .json(
                "diskattachment_remove",
                Method::DELETE,
                &format!("/vms/{vm}/diskattachments/{disk}"),
                None,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(Diag::cloud("detach the disk", e)),
        }
    }
}

// --- ovirt_disk_resize ------------------------------------------------------------

/// The import id's suffix naming a VM's bootable disk (`<vm id>/boot`).
pub const BOOT_OF: &str = "/boot";

/// The bootable disk of VM `vm`, `None` when the VM or its boot disk is gone.
async fn boot_disk(engine: &Cloud, vm: &str) -> Outcome<Option<String>> {
    if !overcast_cloud_zvirt::client::is_id(vm) {
        return Err(Diag::new(
            "Not a VM id",
            format!("{vm:?} is not an engine ID"),
        ));
    }
    match engine
        .json(
            "diskattachment_list",
            Method::GET,
            &format!("/vms/{vm}/diskattachments"),
            None,
        )
        .await
    {
        Ok(doc) => Ok(members(&doc, "disk_attachment")
            .find(|a| engine_bool(&a["bootable"]))
            .and_then(|a| a["disk"]["id"].as_str().or(a["id"].as_str()))
            .map(str::to_owned)),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(Diag::cloud(&format!("list VM {vm}'s disks"), e)),
    }
}

/// Grows a disk (a template's boot disk cloned small) to a size; never shrinks it.
pub struct DiskResize;

#[async_trait::async_trait]
impl Resource<Cloud> for DiskResize {
    fn schema(&self) -> Block {
        Block::new(
            "Grows a disk to a size (never shrinks it; destroying it leaves the disk as it is).",
            vec![
                id("The disk's id."),
                required("disk_id", Type::String, "The disk.").force_new(),
                required("size", Type::Number, "The size in bytes it is grown to."),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_uuid(c, "disk_id", &mut out);
        positive(c, "size", &mut out);
        out
    }

    async fn create(&self, engine: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let id = uuid_of(p, "disk_id").map_err(|d| (None, d))?;
        grow(engine, &id, p).await.map_err(|d| (None, d))
    }

    async fn read(&self, engine: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let imported = string(state, "disk_id").is_none();
        let id = match string(state, "id").and_then(|id| id.strip_suffix(BOOT_OF)) {
            Some(vm) if imported => match boot_disk(engine, vm).await? {
                Some(disk) => disk,
                None => return Ok(None),
            },
            _ if imported => uuid_of(state, "id")?,
            _ => uuid_of(state, "disk_id")?,
        };
        Ok(disk(engine, &id).await?.map(|d| {
            let mut seen = Obj::from([("id".to_owned(), s(&id)), ("disk_id".to_owned(), s(&id))]);
            // A disk found smaller than asked (made again out of band) shows as a change;
            // one grown beyond it by someone else does not (it is never shrunk). After an
            // import the size is the disk's own.
            let want = int(state, "size").unwrap_or(0);
            let have = number(&d["provisioned_size"]).unwrap_or(0) as i64;
            if have < want || imported {
                seen.insert("size".into(), n(have));
            }
            seen
        }))
    }

    /// A disk's id, or `<vm id>/boot`: the bootable disk of that VM (what
    /// `migrate-state` writes for a state of a Deckhouse layout that grew no boot disk,
    /// so that ours, which does, takes over the disk the VM has).
    fn import(&self, id: &str) -> Outcome<Obj> {
        let vm = id.strip_suffix(BOOT_OF).unwrap_or(id);
        if !overcast_cloud_zvirt::client::is_id(vm) {
            return Err(Diag::new(
                "Cannot import the disk resize",
                format!("{id:?} is neither a disk's id nor <VM id>{BOOT_OF}"),
            ));
        }
        Ok(Obj::from([("id".to_owned(), s(id))]))
    }

    async fn update(&self, engine: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = uuid_of(prior, "disk_id")?;
        grow(engine, &id, planned).await
    }

    async fn delete(&self, _engine: &Cloud, _state: &Obj) -> Outcome<()> {
        Ok(())
    }
}

async fn grow(engine: &Cloud, id: &str, p: &Obj) -> Outcome<Obj> {
    let want = int(p, "size").unwrap_or(0).max(0) as u64;
    // A disk still being copied (a clone) is locked: wait for it first.
    let now = settled(engine, id, 0).await?;
    if number(&now["provisioned_size"]).unwrap_or(0) < want {
        engine
            .json(
                "disk_update",
                Method::PUT,
                &format!("/disks/{id}"),
                Some(&json!({"provisioned_size": want.to_string()})),
            )
            .await
            .map_err(|e| Diag::cloud("grow the disk", e))?;
        settled(engine, id, want).await?;
    }
    let mut state = p.clone();
    state.insert("id".into(), s(id));
    Ok(state)
}
