//! Nova's key pairs, server groups, availability zones and flavors
//! (`openstack_compute_keypair_v2`, `openstack_compute_servergroup_v2` and their data
//! sources; `openstack_compute_availability_zones_v2`,
//! `openstack_blockstorage_availability_zones_v3`, `openstack_compute_flavor_v2`), as
//! terraform-provider-openstack 1.54.1 makes and reads them.

use http::Method;
use overcast_cloud_openstack::client::Microversion;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    add_value_specs, call, get, list_of, number, path_id, query, region, region_of, safe, strings,
    text, value_specs, Cloud, Os,
};
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome, Resource};
use crate::schema::{computed, int, optional, required, s, string, Block, Obj};

/// What a key pair's Read writes.
fn observe_keypair(os: &Os, state: &Obj, k: &J) -> Obj {
    let mut seen = Obj::new();
    seen.insert("id".into(), text(&k["name"]));
    seen.insert("name".into(), text(&k["name"]));
    seen.insert("public_key".into(), text(&k["public_key"]));
    seen.insert("fingerprint".into(), text(&k["fingerprint"]));
    if let Some(u) = k["user_id"].as_str().filter(|u| !u.is_empty()) {
        seen.insert("user_id".into(), s(u));
    }
    seen.insert("region".into(), region_of(os, state));
    seen
}

pub struct Keypair;

