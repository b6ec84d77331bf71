//! `ovirt_nic`: a VM's network interface on a vNIC profile.

use http::Method;
use overcast_cloud_zvirt::client::members;
use serde_json::json;

use super::{check_uuid, not_found, uuid_of, Cloud};
use crate::cty::Type;
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{id, required, s, string, Block, Obj};

// --- ovirt_nic --------------------------------------------------------------------

/// A NIC of a VM on a vNIC profile.
pub struct Nic;

#[async_trait::async_trait]
impl Resource<Cloud> for Nic {
    fn schema(&self) -> Block {
        Block::new(
            "A network interface of a VM.",
            vec![
                id("The NIC's id."),
                required("vm_id", Type::String, "The VM.").force_new(),
                required(
                    "vnic_profile_id",
                    Type::String,
                    "The vNIC profile (network) it is on.",
                )
                .force_new(),
                required("name", Type::String, "The NIC's name in the VM (nic1).").force_new(),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_uuid(c, "vm_id", &mut out);
        check_uuid(c, "vnic_profile_id", &mut out);
        out
    }

    fn import(&self, id: &str) -> Outcome<Obj> {
        let (vm, nic) = id.split_once('/').ok_or_else(|| {
            Diag::at(
                "id",
                "Import a NIC as <vm_id>/<nic_id>",
                format!("{id:?} names no VM"),
            )
        })?;
        Ok(Obj::from([("id".into(), s(nic)), ("vm_id".into(), s(vm))]))
    }

    async fn create(&self, engine: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let vm = uuid_of(p, "vm_id").map_err(|d| (None, d))?;
        let profile = uuid_of(p, "vnic_profile_id").map_err(|d| (None, d))?;
        let made = engine
            .json(
                "nic_add",
                Method::POST,
                &format!("/vms/{vm}/nics"),
                Some(&json!({"name": string(p, "name").unwrap_or_default(), "vnic_profile": {"id": profile}})),
            )
            .await
            .map_err(|e| (None, Diag::cloud("add the NIC", e)))?;
        let mut state = p.clone();
        state.insert("id".into(), s(made["id"].as_str().unwrap_or_default()));
        Ok(state)
    }

    async fn read(&self, engine: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let vm = uuid_of(state, "vm_id")?;
        let nic = uuid_of(state, "id")?;
        let doc = match engine
            .json("nic_list", Method::GET, &format!("/vms/{vm}/nics"), None)
            .await
        {
            Ok(d) => d,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(Diag::cloud("list the VM's NICs", e)),
        };
        let found = members(&doc, "nic")
            .find(|n| n["id"].as_str() == Some(nic.as_str()))
            .map(|n| {
                let mut seen = Obj::from([
                    ("id".into(), s(&nic)),
                    ("vm_id".into(), s(&vm)),
                    ("name".into(), s(n["name"].as_str().unwrap_or_default())),
                ]);
                if let Some(p) = n["vnic_profile"]["id"].as_str() {
                    seen.insert("vnic_profile_id".into(), s(p));
                }
                seen
            });
        Ok(found)
    }

    async fn delete(&self, engine: &Cloud, state: &Obj) -> Outcome<()> {
        let vm = uuid_of(state, "vm_id")?;
        let nic = uuid_of(state, "id")?;
        match engine
            .json(
                "nic_remove",
                Method::DELETE,
                &format!("/vms/{vm}/nics/{nic}"),
                None,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(Diag::cloud("remove the NIC", e)),
        }
    }
}
