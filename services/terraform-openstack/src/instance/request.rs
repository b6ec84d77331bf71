//! The create request of a server, as terraform-provider-openstack 1.54.1 (gophercloud
//! 1.8.0's `servers.CreateOpts` and its extensions) sends it: which keys are always there,
//! which are left out when empty, the scheduler hints beside `server`, and the microversion
//! the features asked for need.

use base64::Engine;
use overcast_cloud_openstack::client::Microversion;
use serde_json::{json, Value as J};

use super::networks::{self, Nic};
use crate::common::{blocks, list_of, map_json};
use crate::cty::Value;
use crate::resource::{Diag, Outcome};
use crate::schema::{boolean, int, string, Obj};

/// `user_data` as Nova takes it: as given when it is base64 already (gophercloud's
/// check), else encoded.
pub fn user_data(text: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    if b64.decode(text).is_ok() {
        text.to_owned()
    } else {
        b64.encode(text)
    }
}

/// The state's `user_data`: the hex SHA-1 of the text (upstream's StateFunc), so a state
/// holds no cloud-init secrets; an empty text stays empty.
pub fn user_data_hash(text: &str) -> String {
    if text.is_empty() {
        return String::new();
    }
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, text.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the server boots from a volume alone: block devices given, none an image
/// copied to local disk (then it has no image of its own).
pub fn boots_from_volume(p: &Obj) -> bool {
    let devices = blocks(p, "block_device");
    !devices.is_empty()
        && !devices.iter().any(|b| {
            string(b, "source_type") == Some("image")
                && string(b, "destination_type") == Some("local")
        })
}

/// upstream's `checkBlockDeviceConfig`.
pub fn check_block_devices(p: &Obj) -> Vec<Diag> {
    let mut out = Vec::new();
    for b in blocks(p, "block_device") {
        let source = string(b, "source_type").unwrap_or_default();
        let dest = string(b, "destination_type").unwrap_or_default();
        let size = int(b, "volume_size").unwrap_or(0);
        if source != "blank" && matches!(b.get("uuid"), None | Some(Value::Null)) {
            out.push(Diag::at(
                "block_device",
                "You must specify a uuid for block device types other than blank",
                format!("a {source} block device names its source by uuid"),
            ));
        }
        if source == "image" && dest == "volume" && size == 0 {
            out.push(Diag::at(
                "block_device",
                "You must specify a volume_size when creating a volume from an image",
                "",
            ));
        }
        if source == "blank" && dest == "local" && size == 0 {
            out.push(Diag::at(
                "block_device",
                "You must specify a volume_size when creating a blank block device",
                "",
            ));
        }
    }
    out
}

fn block_device_mapping(p: &Obj) -> Vec<J> {
    blocks(p, "block_device")
        .into_iter()
        .map(|b| {
            let mut o = serde_json::Map::new();
            o.insert(
                "source_type".into(),
                json!(string(b, "source_type").unwrap_or_default()),
            );
            o.insert("uuid".into(), json!(string(b, "uuid").unwrap_or_default()));
            // Always sent (gophercloud's fields without omitempty).
            o.insert(
                "boot_index".into(),
                json!(int(b, "boot_index").unwrap_or(0)),
            );
            o.insert(
                "delete_on_termination".into(),
                json!(boolean(b, "delete_on_termination").unwrap_or(false)),
            );
            for k in [
                "destination_type",
                "guest_format",
                "device_type",
                "disk_bus",
                "volume_type",
            ] {
                if let Some(v) = string(b, k).filter(|v| !v.is_empty()) {
                    o.insert(k.into(), json!(v));
                }
            }
            if let Some(n) = int(b, "volume_size").filter(|n| *n > 0) {
                o.insert("volume_size".into(), json!(n));
            }
            J::Object(o)
        })
        .collect()
}

/// `os:scheduler_hints` from the first `scheduler_hints` block; `None` when it says nothing.
fn scheduler_hints(p: &Obj) -> Outcome<Option<J>> {
    let Some(h) = blocks(p, "scheduler_hints").into_iter().next() else {
        return Ok(None);
    };
    let mut o = serde_json::Map::new();
    for k in ["group", "target_cell", "build_near_host_ip"] {
        if let Some(v) = string(h, k).filter(|v| !v.is_empty()) {
            o.insert(k.into(), json!(v));
        }
    }
    for k in ["different_host", "same_host", "different_cell"] {
        let v = list_of(h, k);
        if !v.is_empty() {
            o.insert(k.into(), json!(v));
        }
    }
    let q = list_of(h, "query");
    if !q.is_empty() {
        if q.len() < 3 {
            return Err(Diag::at(
                "scheduler_hints",
                "A scheduler query needs at least 3 elements",
                "an operator and two operands",
            ));
        }
        o.insert(
            "query".into(),
            json!(serde_json::to_string(&q).unwrap_or_default()),
        );
    }
    o.extend(map_json(h, "additional_properties"));
    Ok((!o.is_empty()).then_some(J::Object(o)))
}

/// The microversion the asked-for features need (the highest of them), `None` for 2.1.
pub fn microversion(p: &Obj) -> Option<Microversion> {
    let devices = blocks(p, "block_device");
    let mut v = None;
    if string(p, "network_mode").is_some_and(|m| !m.is_empty()) {
        v = Some(Microversion(2, 37));
    }
    if !list_of(p, "tags").is_empty() {
        v = Some(Microversion(2, 52));
    }
    if devices
        .iter()
        .any(|b| boolean(b, "multiattach") == Some(true))
    {
        v = Some(Microversion(2, 60));
    }
    if devices
        .iter()
        .any(|b| string(b, "volume_type").is_some_and(|t| !t.is_empty()))
    {
        v = Some(Microversion(2, 67));
    }
    v
}

/// `POST /servers`'s body.
pub fn body(p: &Obj, image: &str, flavor: &str, nics: &[Nic], user: &str) -> Outcome<J> {
    let mut server = serde_json::Map::new();
    server.insert("name".into(), json!(string(p, "name").unwrap_or_default()));
    server.insert("imageRef".into(), json!(image));
    server.insert("flavorRef".into(), json!(flavor));
    let zone = string(p, "availability_zone")
        .filter(|z| !z.is_empty())
        .or_else(|| string(p, "availability_zone_hints"))
        .unwrap_or_default();
    if !zone.is_empty() {
        server.insert("availability_zone".into(), json!(zone));
    }
    match string(p, "network_mode").filter(|m| !m.is_empty()) {
        Some(mode) => {
            server.insert("networks".into(), json!(mode.to_ascii_lowercase()));
        }
        None if !nics.is_empty() => {
            server.insert("networks".into(), networks::request(nics));
        }
        None => {}
    }
    let metadata = map_json(p, "metadata");
    if !metadata.is_empty() {
        server.insert("metadata".into(), J::Object(metadata));
    }
    server.insert(
        "config_drive".into(),
        json!(boolean(p, "config_drive").unwrap_or(false)),
    );
    if let Some(pass) = string(p, "admin_pass").filter(|v| !v.is_empty()) {
        server.insert("adminPass".into(), json!(pass));
    }
    server.insert("user_data".into(), json!(user_data(user)));
    let personality: Vec<J> = blocks(p, "personality")
        .into_iter()
        .map(|f| {
            json!({
                "path": string(f, "file").unwrap_or_default(),
                "contents": base64::engine::general_purpose::STANDARD
                    .encode(string(f, "content").unwrap_or_default()),
            })
        })
        .collect();
    if !personality.is_empty() {
        server.insert("personality".into(), json!(personality));
    }
    let tags = list_of(p, "tags");
    if !tags.is_empty() {
        server.insert("tags".into(), json!(tags));
    }
    let groups: Vec<J> = list_of(p, "security_groups")
        .into_iter()
        .map(|name| json!({ "name": name }))
        .collect();
    if !groups.is_empty() {
        server.insert("security_groups".into(), json!(groups));
    }
    if let Some(key) = string(p, "key_pair").filter(|k| !k.is_empty()) {
        server.insert("key_name".into(), json!(key));
    }
    let mapping = block_device_mapping(p);
    if !mapping.is_empty() {
        server.insert("block_device_mapping_v2".into(), json!(mapping));
    }
    let mut body = serde_json::Map::new();
    body.insert("server".into(), J::Object(server));
    if let Some(h) = scheduler_hints(p)? {
        body.insert("os:scheduler_hints".into(), h);
    }
    Ok(J::Object(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_holds_the_sha1_of_user_data() {
        // `printf 'hello' | sha1sum`
        assert_eq!(
            user_data_hash("hello"),
            "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"
        );
        assert_eq!(user_data_hash(""), "");
    }

    #[test]
    fn user_data_already_in_base64_is_sent_as_it_is() {
        assert_eq!(user_data("aGVsbG8="), "aGVsbG8=");
        assert_eq!(user_data("#cloud-config\n"), "I2Nsb3VkLWNvbmZpZwo=");
    }
}