#[async_trait::async_trait]
impl Resource<Cloud> for Keypair {
    fn schema(&self) -> Block {
        Block::new(
            "A Nova key pair (its id is its name).",
            vec![
                crate::schema::id("The key pair's name."),
                region(),
                required("name", Type::String, "Its name.").force_new(),
                optional(
                    "public_key",
                    Type::String,
                    "The public key (made by Nova when left out).",
                )
                .force_new()
                .kept(),
                value_specs(),
                computed("private_key", Type::String, "The private key Nova made.").sensitive(),
                computed("fingerprint", Type::String, "Its fingerprint."),
                optional("user_id", Type::String, "The user it belongs to.")
                    .force_new()
                    .kept(),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        match string(c, "name") {
            Some(n) if !safe(n) => vec![Diag::at(
                "name",
                "name cannot name a key pair in a path",
                format!("{n:?}: letters, digits, '-', '_', '.', '@'"),
            )],
            _ => Vec::new(),
        }
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let mut body = serde_json::Map::new();
        for k in ["name", "public_key", "user_id"] {
            if let Some(v) = string(p, k).filter(|v| !v.is_empty()) {
                body.insert(k.into(), json!(v));
            }
        }
        add_value_specs(p, &mut body);
        let made = call(
            os,
            Service::Compute,
            "keypair_create",
            Method::POST,
            "/os-keypairs",
            Some(&json!({ "keypair": body })),
            &[200, 201],
            "create the key pair",
        )
        .await
        .map_err(|d| (None, d))?;
        let k = &made["keypair"];
        let mut state = p.clone();
        state.insert("id".into(), text(&k["name"]));
        state.insert(
            "user_id".into(),
            s(string(p, "user_id").unwrap_or_default()),
        );
        state.insert("private_key".into(), text(&k["private_key"]));
        let name = path_id(p, "name").map_err(|d| (Some(state.clone()), d))?;
        let read = get(
            os,
            Service::Compute,
            "keypair_get",
            &format!("/os-keypairs/{name}"),
        )
        .await
        .map_err(|d| (Some(state.clone()), d))?;
        if let Some(doc) = read {
            state.extend(observe_keypair(os, p, &doc["keypair"]));
        }
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let name = path_id(state, "id")?;
        Ok(get(
            os,
            Service::Compute,
            "keypair_get",
            &format!("/os-keypairs/{name}"),
        )
        .await?
        .map(|d| observe_keypair(os, state, &d["keypair"])))
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let name = path_id(state, "id")?;
        crate::common::delete(
            os,
            Service::Compute,
            "keypair_delete",
            &format!("/os-keypairs/{name}"),
        )
        .await
    }
}

/// `data "openstack_compute_keypair_v2"`: a key pair by name.
pub struct KeypairData;

#[async_trait::async_trait]
impl DataSource<Cloud> for KeypairData {
    fn schema(&self) -> Block {
        Block::new(
            "A Nova key pair, by name.",
            vec![
                crate::schema::id("The key pair's name."),
                region(),
                required("name", Type::String, "Its name."),
                optional("user_id", Type::String, "The user it belongs to.").kept(),
                computed("fingerprint", Type::String, "Its fingerprint."),
                computed("public_key", Type::String, "Its public key."),
            ],
        )
    }

    async fn read(&self, os: &Cloud, config: &Obj) -> Outcome<Obj> {
        let name = path_id(config, "name")?;
        let doc = get(
            os,
            Service::Compute,
            "keypair_get",
            &format!("/os-keypairs/{name}"),
        )
        .await?
        .ok_or_else(|| Diag::new("No key pair found", format!("no key pair is named {name}")))?;
        let k = &doc["keypair"];
        let mut out = config.clone();
        out.insert("id".into(), text(&k["name"]));
        out.insert("name".into(), text(&k["name"]));
        out.insert("fingerprint".into(), text(&k["fingerprint"]));
        out.insert("public_key".into(), text(&k["public_key"]));
        out.insert("user_id".into(), text(&k["user_id"]));
        out.insert("region".into(), region_of(os, config));
        Ok(out)
    }
}

/// The policy a server group is asked for needs this microversion (soft policies 2.15).
fn group_microversion(policy: &str) -> Option<Microversion> {
    matches!(policy, "soft-affinity" | "soft-anti-affinity").then_some(Microversion(2, 15))
}

/// What a server group's Read writes.
fn observe_group(os: &Os, state: &Obj, g: &J) -> Obj {
    let mut seen = Obj::new();
    seen.insert("id".into(), text(&g["id"]));
    seen.insert("name".into(), text(&g["name"]));
    seen.insert("members".into(), strings(&g["members"]));
    let policies = match g["policy"].as_str().filter(|p| !p.is_empty()) {
        Some(p) => Value::List(vec![s(p)]),
        None => strings(&g["policies"]),
    };
    seen.insert("policies".into(), policies);
    let rules = match g.get("rules") {
        Some(r) if r.is_object() => Value::List(vec![Value::Map(
            [(
                "max_server_per_host".to_owned(),
                number(&r["max_server_per_host"]),
            )]
            .into(),
        )]),
        _ => Value::List(Vec::new()),
    };
    seen.insert("rules".into(), rules);
    seen.insert("region".into(), region_of(os, state));
    seen
}

/// A server group, read at 2.64 (where Nova says its rules) and else as it answers.
async fn read_group(os: &Os, id: &str) -> Outcome<Option<J>> {
    let path = format!("/os-server-groups/{id}");
    let at_264 = os
        .api
        .call(
            Service::Compute,
            "servergroup_get",
            Method::GET,
            &path,
            None,
            Some(Microversion(2, 64)),
        )
        .await;
    if let Ok(resp) = &at_264 {
        if resp.status.as_u16() == 200 {
            if let Ok(doc) = serde_json::from_slice::<J>(&resp.body) {
                return Ok(Some(doc["server_group"].clone()));
            }
        }
    }
    Ok(get(os, Service::Compute, "servergroup_get", &path)
        .await?
        .map(|d| d["server_group"].clone()))
}

pub struct ServerGroup;

#[async_trait::async_trait]
impl Resource<Cloud> for ServerGroup {
    fn schema(&self) -> Block {
        Block::new(
            "A Nova server group.",
            vec![
                crate::schema::id("The group's id."),
                region(),
                required("name", Type::String, "Its name.").force_new(),
                optional(
                    "policies",
                    Type::List(Box::new(Type::String)),
                    "Its policy: affinity, anti-affinity, soft-affinity or soft-anti-affinity.",
                )
                .force_new(),
                computed(
                    "members",
                    Type::List(Box::new(Type::String)),
                    "The servers in it.",
                ),
                value_specs(),
                // Upstream's Optional+Computed block, which Nova 2.64 always fills
                // (`{max_server_per_host: 0}`): read only here (a group with rules is made
                // by none of Deckhouse's layouts), so a state holding them plans no change.
                computed(
                    "rules",
                    Type::List(Box::new(Type::Object(
                        [("max_server_per_host".to_owned(), Type::Number)].into(),
                    ))),
                    "Its rules, as Nova says them.",
                ),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        if list_of(c, "policies").len() > 1 {
            return vec![Diag::at("policies", "One policy at most", "")];
        }
        Vec::new()
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let name = string(p, "name").unwrap_or_default();
        let policy = list_of(p, "policies")
            .into_iter()
            .next()
            .unwrap_or_default();
        let mut body = serde_json::Map::new();
        body.insert("name".into(), json!(name));
        add_value_specs(p, &mut body);
        // Nova 2.1 takes `policies` (a list); upstream sends it when `policy` is refused.
        body.insert("policies".into(), json!([policy]));
        let made = os
            .api
            .call(
                Service::Compute,
                "servergroup_create",
                Method::POST,
                "/os-server-groups",
                Some(&json!({ "server_group": body })),
                group_microversion(&policy),
            )
            .await
            .map_err(|e| (None, Diag::cloud("create the server group", e)))?;
        if made.status.as_u16() != 200 {
            return Err((
                None,
                Diag::cloud(
                    "create the server group",
                    overcast_cloud_http::status_error("openstack", "servergroup_create", &made),
                ),
            ));
        }
        let doc: J = serde_json::from_slice(&made.body).unwrap_or(J::Null);
        let id = doc["server_group"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        let g = read_group(os, &id)
            .await
            .map_err(|d| (Some(state.clone()), d))?
            .unwrap_or(doc["server_group"].clone());
        state.extend(observe_group(os, p, &g));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(read_group(os, &id)
            .await?
            .map(|g| observe_group(os, state, &g)))
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        crate::common::delete(
            os,
            Service::Compute,
            "servergroup_delete",
            &format!("/os-server-groups/{id}"),
        )
        .await
    }
}

/// `data "openstack_compute_servergroup_v2"`: a server group by name.
pub struct ServerGroupData;

#[async_trait::async_trait]
impl DataSource<Cloud> for ServerGroupData {
    fn schema(&self) -> Block {
        Block::new(
            "A Nova server group, by name.",
            vec![
                crate::schema::id("The group's id."),
                region(),
                required("name", Type::String, "Its name."),
                computed(
                    "policies",
                    Type::List(Box::new(Type::String)),
                    "Its policies.",
                ),
                computed(
                    "members",
                    Type::List(Box::new(Type::String)),
                    "Its servers.",
                ),
                computed(
                    "rules",
                    Type::List(Box::new(Type::Object(
                        [("max_server_per_host".to_owned(), Type::Number)].into(),
                    ))),
                    "Its rules.",
                ),
            ],
        )
    }

    async fn read(&self, os: &Cloud, config: &Obj) -> Outcome<Obj> {
        let name = string(config, "name").unwrap_or_default().to_owned();
        let doc = call(
            os,
            Service::Compute,
            "servergroup_list",
            Method::GET,
            "/os-server-groups",
            None,
            &[200],
            "list server groups",
        )
        .await?;
        let found: Vec<&J> = doc["server_groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| g["name"].as_str() == Some(name.as_str()))
            .collect();
        let g = match found.as_slice() {
            [one] => *one,
            [] => {
                return Err(Diag::new(
                    "No server group found",
                    format!("no server group is named {name}"),
                ))
            }
            _ => {
                return Err(Diag::new(
                    "More than one server group found",
                    format!("{} server groups are named {name}", found.len()),
                ))
            }
        };
        let mut out = config.clone();
        out.extend(observe_group(os, config, g));
        Ok(out)
    }
}

/// `data "openstack_compute_availability_zones_v2"` and `…blockstorage_availability_zones_v3`:
/// the zones of Nova or of Cinder, by state, sorted.
pub struct AvailabilityZones(pub Service);

#[async_trait::async_trait]
impl DataSource<Cloud> for AvailabilityZones {
    fn schema(&self) -> Block {
        Block::new(
            "The availability zones.",
            vec![
                crate::schema::id("A hash of the names."),
                optional("region", Type::String, "The region.").kept(),
                optional("state", Type::String, "available or unavailable.")
                    .default(s("available")),
                computed(
                    "names",
                    Type::List(Box::new(Type::String)),
                    "The zones, sorted.",
                ),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        match string(c, "state") {
            Some(st)
                if !st.eq_ignore_ascii_case("available")
                    && !st.eq_ignore_ascii_case("unavailable") =>
            {
                vec![Diag::at(
                    "state",
                    "state is available or unavailable",
                    st.to_owned(),
                )]
            }
            _ => Vec::new(),
        }
    }

    async fn read(&self, os: &Cloud, config: &Obj) -> Outcome<Obj> {
        let want = string(config, "state").unwrap_or("available") == "available";
        let doc = call(
            os,
            self.0,
            "availability_zone_list",
            Method::GET,
            "/os-availability-zone",
            None,
            &[200],
            "list availability zones",
        )
        .await?;
        let mut names: Vec<String> = doc["availabilityZoneInfo"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|z| z["zoneState"]["available"].as_bool().unwrap_or(false) == want)
            .filter_map(|z| z["zoneName"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        let mut out = config.clone();
        // Upstream's hashcode.Strings: the crc32 of every name followed by '-'.
        let joined: String = names.iter().map(|n| format!("{n}-")).collect();
        out.insert("id".into(), s(crc32(joined.as_bytes()).to_string()));
        out.insert(
            "names".into(),
            Value::List(names.into_iter().map(Value::String).collect()),
        );
        out.insert("region".into(), region_of(os, config));
        out.insert(
            "state".into(),
            s(string(config, "state").unwrap_or("available")),
        );
        Ok(out)
    }
}

/// CRC-32 (IEEE), as Go's `hash/crc32.ChecksumIEEE`.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in data {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// `data "openstack_compute_flavor_v2"`: one flavor by id, or by name and sizes.
pub struct FlavorData;

#[async_trait::async_trait]
impl DataSource<Cloud> for FlavorData {
    fn schema(&self) -> Block {
        Block::new(
            "A Nova flavor.",
            vec![
                crate::schema::id("The flavor's id."),
                region(),
                optional("flavor_id", Type::String, "Its id.").kept(),
                optional("name", Type::String, "Its name.").kept(),
                optional("min_ram", Type::Number, "At least this much RAM (MiB)."),
                optional("ram", Type::Number, "Its RAM (MiB).").kept(),
                optional("vcpus", Type::Number, "Its vCPUs.").kept(),
                optional("min_disk", Type::Number, "At least this much disk (GiB)."),
                optional("disk", Type::Number, "Its disk (GiB).").kept(),
                optional("swap", Type::Number, "Its swap (MiB).").kept(),
                optional("rx_tx_factor", Type::Number, "Its RX/TX factor.").kept(),
                optional("is_public", Type::Bool, "Public.").kept(),
                optional("description", Type::String, "Its description.").kept(),
                computed(
                    "extra_specs",
                    Type::Map(Box::new(Type::String)),
                    "Its extra specs.",
                ),
            ],
        )
    }

    async fn read(&self, os: &Cloud, config: &Obj) -> Outcome<Obj> {
        let flavors: Vec<J> = match string(config, "flavor_id").filter(|v| !v.is_empty()) {
            Some(id) if safe(id) => get(
                os,
                Service::Compute,
                "flavor_get",
                &format!("/flavors/{id}"),
            )
            .await?
            .map(|d| vec![d["flavor"].clone()])
            .unwrap_or_default(),
            Some(id) => {
                return Err(Diag::at(
                    "flavor_id",
                    "flavor_id is not an id",
                    id.to_owned(),
                ))
            }
            None => {
                let mut pairs = Vec::new();
                let (disk, ram) = (
                    int(config, "min_disk").map(|v| v.to_string()),
                    int(config, "min_ram").map(|v| v.to_string()),
                );
                if let Some(d) = &disk {
                    pairs.push(("minDisk", d.as_str()));
                }
                if let Some(r) = &ram {
                    pairs.push(("minRam", r.as_str()));
                }
                pairs.push(("is_public", "None"));
                let doc = call(
                    os,
                    Service::Compute,
                    "flavor_list",
                    Method::GET,
                    &format!("/flavors/detail?{}", query(&pairs)),
                    None,
                    &[200],
                    "list flavors",
                )
                .await?;
                doc["flavors"].as_array().cloned().unwrap_or_default()
            }
        };
        let matches = |f: &J| {
            string(config, "name").is_none_or(|n| f["name"].as_str() == Some(n))
                && int(config, "ram").is_none_or(|v| f["ram"].as_i64() == Some(v))
                && int(config, "vcpus").is_none_or(|v| f["vcpus"].as_i64() == Some(v))
                && int(config, "disk").is_none_or(|v| f["disk"].as_i64() == Some(v))
        };
        let found: Vec<&J> = flavors.iter().filter(|f| matches(f)).collect();
        let f = match found.as_slice() {
            [one] => *one,
            [] => return Err(Diag::new("No flavor found", "no flavor matches the query")),
            _ => {
                return Err(Diag::new(
                    "More than one flavor found",
                    format!("{} flavors match", found.len()),
                ))
            }
        };
        let id = f["id"].as_str().unwrap_or_default().to_owned();
        let specs = if safe(&id) {
            get(
                os,
                Service::Compute,
                "flavor_extra_specs",
                &format!("/flavors/{id}/os-extra_specs"),
            )
            .await?
            .map(|d| crate::common::string_map(&d["extra_specs"]))
            .unwrap_or(Value::Map(Default::default()))
        } else {
            Value::Map(Default::default())
        };
        let mut out = config.clone();
        out.insert("id".into(), s(&id));
        out.insert("flavor_id".into(), s(&id));
        out.insert("name".into(), text(&f["name"]));
        out.insert("description".into(), text(&f["description"]));
        for k in ["ram", "vcpus", "disk", "swap"] {
            out.insert(k.into(), number(&f[k]));
        }
        out.insert(
            "rx_tx_factor".into(),
            Value::Number(
                serde_json::Number::from_f64(f["rxtx_factor"].as_f64().unwrap_or(1.0))
                    .unwrap_or_else(|| 1.into()),
            ),
        );
        out.insert(
            "is_public".into(),
            Value::Bool(f["os-flavor-access:is_public"].as_bool().unwrap_or(true)),
        );
        out.insert("extra_specs".into(), specs);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_zones_id_is_go_s_crc32_of_the_names() {
        // hash/crc32.ChecksumIEEE("nova-") and of "" (no zone).
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }
}
