//! Neutron's networks (`openstack_networking_network_v2` and its data source), with
//! terraform-provider-openstack 1.54.1's attributes and what its Read writes
//! (`resource_openstack_networking_network_v2.go` at v1.54.1).

use http::Method;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    add_value_specs, blocks, call, delete_when_free, flag, get, list_of, neutron_update, number,
    path_id, put_tags, query, read_tags, region, region_of, strings, tags, text, timeout,
    value_specs, wait, with_timeouts, Cloud,
};
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome, Resource};
use crate::schema::{boolean, computed, id, int, optional, s, string, Block, Obj};

const DEFAULT: std::time::Duration = std::time::Duration::from_secs(600);

fn network_schema() -> Block {
    let mut attrs = vec![
        id("The network's id."),
        region(),
        optional("name", Type::String, "Its name.").kept(),
        optional("description", Type::String, "Its description.").kept(),
        optional("admin_state_up", Type::Bool, "Administratively up.").kept(),
        optional("shared", Type::Bool, "Shared with every project.").kept(),
        optional(
            "external",
            Type::Bool,
            "An external network (router:external).",
        )
        .kept(),
        optional("tenant_id", Type::String, "The owning project.")
            .force_new()
            .kept(),
        value_specs(),
        optional(
            "availability_zone_hints",
            Type::Set(Box::new(Type::String)),
            "Availability zone candidates.",
        )
        .force_new()
        .kept(),
        optional("transparent_vlan", Type::Bool, "VLAN transparency.")
            .force_new()
            .kept(),
        optional(
            "port_security_enabled",
            Type::Bool,
            "Port security on its ports by default.",
        )
        .kept(),
        optional("mtu", Type::Number, "Its MTU.").kept(),
        optional("dns_domain", Type::String, "Its DNS domain.").kept(),
        optional("qos_policy_id", Type::String, "Its QoS policy.").kept(),
    ];
    attrs.extend(tags());
    attrs.push(crate::common::filled_blocks(
        "segments",
        &[
            ("physical_network", Type::String),
            ("network_type", Type::String),
            ("segmentation_id", Type::Number),
        ],
        true,
        "Its provider segments.",
    ));
    let block = Block::new("A Neutron network.", attrs);
    with_timeouts(block, &["create", "delete"])
}

/// What a network's Read writes.
fn observe_network(os: &crate::common::Os, state: &Obj, n: &J) -> Obj {
    let mut seen = Obj::new();
    seen.insert("id".into(), text(&n["id"]));
    for (attr, key) in [
        ("name", "name"),
        ("description", "description"),
        ("tenant_id", "tenant_id"),
        ("dns_domain", "dns_domain"),
        ("qos_policy_id", "qos_policy_id"),
    ] {
        seen.insert(attr.into(), text(&n[key]));
    }
    for (attr, key) in [
        ("admin_state_up", "admin_state_up"),
        ("shared", "shared"),
        ("external", "router:external"),
        ("transparent_vlan", "vlan_transparent"),
        ("port_security_enabled", "port_security_enabled"),
    ] {
        seen.insert(attr.into(), flag(&n[key]));
    }
    seen.insert("mtu".into(), number(&n["mtu"]));
    seen.insert(
        "availability_zone_hints".into(),
        strings(&n["availability_zone_hints"]),
    );
    let mut segments = Vec::new();
    if [
        "provider:network_type",
        "provider:physical_network",
        "provider:segmentation_id",
    ]
    .iter()
    .any(|k| !n[*k].is_null())
    {
        segments.push(segment(
            &n["provider:physical_network"],
            &n["provider:network_type"],
            &n["provider:segmentation_id"],
        ));
    }
    for seg in n["segments"].as_array().into_iter().flatten() {
        segments.push(segment(
            &seg["provider:physical_network"],
            &seg["provider:network_type"],
            &seg["provider:segmentation_id"],
        ));
    }
    seen.insert("segments".into(), Value::List(segments));
    seen.insert("region".into(), region_of(os, state));
    read_tags(&mut seen, state, &n["tags"]);
    seen
}

fn segment(physical: &J, ty: &J, id: &J) -> Value {
    Value::Map(
        [
            ("physical_network".to_owned(), text(physical)),
            ("network_type".to_owned(), text(ty)),
            ("segmentation_id".to_owned(), number(id)),
        ]
        .into(),
    )
}

/// Waits until a new network or port is out of BUILD (`ACTIVE` or `DOWN`).
async fn settled(
    os: &crate::common::Os,
    kind: &'static str,
    id: &str,
    limit: std::time::Duration,
) -> Outcome<J> {
    let one = kind.trim_end_matches('s');
    wait(&format!("{one} {id} ACTIVE"), limit, || async {
        let Some(doc) = get(
            os,
            Service::Network,
            "network_get",
            &format!("/v2.0/{kind}/{id}"),
        )
        .await?
        else {
            return Err(Diag::new(
                format!("The {one} is gone"),
                format!("{one} {id} was deleted while it was made"),
            ));
        };
        let o = doc[one].clone();
        Ok(matches!(o["status"].as_str(), Some("ACTIVE" | "DOWN")).then_some(o))
    })
    .await
}

