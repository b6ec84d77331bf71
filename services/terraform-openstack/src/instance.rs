//! Nova's servers (`openstack_compute_instance_v2`), as terraform-provider-openstack 1.54.1
//! makes, reads, changes and deletes them (`resource_openstack_compute_instance_v2.go`):
//! the image, flavor and networks resolved by name, booted from a volume or an image,
//! waited for until ACTIVE. Where it is fragile this one is not: a server that ends in
//! ERROR fails with Nova's fault message and stays in the state (tainted), so destroy
//! removes it; a Read during a transient status (a reboot, a resize) keeps the recorded
//! power state instead of failing the plan; one GET of the server answers a Read (its tags
//! at microversion 2.26) where upstream makes three and a fourth for the tags.

mod networks;
mod observe;
mod request;
mod schema;
mod update;

use std::time::Duration;

use http::Method;
use overcast_cloud_openstack::client::Microversion;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    blocks, call, get, list_of, map_json, path_id, query, region_of, safe, string_map, text,
    timeout, Cloud, Os,
};
use crate::cty::Value;
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{boolean, s, string, Block, Obj};

use observe::observe;
pub use request::user_data_hash;

const DEFAULT: Duration = Duration::from_secs(30 * 60);
/// What upstream's Read writes as the image of a server booted from a volume.
/// How often a delete Nova failed (the server in ERROR, no task) is asked again.
const DELETE_TRIES: u32 = 3;

const NO_IMAGE: &str = "Attempt to boot from volume - no image supplied";
/// The statuses upstream's Read writes as `power_state` (lowercased).
const POWER: [&str; 6] = [
    "active",
    "shutoff",
    "error",
    "migrating",
    "shelved_offloaded",
    "shelved",
];

/// Nova's `created`/`updated` (`2024-01-02T03:04:05Z`) as Go's `time.Time.String()` writes
/// it (`2024-01-02 03:04:05 +0000 UTC`), the form upstream's state holds.
pub fn go_time(nova: &str) -> String {
    let Some((date, rest)) = nova.split_once('T') else {
        return nova.to_owned();
    };
    let (clock, zone) = if let Some(c) = rest.strip_suffix('Z') {
        (c, "+0000 UTC".to_owned())
    } else if let Some(i) = rest.rfind(['+', '-']) {
        let offset = rest[i..].replace(':', "");
        (&rest[..i], format!("{offset} {offset}"))
    } else {
        (rest, "+0000 UTC".to_owned())
    };
    let clock = match clock.split_once('.') {
        Some((whole, fraction)) => {
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                whole.to_owned()
            } else {
                format!("{whole}.{fraction}")
            }
        }
        None => clock.to_owned(),
    };
    format!("{date} {clock} {zone}")
}

/// The server (with its tags, at 2.26 where Nova speaks it), `None` when gone.
async fn read_server(os: &Os, id: &str) -> Outcome<Option<J>> {
    let path = format!("/servers/{id}");
    let at = os
        .api
        .call(
            Service::Compute,
            "server_get",
            Method::GET,
            &path,
            None,
            Some(Microversion(2, 26)),
        )
        .await
        .map_err(|e| Diag::cloud(&format!("read server {id}"), e))?;
    match at.status.as_u16() {
        200 => serde_json::from_slice::<J>(&at.body)
            .map(|d| Some(d["server"].clone()))
            .map_err(|e| Diag::new("Failed to read the server", e.to_string())),
        404 => Ok(None),
        // A Nova older than 2.26: the plain call (no tags).
        400 | 406 => Ok(get(os, Service::Compute, "server_get", &path)
            .await?
            .map(|d| d["server"].clone())),
        _ => Err(Diag::cloud(
            &format!("read server {id}"),
            overcast_cloud_http::status_error("openstack", "server_get", &at),
        )),
    }
}

/// Nova's words for why a server is in ERROR (its `fault`).
fn fault(server: &J) -> String {
    let f = &server["fault"];
    match (f["message"].as_str(), f["code"].as_i64()) {
        (Some(m), Some(c)) => format!("{m} (code {c})"),
        (Some(m), None) => m.to_owned(),
        _ => "Nova gave no fault message".to_owned(),
    }
}

