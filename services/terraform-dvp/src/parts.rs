//! A VM's parts besides its disks: `dvp_virtual_machine_ip_address` (a
//! VirtualMachineIPAddress, done when bound to an address) and `dvp_cloud_init_secret`
//! (the cloud-init Secret DVP provisions a VM from).

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, PostParams};
use kube::Api;
use overcast_cloud::CloudError;
use overcast_cloud_dvp::api;
use serde_json::json;

use super::disk::labels_patch;
use super::{
    check_name, create, delete, dynamic, get, labels_of, labels_type, labels_value, name_of, patch,
    waiting_for, Cloud,
};
use crate::cty::{Type, Value};
use crate::resource::{until, Diag, Outcome, Resource};
use crate::schema::{computed, id, optional, required, s, string, Block, Obj};

/// What the `vmip` controller says when an address can never be had (`vmipcondition`).
const HOPELESS: [&str; 2] = [
    "VirtualMachineIPAddressIsOutOfTheValidRange",
    "VirtualMachineIPAddressLeaseAlreadyExists",
];

fn vmip_api(parent: &Cloud) -> Api<DynamicObject> {
    parent.dynamic(&api::virtual_machine_ip_address(), true)
}

pub struct IpAddress;

#[async_trait::async_trait]
impl Resource<Cloud> for IpAddress {
    fn schema(&self) -> Block {
        Block::new(
            "A VirtualMachineIPAddress in the parent namespace.",
            vec![
                id("Its name."),
                required("name", Type::String, "Its name (a VM names it).").force_new(),
                optional(
                    "type",
                    Type::String,
                    "Auto (the next free address) or Static.",
                )
                .force_new()
                .default(s("Auto")),
                optional("static_ip", Type::String, "The address, for type Static.").force_new(),
                optional("labels", labels_type(), "Labels of the object."),
                computed("address", Type::String, "The address it is bound to."),
                computed("phase", Type::String, "Pending, Bound or Attached."),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_name(c, "name", &mut out);
        match (string(c, "type"), string(c, "static_ip")) {
            (Some("Static"), None) if !matches!(c.get("static_ip"), Some(Value::Unknown)) => out
                .push(Diag::at(
                    "static_ip",
                    "static_ip is required for type Static",
                    "",
                )),
            (Some("Static"), Some(ip)) if ip.parse::<std::net::IpAddr>().is_err() => {
                out.push(Diag::at(
                    "static_ip",
                    "static_ip is not an address",
                    format!("{ip:?}"),
                ))
            }
            (Some("Auto") | None, Some(_)) => out.push(Diag::at(
                "static_ip",
                "static_ip is for type Static",
                "an Auto address is the controller's choice",
            )),
            (Some(t), _) if !["Auto", "Static"].contains(&t) => out.push(Diag::at(
                "type",
                "Unknown type",
                format!("{t:?} is neither Auto nor Static"),
            )),
            _ => {}
        }
        out
    }

    async fn create(&self, parent: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let name = name_of(p, "name").map_err(|d| (None, d))?;
        let mut spec = json!({"type": string(p, "type").unwrap_or("Auto")});
        if let Some(ip) = string(p, "static_ip") {
            spec["staticIP"] = json!(ip);
        }
        let obj =
            dynamic("VirtualMachineIPAddress", &name, labels_of(p), spec).map_err(|d| (None, d))?;
        create(
            parent,
            "vmip_create",
            &vmip_api(parent),
            "VirtualMachineIPAddress",
            &obj,
        )
        .await
        .map_err(|d| (None, d))?;
        let mut state = p.clone();
        state.insert("id".into(), s(&name));
        let bound = until(&format!("VirtualMachineIPAddress {name} bound"), || async {
            let Some(o) = get(parent, "vmip_get", &vmip_api(parent), &name).await? else {
                return Err(Diag::new(
                    "The address is gone",
                    format!("VirtualMachineIPAddress {name} was deleted while it was made"),
                ));
            };
            let st = &o.data["status"];
            let hopeless = st["conditions"].as_array().and_then(|cs| {
                cs.iter().find(|c| {
                    c["type"] == "Bound"
                        && c["status"] == "False"
                        && HOPELESS.iter().any(|r| c["reason"] == *r)
                })
            });
            if hopeless.is_some() {
                return Err(Diag::at(
                    "static_ip",
                    format!("VirtualMachineIPAddress {name} cannot be bound"),
                    waiting_for(&o),
                ));
            }
            let address = st["address"].as_str().filter(|a| !a.is_empty());
            Ok(address
                .filter(|_| matches!(st["phase"].as_str(), Some("Bound" | "Attached")))
                .map(|_| o.clone()))
        })
        .await;
        match bound {
            Ok(o) => {
                observe(&mut state, &o);
                Ok(state)
            }
            Err(d) => {
                state.insert("address".into(), Value::Null);
                state.insert("phase".into(), s("Pending"));
                Err((Some(state), d))
            }
        }
    }

    async fn read(&self, parent: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let name = name_of(state, "id")?;
        let Some(o) = get(parent, "vmip_get", &vmip_api(parent), &name).await? else {
            return Ok(None);
        };
        let mut seen = Obj::from([("id".to_owned(), s(&name)), ("name".to_owned(), s(&name))]);
        observe(&mut seen, &o);
        if let Some(t) = o.data["spec"]["type"].as_str() {
            seen.insert("type".into(), s(t));
        }
        // Deckhouse's layouts write `staticIP: ""` for an Auto address: no address given.
        if let Some(ip) = o.data["spec"]["staticIP"]
            .as_str()
            .filter(|ip| !ip.is_empty())
        {
            seen.insert("static_ip".into(), s(ip));
        }
        seen.insert(
            "labels".into(),
            labels_value(state, o.metadata.labels.as_ref()),
        );
        Ok(Some(seen))
    }

    async fn update(&self, parent: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let name = name_of(prior, "id")?;
        let body = json!({"metadata": {"labels": labels_patch(prior, planned)}});
        patch(parent, "vmip_update", &vmip_api(parent), &name, body).await?;
        Ok(planned.clone())
    }

    async fn delete(&self, parent: &Cloud, state: &Obj) -> Outcome<()> {
        let name = name_of(state, "id")?;
        delete(parent, "vmip_delete", "vmip_get", &vmip_api(parent), &name).await
    }
}

fn observe(state: &mut Obj, o: &DynamicObject) {
    let st = &o.data["status"];
    state.insert(
        "address".into(),
        st["address"].as_str().map(s).unwrap_or(Value::Null),
    );
    state.insert("phase".into(), s(st["phase"].as_str().unwrap_or("Pending")));
}

// --- dvp_cloud_init_secret --------------------------------------------------------

/// The Secret type DVP reads cloud-init from, and the key it is written under.
const CLOUD_INIT_TYPE: &str = "provisioning.virtualization.deckhouse.io/cloud-init";
const USER_DATA_KEY: &str = "userData";

pub struct CloudInitSecret;

fn secrets(parent: &Cloud) -> Api<Secret> {
    Api::namespaced(parent.client.clone(), &parent.namespace)
}

#[async_trait::async_trait]
impl Resource<Cloud> for CloudInitSecret {
    fn schema(&self) -> Block {
        Block::new(
            "The cloud-init Secret a VM is provisioned from.",
            vec![
                id("Its name."),
                required("name", Type::String, "Its name (a VM names it).").force_new(),
                required("user_data", Type::String, "The cloud-init user data.").sensitive(),
                optional("labels", labels_type(), "Labels of the Secret."),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_name(c, "name", &mut out);
        out
    }

    async fn create(&self, parent: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let name = name_of(p, "name").map_err(|d| (None, d))?;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels_of(p)},
            "type": CLOUD_INIT_TYPE,
            "stringData": {USER_DATA_KEY: string(p, "user_data").unwrap_or_default()},
        }))
        .map_err(|e| (None, Diag::new("The cloud-init Secret", e.to_string())))?;
        match parent
            .call(
                "secret_create",
                &format!("create Secret {name}"),
                secrets(parent).create(&PostParams::default(), &secret),
            )
            .await
        {
            Ok(_) => {}
            Err(CloudError::Conflict(_)) => {
                return Err((
                    None,
                    Diag::at(
                        "name",
                        format!("Secret {name} already exists"),
                        format!(
                            "a Secret of that name is in namespace {}: it is not taken over",
                            parent.namespace
                        ),
                    ),
                ))
            }
            Err(e) => return Err((None, Diag::cloud("create the cloud-init Secret", e))),
        }
        let mut state = p.clone();
        state.insert("id".into(), s(&name));
        Ok(state)
    }

