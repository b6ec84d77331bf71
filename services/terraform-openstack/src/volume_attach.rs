//! Nova's volume attachments (`openstack_compute_volume_attach_v2`), as
//! terraform-provider-openstack 1.54.1 makes and reads them: an attachment is done when
//! Nova lists it and Cinder says the volume is `in-use`. One Nova took back after it
//! accepted it (its compute host's attach failed) is made again, where upstream waits for
//! it until its timeout.

use http::Method;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    call, get, path_id, region, region_of, text, timeout, wait, with_timeouts, Cloud, Os,
};
use crate::cty::{Type, Value};
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{optional, required, s, string, Block, Nesting, Obj};

use crate::volume::{read_volume, DEFAULT};

/// How often an attachment Nova took back is made again.
const ATTACH_TRIES: u32 = 3;

/// Where an attachment stands once it settled.
enum Attach {
    /// The volume in-use, with Nova's attachment.
    Done(J),
    /// Nova took it back: the attachment gone, the volume attached to nothing of `server`.
    TakenBack,
}

/// One look at attachment `aid` of `volume` to `server`: `None` while it is on its way.
async fn attach_settled(os: &Os, server: &str, volume: &str, aid: &str) -> Outcome<Option<Attach>> {
    let a = get(
        os,
        Service::Compute,
        "volume_attachment_get",
        &format!("/servers/{server}/os-volume_attachments/{aid}"),
    )
    .await?;
    let v = read_volume(os, volume).await?;
    let status = v.as_ref().and_then(|v| v["status"].as_str());
    if status == Some("error") {
        return Err(Diag::new(
            format!("Volume {volume} failed to attach"),
            "volume entered unexpected error status",
        ));
    }
    Ok(match a {
        Some(a) => (status == Some("in-use")).then(|| Attach::Done(a["volumeAttachment"].clone())),
        // Nova records the attachment before it answers the POST: gone means taken back
        // once Cinder has let the volume go too (not while it still holds it for `server`).
        None => {
            let held = v.as_ref().is_some_and(|v| {
                v["attachments"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|a| a["server_id"] == server)
            });
            (status == Some("available") && !held).then_some(Attach::TakenBack)
        }
    })
}

/// A volume attached to a server through Nova; its id is `<server>/<attachment>`.
pub struct VolumeAttach;