/// Polls the server until its status is one of `target`; one not in `pending` (ERROR, or
/// gone) fails with what Nova says of it.
async fn settle(
    os: &Os,
    id: &str,
    pending: &[&str],
    target: &[&str],
    limit: Duration,
) -> Outcome<J> {
    let last = std::sync::Mutex::new(String::new());
    let outcome = crate::common::wait(
        &format!("server {id} to become {}", target.join(" or ")),
        limit,
        || {
            let last = &last;
            async move {
                let Some(server) = read_server(os, id).await? else {
                    if target.contains(&"DELETED") {
                        return Ok(Some(J::Null));
                    }
                    return Err(Diag::new(
                        format!("Error waiting for instance ({id}) to become ready"),
                        "the server is gone (Nova answers 404)",
                    ));
                };
                let status = server["status"].as_str().unwrap_or_default().to_owned();
                if target.contains(&status.as_str()) {
                    return Ok(Some(server));
                }
                if !pending.is_empty() && !pending.contains(&status.as_str()) {
                    let why = if status == "ERROR" {
                        format!("Nova put it in ERROR: {}", fault(&server))
                    } else {
                        format!(
                            "unexpected state '{status}', wanted target '{}'",
                            target.join(", ")
                        )
                    };
                    return Err(Diag::new(
                        format!(
                            "Error waiting for instance ({id}) to become {}",
                            target.join(" or ")
                        ),
                        why,
                    ));
                }
                *last.lock().unwrap_or_else(|e| e.into_inner()) = status;
                Ok(None)
            }
        },
    )
    .await;
    let last = last.into_inner().unwrap_or_default();
    outcome.map_err(|d| {
        if d.summary == "Timed out" && !last.is_empty() {
            Diag::new(d.summary, format!("{} (last status {last})", d.detail))
        } else {
            d
        }
    })
}

async fn action(os: &Os, id: &str, name: &'static str, body: J) -> Outcome<()> {
    call(
        os,
        Service::Compute,
        name,
        Method::POST,
        &format!("/servers/{id}/action"),
        Some(&body),
        &[200, 202, 204],
        &format!("{name} server {id}"),
    )
    .await
    .map(|_| ())
}

/// The image a server is made from: none when it boots from a volume, else `image_id`,
/// else the one Glance names `image_name` (exactly one).
async fn image_ref(os: &Os, p: &Obj) -> Outcome<String> {
    if request::boots_from_volume(p) {
        return Ok(String::new());
    }
    if let Some(id) = string(p, "image_id").filter(|v| !v.is_empty() && *v != NO_IMAGE) {
        return Ok(id.to_owned());
    }
    let Some(name) = string(p, "image_name").filter(|v| !v.is_empty()) else {
        return Err(Diag::new(
            "Neither a boot device, image ID, or image name were able to be determined",
            "set image_id, image_name or a block_device",
        ));
    };
    let doc = call(
        os,
        Service::Image,
        "images_list",
        Method::GET,
        &format!("/v2/images?{}", query(&[("name", name)])),
        None,
        &[200],
        "look up the image",
    )
    .await?;
    match doc["images"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        [one] => Ok(one["id"].as_str().unwrap_or_default().to_owned()),
        [] => Err(Diag::at(
            "image_name",
            format!("No image found with name {name:?}"),
            "Glance has no image of that name visible to this project",
        )),
        many => Err(Diag::at(
            "image_name",
            format!("Found {} images with name {name:?}", many.len()),
            "name the image by image_id",
        )),
    }
}