    async fn read(&self, parent: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let name = name_of(state, "id")?;
        let Some(secret) = parent
            .get_opt("secret_get", &secrets(parent), &name)
            .await
            .map_err(|e| Diag::cloud("read the cloud-init Secret", e))?
        else {
            return Ok(None);
        };
        let user_data = secret
            .data
            .as_ref()
            .and_then(|d| d.get(USER_DATA_KEY))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
        let mut seen = Obj::from([("id".to_owned(), s(&name)), ("name".to_owned(), s(&name))]);
        if let Some(u) = user_data {
            seen.insert("user_data".into(), s(u));
        }
        seen.insert(
            "labels".into(),
            labels_value(state, secret.metadata.labels.as_ref()),
        );
        Ok(Some(seen))
    }

    async fn update(&self, parent: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let name = name_of(prior, "id")?;
        let encoded = base64::engine::general_purpose::STANDARD
            .encode(string(planned, "user_data").unwrap_or_default());
        let body = json!({"metadata": {"labels": labels_patch(prior, planned)}, "data": {USER_DATA_KEY: encoded}});
        parent
            .call(
                "secret_update",
                &format!("update Secret {name}"),
                secrets(parent).patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&body),
                ),
            )
            .await
            .map_err(|e| Diag::cloud("update the cloud-init Secret", e))?;
        Ok(planned.clone())
    }

    async fn delete(&self, parent: &Cloud, state: &Obj) -> Outcome<()> {
        let name = name_of(state, "id")?;
        parent
            .delete(
                "secret_delete",
                &secrets(parent),
                &name,
                &kube::api::DeleteParams::default(),
            )
            .await
            .map_err(|e| Diag::cloud("delete the cloud-init Secret", e))
    }
}