pub struct Network;

#[async_trait::async_trait]
impl Resource<Cloud> for Network {
    fn schema(&self) -> Block {
        network_schema()
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let mut body = serde_json::Map::new();
        for k in [
            "name",
            "description",
            "tenant_id",
            "dns_domain",
            "qos_policy_id",
        ] {
            if let Some(v) = string(p, k).filter(|v| !v.is_empty()) {
                body.insert(k.into(), json!(v));
            }
        }
        for k in ["admin_state_up", "shared", "port_security_enabled"] {
            if let Some(v) = boolean(p, k) {
                body.insert(k.into(), json!(v));
            }
        }
        if boolean(p, "external") == Some(true) {
            body.insert("router:external".into(), json!(true));
        }
        if boolean(p, "transparent_vlan") == Some(true) {
            body.insert("vlan_transparent".into(), json!(true));
        }
        if let Some(m) = int(p, "mtu").filter(|m| *m > 0) {
            body.insert("mtu".into(), json!(m));
        }
        let hints = list_of(p, "availability_zone_hints");
        if !hints.is_empty() {
            body.insert("availability_zone_hints".into(), json!(hints));
        }
        let segments: Vec<J> = blocks(p, "segments")
            .iter()
            .map(|seg| {
                let mut o = serde_json::Map::new();
                if let Some(v) = string(seg, "physical_network").filter(|v| !v.is_empty()) {
                    o.insert("provider:physical_network".into(), json!(v));
                }
                if let Some(v) = string(seg, "network_type").filter(|v| !v.is_empty()) {
                    o.insert("provider:network_type".into(), json!(v));
                }
                if let Some(v) = int(seg, "segmentation_id").filter(|v| *v > 0) {
                    o.insert("provider:segmentation_id".into(), json!(v));
                }
                J::Object(o)
            })
            .collect();
        if !segments.is_empty() {
            body.insert("segments".into(), J::Array(segments));
        }
        add_value_specs(p, &mut body);
        let made = call(
            os,
            Service::Network,
            "network_create",
            Method::POST,
            "/v2.0/networks",
            Some(&json!({ "network": body })),
            &[201],
            "create the network",
        )
        .await
        .map_err(|d| (None, d))?;
        let id = made["network"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        let limit = timeout(p, "create", DEFAULT);
        let n = settled(os, "networks", &id, limit)
            .await
            .map_err(|d| (Some(state.clone()), d))?;
        put_tags(os, "networks", &id, p)
            .await
            .map_err(|d| (Some(state.clone()), d))?;
        let n = if list_of(p, "tags").is_empty() {
            n
        } else {
            get(
                os,
                Service::Network,
                "network_get",
                &format!("/v2.0/networks/{id}"),
            )
            .await
            .map_err(|d| (Some(state.clone()), d))?
            .map(|d| d["network"].clone())
            .unwrap_or(n)
        };
        state.extend(observe_network(os, p, &n));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(get(
            os,
            Service::Network,
            "network_get",
            &format!("/v2.0/networks/{id}"),
        )
        .await?
        .map(|d| observe_network(os, state, &d["network"])))
    }

    async fn update(&self, os: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = path_id(prior, "id")?;
        let mut body = serde_json::Map::new();
        for k in ["name", "description", "dns_domain", "qos_policy_id"] {
            if planned.get(k) != prior.get(k) {
                body.insert(k.into(), json!(string(planned, k).unwrap_or_default()));
            }
        }
        for k in ["admin_state_up", "shared", "port_security_enabled"] {
            if planned.get(k) != prior.get(k) {
                if let Some(v) = boolean(planned, k) {
                    body.insert(k.into(), json!(v));
                }
            }
        }
        if planned.get("external") != prior.get("external") {
            body.insert(
                "router:external".into(),
                json!(boolean(planned, "external").unwrap_or(false)),
            );
        }
        if planned.get("mtu") != prior.get("mtu") {
            if let Some(m) = int(planned, "mtu") {
                body.insert("mtu".into(), json!(m));
            }
        }
        neutron_update(
            os,
            "network_update",
            "network",
            "networks",
            &id,
            body,
            prior,
            planned,
        )
        .await?;
        let n = get(
            os,
            Service::Network,
            "network_get",
            &format!("/v2.0/networks/{id}"),
        )
        .await?
        .ok_or_else(|| Diag::new("The network is gone", format!("network {id}")))?;
        let mut state = planned.clone();
        state.extend(observe_network(os, planned, &n["network"]));
        Ok(state)
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        // In use (a port Nova has not released yet): asked again until the timeout.
        let limit = timeout(state, "delete", DEFAULT);
        delete_when_free(
            os,
            "network_delete",
            &format!("/v2.0/networks/{id}"),
            &format!("the network {id}"),
            limit,
        )
        .await
    }
}

/// `data "openstack_networking_network_v2"`: one network by name, id, status, …
pub struct NetworkData;

#[async_trait::async_trait]
impl DataSource<Cloud> for NetworkData {
    fn schema(&self) -> Block {
        Block::new(
            "A Neutron network, found by its attributes.",
            vec![
                id("The network's id."),
                region(),
                optional("network_id", Type::String, "Its id.").kept(),
                optional("name", Type::String, "Its name.").kept(),
                optional("description", Type::String, "Its description.").kept(),
                optional("status", Type::String, "Its status.").kept(),
                optional(
                    "matching_subnet_cidr",
                    Type::String,
                    "A CIDR one of its subnets has.",
                ),
                optional("tenant_id", Type::String, "The owning project.").kept(),
                optional("external", Type::Bool, "An external network.").kept(),
                optional("transparent_vlan", Type::Bool, "VLAN transparency.").kept(),
                optional("mtu", Type::Number, "Its MTU.").kept(),
                optional(
                    "tags",
                    Type::Set(Box::new(Type::String)),
                    "Tags it must carry.",
                ),
                computed(
                    "admin_state_up",
                    Type::String,
                    "Administratively up (\"true\").",
                ),
                computed("shared", Type::String, "Shared (\"true\")."),
                computed(
                    "availability_zone_hints",
                    Type::List(Box::new(Type::String)),
                    "Its availability zone candidates.",
                ),
                computed(
                    "subnets",
                    Type::List(Box::new(Type::String)),
                    "Its subnets' ids.",
                ),
                computed(
                    "all_tags",
                    Type::Set(Box::new(Type::String)),
                    "Every tag it has.",
                ),
                computed("dns_domain", Type::String, "Its DNS domain."),
                computed(
                    "segments",
                    Type::List(Box::new(Type::Object(
                        [
                            ("physical_network".to_owned(), Type::String),
                            ("network_type".to_owned(), Type::String),
                            ("segmentation_id".to_owned(), Type::Number),
                        ]
                        .into(),
                    ))),
                    "Its segments.",
                ),
            ],
        )
    }

