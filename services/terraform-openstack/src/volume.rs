//! Cinder's volumes (`openstack_blockstorage_volume_v3`, `…_v2`), as
//! terraform-provider-openstack 1.54.1 makes and reads them: a node's root volume from an
//! image, its kubernetes-data volume (attached by [`crate::volume_attach`]).
//!
//! What it relies on: a volume is done when Cinder says `available` (`error` fails it with
//! the provider's words, and — as upstream — an errored volume is deleted by no one but
//! the user: it was never recorded). A v2 volume (Deckhouse's earlier layouts) is served on the same Cinder
//! endpoint (v3 answers v2's calls), its size replacing it as upstream's does.

use std::time::Duration;

use http::Method;
use overcast_cloud_openstack::client::Microversion;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    call, get, map_json, number, path_id, region, region_of, string_map, text, timeout, wait,
    with_timeouts, Cloud, Os,
};
use crate::cty::{Type, Value};
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{boolean, computed, int, optional, required, s, string, Block, Nesting, Obj};

pub(crate) const DEFAULT: Duration = Duration::from_secs(600);

/// `openstack_blockstorage_volume_v3` (`v2: false`) or `…_v2`.
pub struct Volume {
    pub v2: bool,
}

fn observe(os: &Os, state: &Obj, v: &J, v2: bool) -> Obj {
    let mut seen = Obj::new();
    for k in [
        "id",
        "description",
        "availability_zone",
        "name",
        "volume_type",
    ] {
        seen.insert(k.into(), text(&v[k]));
    }
    seen.insert("size".into(), number(&v["size"]));
    seen.insert("snapshot_id".into(), text(&v["snapshot_id"]));
    seen.insert("source_vol_id".into(), text(&v["source_volid"]));
    if !v2 {
        seen.insert("backup_id".into(), text(&v["backup_id"]));
    }
    seen.insert("metadata".into(), string_map(&v["metadata"]));
    let attachments = v["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            Value::Map(
                [
                    ("id".to_owned(), text(&a["id"])),
                    ("instance_id".to_owned(), text(&a["server_id"])),
                    ("device".to_owned(), text(&a["device"])),
                ]
                .into(),
            )
        })
        .collect();
    seen.insert("attachment".into(), Value::List(attachments));
    seen.insert("region".into(), region_of(os, state));
    seen
}

pub(crate) async fn read_volume(os: &Os, id: &str) -> Outcome<Option<J>> {
    Ok(get(
        os,
        Service::BlockStorage,
        "volume_get",
        &format!("/volumes/{id}"),
    )
    .await?
    .map(|d| d["volume"].clone()))
}

/// Waits until the volume is one of `target`; `error` (or `error_extending`) fails it.
async fn settled(os: &Os, id: &str, target: &[&str], limit: Duration) -> Outcome<J> {
    wait(&format!("volume {id} {}", target.join(" or ")), limit, || async {
        let v = read_volume(os, id)
            .await?
            .ok_or_else(|| Diag::new("The volume is gone", format!("volume {id} was deleted while it was made")))?;
        let status = v["status"].as_str().unwrap_or_default();
        if status.starts_with("error") {
            return Err(Diag::new(
                format!("Volume {id} is in {status} status"),
                "The volume is in error status. Please check with your cloud admin or check the Block Storage API logs to see why this error occurred.",
            ));
        }
        Ok(target.contains(&status).then_some(v))
    })
    .await
}