#[async_trait::async_trait]
impl Resource<Cloud> for VolumeAttach {
    fn schema(&self) -> Block {
        with_timeouts(
            Block::new(
                "A Cinder volume attached to a Nova server.",
                vec![
                    crate::schema::id("<server id>/<attachment id>."),
                    region(),
                    required("instance_id", Type::String, "The server.").force_new(),
                    required("volume_id", Type::String, "The volume.").force_new(),
                    optional(
                        "device",
                        Type::String,
                        "The device Nova names it (/dev/vdb).",
                    )
                    .kept(),
                    optional("multiattach", Type::Bool, "A volume several servers hold.")
                        .force_new()
                        .kept(),
                ],
            )
            .with_nesting(
                "vendor_options",
                Block::new(
                    "Options of this provider.",
                    vec![optional(
                        "ignore_volume_confirmation",
                        Type::Bool,
                        "Do not wait for Cinder to say in-use.",
                    )
                    .default(Value::Bool(false))],
                ),
                true,
                Nesting::Set,
            ),
            &["create", "delete"],
        )
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let server = path_id(p, "instance_id").map_err(|d| (None, d))?;
        let volume = path_id(p, "volume_id").map_err(|d| (None, d))?;
        let mut attachment = serde_json::Map::new();
        attachment.insert("volumeId".into(), json!(volume));
        if let Some(d) = string(p, "device").filter(|v| !v.is_empty()) {
            attachment.insert("device".into(), json!(d));
        }
        let mut state = p.clone();
        // The compute host's attach can fail after Nova accepted it (a busy database, a
        // backend's refusal): Nova then takes the attachment back — it is gone, the volume
        // available again. Upstream waits for it until its timeout; it is made again here,
        // a few times, as nothing of the first try is left.
        let mut tries = 0;
        let attached = loop {
            tries += 1;
            let made = call(
                os,
                Service::Compute,
                "volume_attach",
                Method::POST,
                &format!("/servers/{server}/os-volume_attachments"),
                Some(&json!({ "volumeAttachment": attachment })),
                &[200],
                &format!("attach volume {volume} to server {server}"),
            )
            .await
            .map_err(|d| (None, d))?;
            let aid = made["volumeAttachment"]["id"]
                .as_str()
                .unwrap_or(&volume)
                .to_owned();
            state.insert("id".into(), s(format!("{server}/{aid}")));
            let limit = timeout(p, "create", DEFAULT);
            let seen = wait(
                &format!("volume {volume} in-use on {server}"),
                limit,
                || attach_settled(os, &server, &volume, &aid),
            )
            .await
            .map_err(|d| (Some(state.clone()), d))?;
            match seen {
                Attach::Done(a) => break a,
                Attach::TakenBack if tries < ATTACH_TRIES => {
                    // made again
                }
                Attach::TakenBack => {
                    return Err((
                        None,
                        Diag::new(
                            format!("Volume {volume} failed to attach"),
                            format!(
                                "Nova accepted the attachment to server {server} and took it back, {tries} times: the compute host's attach failed (its log says why)"
                            ),
                        ),
                    ))
                }
            }
        };
        state.extend(observe_attachment(os, p, &attached));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let (server, aid) = split_id(state)?;
        Ok(get(
            os,
            Service::Compute,
            "volume_attachment_get",
            &format!("/servers/{server}/os-volume_attachments/{aid}"),
        )
        .await?
        .map(|a| observe_attachment(os, state, &a["volumeAttachment"])))
    }

    fn import(&self, id: &str) -> Outcome<Obj> {
        let mut parts = id.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), None) if crate::common::safe(a) && crate::common::safe(b) => {
                Ok(crate::common::id_only(id))
            }
            _ => Err(Diag::new(
                "Cannot import the attachment",
                format!("{id:?} is not <server id>/<attachment id>"),
            )),
        }
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let (server, aid) = split_id(state)?;
        let path = format!("/servers/{server}/os-volume_attachments/{aid}");
        let limit = timeout(state, "delete", DEFAULT);
        wait(
            &format!("volume {aid} detached from {server}"),
            limit,
            || async {
                if get(os, Service::Compute, "volume_attachment_get", &path)
                    .await?
                    .is_none()
                {
                    return Ok(Some(()));
                }
                match os
                    .api
                    .expect(
                        Service::Compute,
                        "volume_detach",
                        Method::DELETE,
                        &path,
                        None,
                        &[202, 204],
                    )
                    .await
                {
                    Ok(_) | Err(overcast_cloud::CloudError::NotFound { .. }) => Ok(None),
                    // Busy (the server is changing): asked again.
                    Err(
                        overcast_cloud::CloudError::Conflict(_)
                        | overcast_cloud::CloudError::InvalidArgument(_),
                    ) => Ok(None),
                    Err(e) => Err(Diag::cloud("detach the volume", e)),
                }
            },
        )
        .await
    }
}

fn split_id(state: &Obj) -> Outcome<(String, String)> {
    let id = string(state, "id").unwrap_or_default();
    match id.split_once('/') {
        Some((server, aid)) if crate::common::safe(server) && crate::common::safe(aid) => {
            Ok((server.to_owned(), aid.to_owned()))
        }
        _ => Err(Diag::at(
            "id",
            "Not an attachment's id",
            format!("{id:?} is not <server id>/<attachment id>"),
        )),
    }
}

fn observe_attachment(os: &Os, state: &Obj, a: &J) -> Obj {
    let mut seen = Obj::new();
    seen.insert("instance_id".into(), text(&a["serverId"]));
    seen.insert("volume_id".into(), text(&a["volumeId"]));
    seen.insert("device".into(), text(&a["device"]));
    seen.insert("region".into(), region_of(os, state));
    seen
}
