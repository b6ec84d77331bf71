//! What a server's Read writes, from Nova's answer (one GET at microversion 2.26).

use super::*;

/// What a server's Read writes (upstream's order and values; see the module's note on
/// transient statuses).
pub(super) async fn observe(os: &Os, state: &Obj, server: &J) -> Outcome<Obj> {
    let id = server["id"].as_str().unwrap_or_default();
    let mut seen = Obj::new();
    seen.insert("id".into(), s(id));
    seen.insert("name".into(), text(&server["name"]));
    seen.insert(
        "created".into(),
        s(go_time(server["created"].as_str().unwrap_or_default())),
    );
    seen.insert(
        "updated".into(),
        s(go_time(server["updated"].as_str().unwrap_or_default())),
    );
    let flat = networks::flatten(server, &networks::configured(state));
    seen.insert("network".into(), flat.network);
    seen.insert("access_ip_v4".into(), s(flat.access_v4));
    seen.insert("access_ip_v6".into(), s(flat.access_v6));
    seen.insert("all_metadata".into(), string_map(&server["metadata"]));
    // Not read from Nova (upstream's Read leaves it): what the state holds, none as `{}`
    // (see the schema).
    let metadata = match state.get("metadata") {
        Some(m @ Value::Map(_)) => m.clone(),
        _ => Value::Map(Obj::new()),
    };
    seen.insert("metadata".into(), metadata);
    let mut groups: Vec<Value> = Vec::new();
    for g in server["security_groups"].as_array().into_iter().flatten() {
        let name = text(&g["name"]);
        if !groups.contains(&name) {
            groups.push(name);
        }
    }
    seen.insert("security_groups".into(), Value::List(groups));
    seen.insert("key_pair".into(), text(&server["key_name"]));
    let flavor = server["flavor"]["id"].as_str().unwrap_or_default();
    if !safe(flavor) {
        return Err(Diag::new(
            "Error setting OpenStack server's flavor",
            "Nova's server names no flavor id",
        ));
    }
    match get(
        os,
        Service::Compute,
        "flavor_get",
        &format!("/flavors/{flavor}"),
    )
    .await?
    {
        Some(f) => {
            seen.insert("flavor_id".into(), s(flavor));
            seen.insert("flavor_name".into(), text(&f["flavor"]["name"]));
        }
        None => {
            seen.insert("flavor_id".into(), s(""));
            seen.insert("flavor_name".into(), s(""));
        }
    }
    if request::boots_from_volume(state) {
        seen.insert("image_id".into(), s(NO_IMAGE));
    } else if let Some(image) = server["image"]["id"].as_str().filter(|i| !i.is_empty()) {
        seen.insert("image_id".into(), s(image));
        let found = if safe(image) {
            get(
                os,
                Service::Image,
                "image_get",
                &format!("/v2/images/{image}"),
            )
            .await?
        } else {
            None
        };
        let name = match found {
            Some(i) => text(&i["name"]),
            None => s("Image not found"),
        };
        seen.insert("image_name".into(), name);
    }
    seen.insert(
        "availability_zone".into(),
        text(&server["OS-EXT-AZ:availability_zone"]),
    );
    seen.insert("region".into(), region_of(os, state));
    let status = server["status"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if POWER.contains(&status.as_str()) {
        seen.insert("power_state".into(), s(status));
    }
    if let Some(tags) = server.get("tags").filter(|t| t.is_array()) {
        crate::common::read_tags(&mut seen, state, tags);
    }
    Ok(seen)
}