#[async_trait::async_trait]
impl Resource<Cloud> for Volume {
    fn schema(&self) -> Block {
        let mut attrs = vec![
            crate::schema::id("The volume's id."),
            region(),
            optional("name", Type::String, "Its name.").kept(),
            optional("description", Type::String, "Its description.").kept(),
            optional("availability_zone", Type::String, "Its availability zone.")
                .force_new()
                .kept(),
            optional(
                "metadata",
                Type::Map(Box::new(Type::String)),
                "Its metadata.",
            )
            .kept(),
            optional("snapshot_id", Type::String, "The snapshot it is made from.")
                .force_new()
                .kept(),
            optional("source_vol_id", Type::String, "The volume it is a copy of.")
                .force_new()
                .kept(),
            optional("image_id", Type::String, "The image it is made from.").force_new(),
            optional("volume_type", Type::String, "Its volume type.")
                .force_new()
                .kept(),
            optional(
                "consistency_group_id",
                Type::String,
                "Its consistency group.",
            )
            .force_new(),
            optional("source_replica", Type::String, "The volume it replicates.").force_new(),
            computed(
                "attachment",
                Type::Set(Box::new(Type::Object(
                    [
                        ("id".to_owned(), Type::String),
                        ("instance_id".to_owned(), Type::String),
                        ("device".to_owned(), Type::String),
                    ]
                    .into(),
                ))),
                "The servers it is attached to.",
            ),
        ];
        if self.v2 {
            attrs.push(required("size", Type::Number, "Its size in GiB.").force_new());
        } else {
            attrs.push(required(
                "size",
                Type::Number,
                "Its size in GiB (grown in place).",
            ));
            attrs.push(optional(
                "enable_online_resize",
                Type::Bool,
                "Grow it while it is attached.",
            ));
            attrs.push(
                optional("backup_id", Type::String, "The backup it is made from.")
                    .force_new()
                    .kept(),
            );
            attrs
                .push(optional("multiattach", Type::Bool, "Attachable to several servers.").kept());
        }
        let block = Block::new("A Cinder volume.", attrs).with_nesting(
            "scheduler_hints",
            Block::new(
                "Where Cinder may place it.",
                vec![
                    optional(
                        "different_host",
                        Type::List(Box::new(Type::String)),
                        "Not beside these volumes.",
                    )
                    .force_new(),
                    optional(
                        "same_host",
                        Type::List(Box::new(Type::String)),
                        "Beside these volumes.",
                    )
                    .force_new(),
                    optional("query", Type::String, "A scheduler query.").force_new(),
                    optional("local_to_instance", Type::String, "Beside this server.").force_new(),
                    optional(
                        "additional_properties",
                        Type::Map(Box::new(Type::String)),
                        "Other hints.",
                    )
                    .force_new(),
                ],
            ),
            true,
            Nesting::Set,
        );
        with_timeouts(block, &["create", "delete"])
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        if int(c, "size").is_some_and(|v| v <= 0) {
            out.push(Diag::at("size", "size must be positive", ""));
        }
        let sources = ["snapshot_id", "source_vol_id", "image_id", "backup_id"]
            .iter()
            .filter(|k| string(c, k).is_some_and(|v| !v.is_empty()))
            .count();
        if !self.v2 && sources > 1 {
            out.push(Diag::at(
                "image_id",
                "One source at most",
                "snapshot_id, source_vol_id, image_id and backup_id exclude each other",
            ));
        }
        out
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let mut body = serde_json::Map::new();
        body.insert("size".into(), json!(int(p, "size").unwrap_or(0)));
        for (attr, key) in [
            ("availability_zone", "availability_zone"),
            ("consistency_group_id", "consistencygroup_id"),
            ("description", "description"),
            ("name", "name"),
            ("snapshot_id", "snapshot_id"),
            ("source_replica", "source_replica"),
            ("source_vol_id", "source_volid"),
            ("image_id", "imageRef"),
            ("backup_id", "backup_id"),
            ("volume_type", "volume_type"),
        ] {
            if let Some(v) = string(p, attr).filter(|v| !v.is_empty()) {
                body.insert(key.into(), json!(v));
            }
        }
        let metadata = map_json(p, "metadata");
        if !metadata.is_empty() {
            body.insert("metadata".into(), J::Object(metadata));
        }
        if boolean(p, "multiattach") == Some(true) {
            body.insert("multiattach".into(), json!(true));
        }
        let made = os
            .api
            .call(
                Service::BlockStorage,
                "volume_create",
                Method::POST,
                "/volumes",
                Some(&json!({ "volume": body })),
                string(p, "backup_id")
                    .filter(|v| !v.is_empty())
                    .map(|_| Microversion(3, 47)),
            )
            .await
            .map_err(|e| (None, Diag::cloud("create the volume", e)))?;
        if made.status.as_u16() != 202 {
            return Err((
                None,
                Diag::cloud(
                    "create the volume",
                    overcast_cloud_http::status_error("openstack", "volume_create", &made),
                ),
            ));
        }
        let doc: J = serde_json::from_slice(&made.body).unwrap_or(J::Null);
        let id = doc["volume"]["id"].as_str().unwrap_or_default().to_owned();
        // Recorded from here on (upstream records it only once available, and so loses an
        // errored one: here it stays in the state, and a destroy or a re-run removes it).
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        let limit = timeout(p, "create", DEFAULT);
        let v = settled(os, &id, &["available"], limit)
            .await
            .map_err(|d| (Some(state.clone()), d))?;
        state.extend(observe(os, p, &v, self.v2));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(read_volume(os, &id)
            .await?
            .map(|v| observe(os, state, &v, self.v2)))
    }