/// The flavor: `flavor_id`, else the one named `flavor_name` (exactly one).
async fn flavor_ref(os: &Os, p: &Obj) -> Outcome<String> {
    if let Some(id) = string(p, "flavor_id").filter(|v| !v.is_empty()) {
        return Ok(id.to_owned());
    }
    let Some(name) = string(p, "flavor_name").filter(|v| !v.is_empty()) else {
        return Err(Diag::new(
            "Neither a flavor_id or flavor_name could be determined",
            "set flavor_id or flavor_name",
        ));
    };
    let doc = call(
        os,
        Service::Compute,
        "flavors_list",
        Method::GET,
        "/flavors/detail?is_public=None",
        None,
        &[200],
        "list flavors",
    )
    .await?;
    let found: Vec<&J> = doc["flavors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["name"].as_str() == Some(name))
        .collect();
    match found.as_slice() {
        [one] => Ok(one["id"].as_str().unwrap_or_default().to_owned()),
        [] => Err(Diag::at(
            "flavor_name",
            format!("No flavor found with name {name:?}"),
            "Nova has no flavor of that name visible to this project",
        )),
        many => Err(Diag::at(
            "flavor_name",
            format!("Found {} flavors with name {name:?}", many.len()),
            "name the flavor by flavor_id",
        )),
    }
}

pub struct Instance;

#[async_trait::async_trait]
impl Resource<Cloud> for Instance {
    fn schema(&self) -> Block {
        schema::schema()
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = request::check_block_devices(c);
        if let Some(p) = string(c, "power_state") {
            if !["active", "shutoff", "shelved_offloaded"]
                .contains(&p.to_ascii_lowercase().as_str())
            {
                out.push(Diag::at(
                    "power_state",
                    "power_state is active, shutoff or shelved_offloaded",
                    format!("not {p:?}"),
                ));
            }
        }
        if let Some(m) = string(c, "network_mode") {
            if !["auto", "none"].contains(&m.to_ascii_lowercase().as_str()) {
                out.push(Diag::at(
                    "network_mode",
                    "network_mode is auto or none",
                    format!("not {m:?}"),
                ));
            }
            if !blocks(c, "network").is_empty() {
                out.push(Diag::at(
                    "network_mode",
                    "network_mode conflicts with network",
                    "",
                ));
            }
        }
        let zone = |k| string(c, k).is_some_and(|v| !v.is_empty());
        if zone("availability_zone") && zone("availability_zone_hints") {
            out.push(Diag::at(
                "availability_zone_hints",
                "availability_zone_hints conflicts with availability_zone",
                "",
            ));
        }
        if blocks(c, "vendor_options").len() > 1 {
            out.push(Diag::at(
                "vendor_options",
                "One vendor_options block at most",
                "",
            ));
        }
        out
    }

    /// A state terraform-provider-openstack wrote holds `user_data`'s SHA-1 (its
    /// StateFunc); this one holds the text (Terraform 1.0 takes no planned value but the
    /// configured one). The text whose SHA-1 the state holds is the same user data: no
    /// new server for it.
    fn same(&self, name: &str, prior: &Value, proposed: &Value) -> bool {
        match (name, prior, proposed) {
            ("user_data", Value::String(p), Value::String(n)) => *p == user_data_hash(n),
            _ => false,
        }
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let early = |d| (None, d);
        // Everything is resolved before the server exists: a missing image, flavor or
        // network fails here, with nothing made.
        let image = image_ref(os, p).await.map_err(early)?;
        let flavor = flavor_ref(os, p).await.map_err(early)?;
        let nics = networks::resolve(os, networks::configured(p))
            .await
            .map_err(early)?;
        let user = string(p, "user_data").unwrap_or_default();
        let body = request::body(p, &image, &flavor, &nics, user).map_err(early)?;
        let made = os
            .api
            .call(
                Service::Compute,
                "server_create",
                Method::POST,
                "/servers",
                Some(&body),
                request::microversion(p),
            )
            .await
            .map_err(|e| (None, Diag::cloud("create the server", e)))?;
        if !matches!(made.status.as_u16(), 200 | 202) {
            let e = overcast_cloud_http::status_error("openstack", "server_create", &made);
            return Err((None, Diag::cloud("create the server", e)));
        }
        let doc: J = serde_json::from_slice(&made.body).unwrap_or(J::Null);
        let id = doc["server"]["id"].as_str().unwrap_or_default().to_owned();
        if !safe(&id) {
            return Err((
                None,
                Diag::new(
                    "Failed to create the server",
                    "Nova's answer names no server id",
                ),
            ));
        }
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        // The networks as resolved (a port's network id and name), which a Read matches.
        let mut with_nics = p.clone();
        with_nics.insert(
            "network".into(),
            Value::List(
                nics.iter()
                    .map(|n| {
                        Value::Map(
                            [
                                ("uuid".to_owned(), s(&n.uuid)),
                                ("name".to_owned(), s(&n.name)),
                                ("port".to_owned(), s(&n.port)),
                                ("access_network".to_owned(), Value::Bool(n.access_network)),
                            ]
                            .into(),
                        )
                    })
                    .collect(),
            ),
        );
        let limit = timeout(p, "create", DEFAULT);
        let kept = |d| (Some(state.clone()), d);
        let mut server = settle(os, &id, &["BUILD"], &["ACTIVE"], limit)
            .await
            .map_err(kept)?;
        if string(p, "power_state") == Some("shutoff") {
            action(os, &id, "server_stop", json!({ "os-stop": null }))
                .await
                .map_err(kept)?;
            server = settle(os, &id, &[], &["SHUTOFF"], limit)
                .await
                .map_err(kept)?;
        }
        let seen = observe(os, &with_nics, &server).await.map_err(kept)?;
        state.extend(seen);
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        match read_server(os, &id).await? {
            Some(server) => observe(os, state, &server).await.map(Some),
            None => Ok(None),
        }
    }

    async fn update(&self, os: &Cloud, prior: &Obj, p: &Obj) -> Outcome<Obj> {
        update::update(os, prior, p).await
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        let limit = timeout(state, "delete", DEFAULT);
        if boolean(state, "stop_before_destroy") == Some(true) {
            // As upstream: a stop that fails does not keep the server.
            if action(os, &id, "server_stop", json!({"os-stop": null}))
                .await
                .is_ok()
            {
                let _ = settle(os, &id, &["ACTIVE"], &["SHUTOFF"], limit).await;
            }
        }
        let detach = blocks(state, "vendor_options")
            .first()
            .and_then(|v| boolean(v, "detach_ports_before_destroy"))
            .unwrap_or(false);
        if detach {
            for nic in networks::configured(state).iter().filter(|n| safe(&n.port)) {
                crate::common::delete(
                    os,
                    Service::Compute,
                    "server_interface_detach",
                    &format!("/servers/{id}/os-interface/{}", nic.port),
                )
                .await?;
            }
        }
        if boolean(state, "force_delete") == Some(true) {
            match os
                .api
                .expect(
                    Service::Compute,
                    "server_force_delete",
                    Method::POST,
                    &format!("/servers/{id}/action"),
                    Some(&json!({"forceDelete": null})),
                    &[202],
                )
                .await
            {
                Ok(_) | Err(overcast_cloud::CloudError::NotFound { .. }) => {}
                Err(e) => return Err(Diag::cloud(&format!("force-delete server {id}"), e)),
            }
        } else {
            crate::common::delete(
                os,
                Service::Compute,
                "server_delete",
                &format!("/servers/{id}"),
            )
            .await?;
        }
        // Until Nova no longer has it; a server still there when the time is up is said
        // with its status (and fault), and stays in the state for the next destroy. Nova
        // marks a delete in progress (`task_state` deleting) before it answers the DELETE:
        // ERROR with no task after it means the compute host's delete failed (a busy
        // database, in a CI run) — the DELETE is asked again, as a user would, a few
        // times; then it fails with Nova's fault (upstream fails at the first ERROR).
        let last = std::sync::Mutex::new(J::Null);
        let retried = std::sync::atomic::AtomicU32::new(0);
        let gone = crate::common::wait(&format!("server {id} to be deleted"), limit, || {
            let (last, id, retried) = (&last, &id, &retried);
            async move {
                match read_server(os, id).await? {
                    None => Ok(Some(())),
                    Some(s) if matches!(s["status"].as_str(), Some("DELETED" | "SOFT_DELETED")) => {
                        Ok(Some(()))
                    }
                    Some(s) => {
                        let failed = s["status"] == "ERROR" && s["OS-EXT-STS:task_state"].is_null();
                        *last.lock().unwrap_or_else(|e| e.into_inner()) = s.clone();
                        if !failed {
                            return Ok(None);
                        }
                        if retried.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                            >= DELETE_TRIES
                        {
                            return Err(Diag::new(
                                format!("Server {id} failed to delete"),
                                format!(
                                    "Nova left it in ERROR, {DELETE_TRIES} times asked again: {}",
                                    fault(&s)
                                ),
                            ));
                        }
                        crate::common::delete(
                            os,
                            Service::Compute,
                            "server_delete",
                            &format!("/servers/{id}"),
                        )
                        .await
                        .map(|()| None)
                    }
                }
            }
        })
        .await;
        let last = last.into_inner().unwrap_or_default();
        gone.map_err(|d| {
            let status = last["status"].as_str().unwrap_or("unknown");
            let why = if status == "ERROR" {
                format!(": {}", fault(&last))
            } else {
                String::new()
            };
            Diag::new(d.summary, format!("{} (status {status}{why})", d.detail))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nova_s_times_are_written_as_go_prints_them() {
        assert_eq!(
            go_time("2024-01-02T03:04:05Z"),
            "2024-01-02 03:04:05 +0000 UTC"
        );
        assert_eq!(
            go_time("2024-01-02T03:04:05+03:00"),
            "2024-01-02 03:04:05 +0300 +0300"
        );
        assert_eq!(
            go_time("2024-01-02T03:04:05.120000Z"),
            "2024-01-02 03:04:05.12 +0000 UTC"
        );
    }

    #[test]
    fn a_fault_is_said_with_its_code() {
        let server = json!({"fault": {"message": "No valid host was found. ", "code": 500}});
        assert_eq!(fault(&server), "No valid host was found.  (code 500)");
    }
}