    async fn read(&self, os: &Cloud, config: &Obj) -> Outcome<Obj> {
        let mut filters: Vec<(&str, String)> = Vec::new();
        for (attr, key) in [
            ("network_id", "id"),
            ("name", "name"),
            ("description", "description"),
            ("status", "status"),
            ("tenant_id", "tenant_id"),
        ] {
            if let Some(v) = string(config, attr).filter(|v| !v.is_empty()) {
                filters.push((key, v.to_owned()));
            }
        }
        if let Some(e) = boolean(config, "external") {
            filters.push(("router:external", e.to_string()));
        }
        let tags = list_of(config, "tags");
        if !tags.is_empty() {
            filters.push(("tags", tags.join(",")));
        }
        let pairs: Vec<(&str, &str)> = filters.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let doc = call(
            os,
            Service::Network,
            "network_list",
            Method::GET,
            &format!("/v2.0/networks?{}", query(&pairs)),
            None,
            &[200],
            "list networks",
        )
        .await?;
        let mut found: Vec<&J> = doc["networks"].as_array().into_iter().flatten().collect();
        if let Some(cidr) = string(config, "matching_subnet_cidr").filter(|c| !c.is_empty()) {
            let mut keep = Vec::new();
            for n in found {
                for sub in n["subnets"].as_array().into_iter().flatten() {
                    let sid = sub.as_str().unwrap_or_default();
                    if let Some(d) = get(
                        os,
                        Service::Network,
                        "subnet_get",
                        &format!("/v2.0/subnets/{sid}"),
                    )
                    .await?
                    {
                        if d["subnet"]["cidr"].as_str() == Some(cidr) {
                            keep.push(n);
                            break;
                        }
                    }
                }
            }
            found = keep;
        }
        let what = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let n = match found.as_slice() {
            [one] => *one,
            [] => {
                return Err(Diag::new(
                    "No network found",
                    format!("no network matches {what}"),
                ))
            }
            _ => {
                return Err(Diag::new(
                    "More than one network found",
                    format!("{} networks match {what}", found.len()),
                ))
            }
        };
        let mut out = config.clone();
        out.insert("id".into(), text(&n["id"]));
        out.insert("network_id".into(), text(&n["id"]));
        for k in ["name", "description", "status", "tenant_id", "dns_domain"] {
            out.insert(k.into(), text(&n[k]));
        }
        // Upstream writes these as strings ("true"/"false").
        for k in ["admin_state_up", "shared"] {
            out.insert(k.into(), s(n[k].as_bool().unwrap_or(false).to_string()));
        }
        out.insert("external".into(), flag(&n["router:external"]));
        out.insert("transparent_vlan".into(), flag(&n["vlan_transparent"]));
        out.insert("mtu".into(), number(&n["mtu"]));
        out.insert(
            "availability_zone_hints".into(),
            strings(&n["availability_zone_hints"]),
        );
        out.insert("subnets".into(), strings(&n["subnets"]));
        out.insert("all_tags".into(), strings(&n["tags"]));
        out.insert("segments".into(), Value::List(Vec::new()));
        out.insert("region".into(), region_of(os, config));
        Ok(out)
    }
}