    async fn update(&self, os: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = path_id(prior, "id")?;
        if !self.v2 && planned.get("size") != prior.get("size") {
            let v = read_volume(os, &id)
                .await?
                .ok_or_else(|| Diag::new("The volume is gone", format!("volume {id}")))?;
            let in_use = v["status"] == "in-use";
            if in_use && boolean(planned, "enable_online_resize") != Some(true) {
                return Err(Diag::at(
                    "size",
                    "The volume is attached",
                    format!("volume {id} is in-use: set enable_online_resize to grow it attached"),
                ));
            }
            let size = int(planned, "size").unwrap_or(0);
            let resp = os
                .api
                .call(
                    Service::BlockStorage,
                    "volume_extend",
                    Method::POST,
                    &format!("/volumes/{id}/action"),
                    Some(&json!({"os-extend": {"new_size": size}})),
                    in_use.then_some(Microversion(3, 42)),
                )
                .await
                .map_err(|e| Diag::cloud("grow the volume", e))?;
            if resp.status.as_u16() != 202 {
                return Err(Diag::cloud(
                    "grow the volume",
                    overcast_cloud_http::status_error("openstack", "volume_extend", &resp),
                ));
            }
            let limit = timeout(planned, "create", DEFAULT);
            let what = format!("volume {id} grown to {size} GiB");
            let grown = wait(&what, limit, || async {
                let v = read_volume(os, &id)
                    .await?
                    .ok_or_else(|| Diag::new("The volume is gone", format!("volume {id}")))?;
                let status = v["status"].as_str().unwrap_or_default();
                if status.starts_with("error") {
                    return Err(Diag::new(
                        format!("Volume {id} is in {status} status"),
                        "its extend failed",
                    ));
                }
                Ok(
                    (matches!(status, "available" | "in-use") && v["size"].as_i64() == Some(size))
                        .then_some(()),
                )
            });
            grown.await?;
        }
        let mut body = serde_json::Map::new();
        body.insert(
            "name".into(),
            json!(string(planned, "name").unwrap_or_default()),
        );
        body.insert(
            "description".into(),
            json!(string(planned, "description").unwrap_or_default()),
        );
        if planned.get("metadata") != prior.get("metadata") {
            body.insert("metadata".into(), J::Object(map_json(planned, "metadata")));
        }
        if ["name", "description", "metadata"]
            .iter()
            .any(|k| planned.get(*k) != prior.get(*k))
        {
            call(
                os,
                Service::BlockStorage,
                "volume_update",
                Method::PUT,
                &format!("/volumes/{id}"),
                Some(&json!({ "volume": body })),
                &[200],
                "update the volume",
            )
            .await?;
        }
        let v = read_volume(os, &id)
            .await?
            .ok_or_else(|| Diag::new("The volume is gone", format!("volume {id}")))?;
        let mut state = planned.clone();
        state.extend(observe(os, planned, &v, self.v2));
        Ok(state)
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        let Some(v) = read_volume(os, &id).await? else {
            return Ok(());
        };
        let limit = timeout(state, "delete", DEFAULT);
        // Attached: detached through Nova first (its server's own word), as upstream.
        let attachments: Vec<(String, String)> = v["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| {
                Some((
                    a["server_id"].as_str()?.to_owned(),
                    a["id"].as_str()?.to_owned(),
                ))
            })
            .collect();
        for (server, attachment) in &attachments {
            if !crate::common::safe(server) || !crate::common::safe(attachment) {
                continue;
            }
            match os
                .api
                .expect(
                    Service::Compute,
                    "volume_detach",
                    Method::DELETE,
                    &format!("/servers/{server}/os-volume_attachments/{attachment}"),
                    None,
                    &[202, 204],
                )
                .await
            {
                Ok(_)
                | Err(
                    overcast_cloud::CloudError::NotFound { .. }
                    | overcast_cloud::CloudError::Conflict(_),
                ) => {}
                Err(e) => return Err(Diag::cloud("detach the volume", e)),
            }
        }
        if !attachments.is_empty() {
            settled(os, &id, &["available"], limit).await?;
        }
        if v["status"] != "deleting" {
            crate::common::delete(
                os,
                Service::BlockStorage,
                "volume_delete",
                &format!("/volumes/{id}"),
            )
            .await?;
        }
        wait(&format!("volume {id} deleted"), limit, || async {
            Ok(read_volume(os, &id).await?.is_none().then_some(()))
        })
        .await
    }
}
