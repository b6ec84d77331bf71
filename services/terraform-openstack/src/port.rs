//! Neutron's ports (`openstack_networking_port_v2`), as terraform-provider-openstack 1.54.1
//! makes and reads them (`resource_openstack_networking_port_v2.go`): a node's NIC with its
//! address, its security groups and the pod network as an allowed address pair.

use http::Method;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    add_value_specs, blocks, call, flag, get, list_of, neutron_update, path_id, put_tags,
    read_tags, region, region_of, strings, tags, text, timeout, value_specs, wait, with_timeouts,
    Cloud, Os,
};
use crate::cty::{Type, Value};
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{boolean, computed, optional, required, s, string, Block, Nesting, Obj};

const DEFAULT: std::time::Duration = std::time::Duration::from_secs(600);

/// The binding a non-admin sees (upstream's Read always writes one).
fn binding(p: &J) -> Value {
    let profile = match &p["binding:profile"] {
        J::Null => String::new(),
        v => v.to_string(),
    };
    let details = crate::common::string_map(&p["binding:vif_details"]);
    Value::List(vec![Value::Map(
        [
            ("host_id".to_owned(), text(&p["binding:host_id"])),
            ("profile".to_owned(), s(profile)),
            ("vif_details".to_owned(), details),
            ("vif_type".to_owned(), text(&p["binding:vif_type"])),
            (
                "vnic_type".to_owned(),
                s(p["binding:vnic_type"].as_str().unwrap_or("normal")),
            ),
        ]
        .into(),
    )])
}

/// What a port's Read writes.
fn observe(os: &Os, state: &Obj, p: &J) -> Obj {
    let mut seen = Obj::new();
    for k in [
        "id",
        "name",
        "description",
        "network_id",
        "mac_address",
        "tenant_id",
        "device_owner",
        "device_id",
        "dns_name",
        "qos_policy_id",
    ] {
        seen.insert(k.into(), text(&p[k]));
    }
    seen.insert("admin_state_up".into(), flag(&p["admin_state_up"]));
    seen.insert(
        "port_security_enabled".into(),
        flag(&p["port_security_enabled"]),
    );
    let ips = p["fixed_ips"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|ip| text(&ip["ip_address"]))
        .collect();
    seen.insert("all_fixed_ips".into(), Value::List(ips));
    seen.insert(
        "all_security_group_ids".into(),
        strings(&p["security_groups"]),
    );
    let own_mac = p["mac_address"].as_str().unwrap_or_default();
    let pairs = p["allowed_address_pairs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|pair| {
            let mac = pair["mac_address"].as_str().unwrap_or_default();
            Value::Map(
                [
                    ("ip_address".to_owned(), text(&pair["ip_address"])),
                    // Written only where it is not the port's own (upstream's Read).
                    (
                        "mac_address".to_owned(),
                        s(if mac == own_mac { "" } else { mac }),
                    ),
                ]
                .into(),
            )
        })
        .collect();
    seen.insert("allowed_address_pairs".into(), Value::List(pairs));
    let dhcp = p["extra_dhcp_opts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            Value::Map(
                [
                    (
                        "ip_version".to_owned(),
                        crate::common::number(&o["ip_version"]),
                    ),
                    ("name".to_owned(), text(&o["opt_name"])),
                    ("value".to_owned(), text(&o["opt_value"])),
                ]
                .into(),
            )
        })
        .collect();
    seen.insert("extra_dhcp_option".into(), Value::List(dhcp));
    seen.insert("binding".into(), binding(p));
    let dns = p["dns_assignment"]
        .as_array()
        .into_iter()
        .flatten()
        .map(crate::common::string_map)
        .collect();
    seen.insert("dns_assignment".into(), Value::List(dns));
    seen.insert("region".into(), region_of(os, state));
    read_tags(&mut seen, state, &p["tags"]);
    seen
}

pub struct Port;

#[async_trait::async_trait]
impl Resource<Cloud> for Port {
    fn schema(&self) -> Block {
        let mut attrs = vec![
            crate::schema::id("The port's id."),
            region(),
            optional("name", Type::String, "Its name.").kept(),
            optional("description", Type::String, "Its description.").kept(),
            required("network_id", Type::String, "Its network.").force_new(),
            optional("admin_state_up", Type::Bool, "Administratively up.").kept(),
            optional("mac_address", Type::String, "Its MAC.")
                .force_new()
                .kept(),
            optional("tenant_id", Type::String, "The owning project.")
                .force_new()
                .kept(),
            optional("device_owner", Type::String, "What owns it.")
                .force_new()
                .kept(),
            optional(
                "security_group_ids",
                Type::Set(Box::new(Type::String)),
                "Its security groups (left out: the project's default).",
            ),
            optional(
                "no_security_groups",
                Type::Bool,
                "No security group at all.",
            ),
            optional("device_id", Type::String, "The device it is plugged into.")
                .force_new()
                .kept(),
            optional("no_fixed_ip", Type::Bool, "No address."),
            value_specs(),
            computed(
                "all_fixed_ips",
                Type::List(Box::new(Type::String)),
                "Its addresses.",
            ),
            computed(
                "all_security_group_ids",
                Type::Set(Box::new(Type::String)),
                "Its security groups.",
            ),
            optional("port_security_enabled", Type::Bool, "Port security on.").kept(),
            optional("dns_name", Type::String, "Its DNS name.").kept(),
            computed(
                "dns_assignment",
                Type::List(Box::new(Type::Map(Box::new(Type::String)))),
                "Its DNS assignment.",
            ),
            optional("qos_policy_id", Type::String, "Its QoS policy.").kept(),
        ];
        attrs.extend(tags());
        attrs.push(crate::common::filled_blocks(
            "binding",
            &[
                ("host_id", Type::String),
                ("profile", Type::String),
                ("vif_details", Type::Map(Box::new(Type::String))),
                ("vif_type", Type::String),
                ("vnic_type", Type::String),
            ],
            false,
            "Its binding (host, profile, vNIC type).",
        ));
        let block = Block::new("A Neutron port.", attrs)
            .with_nesting(
                "fixed_ip",
                Block::new(
                    "An address it takes.",
                    vec![
                        required("subnet_id", Type::String, "The subnet."),
                        optional("ip_address", Type::String, "The address."),
                    ],
                ),
                false,
                Nesting::List,
            )
            .with_nesting(
                "allowed_address_pairs",
                Block::new(
                    "An address (or CIDR) it may also send from.",
                    vec![
                        required("ip_address", Type::String, "The address or CIDR."),
                        optional("mac_address", Type::String, "The MAC."),
                    ],
                ),
                false,
                Nesting::Set,
            )
            .with_nesting(
                "extra_dhcp_option",
                Block::new(
                    "A DHCP option.",
                    vec![
                        required("name", Type::String, "Its name."),
                        required("value", Type::String, "Its value."),
                        optional("ip_version", Type::Number, "4 or 6.")
                            .default(crate::schema::n(4)),
                    ],
                ),
                false,
                Nesting::Set,
            );
        with_timeouts(block, &["create", "delete"])
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        if boolean(c, "no_security_groups") == Some(true)
            && !list_of(c, "security_group_ids").is_empty()
        {
            out.push(Diag::at(
                "no_security_groups",
                "Cannot have both no_security_groups and security_group_ids set",
                "",
            ));
        }
        if boolean(c, "no_fixed_ip") == Some(true) && !blocks(c, "fixed_ip").is_empty() {
            out.push(Diag::at(
                "no_fixed_ip",
                "Cannot have both no_fixed_ip and fixed_ip set",
                "",
            ));
        }
        out
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let mut body = serde_json::Map::new();
        for k in [
            "network_id",
            "name",
            "description",
            "mac_address",
            "tenant_id",
            "device_owner",
            "device_id",
            "dns_name",
            "qos_policy_id",
        ] {
            if let Some(v) = string(p, k).filter(|v| !v.is_empty()) {
                body.insert(k.into(), json!(v));
            }
        }
        let fixed: Vec<J> = blocks(p, "fixed_ip")
            .iter()
            .map(|ip| {
                let mut o = serde_json::Map::new();
                o.insert("subnet_id".into(), json!(string(ip, "subnet_id")));
                if let Some(v) = string(ip, "ip_address").filter(|v| !v.is_empty()) {
                    o.insert("ip_address".into(), json!(v));
                }
                J::Object(o)
            })
            .collect();
        if boolean(p, "no_fixed_ip") == Some(true) {
            body.insert("fixed_ips".into(), json!([]));
        } else if !fixed.is_empty() {
            body.insert("fixed_ips".into(), J::Array(fixed));
        }
        let pairs: Vec<J> = blocks(p, "allowed_address_pairs")
            .iter()
            .map(|pair| {
                let mut o = serde_json::Map::new();
                o.insert("ip_address".into(), json!(string(pair, "ip_address")));
                if let Some(v) = string(pair, "mac_address").filter(|v| !v.is_empty()) {
                    o.insert("mac_address".into(), json!(v));
                }
                J::Object(o)
            })
            .collect();
        if !pairs.is_empty() {
            body.insert("allowed_address_pairs".into(), J::Array(pairs));
        }
        if let Some(v) = boolean(p, "admin_state_up") {
            body.insert("admin_state_up".into(), json!(v));
        }
        let groups = list_of(p, "security_group_ids");
        if boolean(p, "no_security_groups") == Some(true) {
            body.insert("security_groups".into(), json!([]));
        } else if !groups.is_empty() {
            body.insert("security_groups".into(), json!(groups));
        }
        let dhcp: Vec<J> = blocks(p, "extra_dhcp_option")
            .iter()
            .map(|o| {
                json!({"opt_name": string(o, "name"), "opt_value": string(o, "value"),
                "ip_version": crate::schema::int(o, "ip_version").unwrap_or(4)})
            })
            .collect();
        if !dhcp.is_empty() {
            body.insert("extra_dhcp_opts".into(), J::Array(dhcp));
        }
        if let Some(v) = boolean(p, "port_security_enabled") {
            body.insert("port_security_enabled".into(), json!(v));
        }
        if let Some(b) = blocks(p, "binding").first() {
            for (attr, key) in [
                ("host_id", "binding:host_id"),
                ("vnic_type", "binding:vnic_type"),
            ] {
                if let Some(v) = string(b, attr).filter(|v| !v.is_empty()) {
                    body.insert(key.into(), json!(v));
                }
            }
            if let Some(profile) = string(b, "profile").filter(|v| !v.is_empty()) {
                let parsed: J = serde_json::from_str(profile).map_err(|e| {
                    (
                        None,
                        Diag::at("binding", "binding's profile is not JSON", e.to_string()),
                    )
                })?;
                body.insert("binding:profile".into(), parsed);
            }
        }
        add_value_specs(p, &mut body);
        let made = call(
            os,
            Service::Network,
            "port_create",
            Method::POST,
            "/v2.0/ports",
            Some(&json!({ "port": body })),
            &[201],
            "create the port",
        )
        .await
        .map_err(|d| (None, d))?;
        let id = made["port"]["id"].as_str().unwrap_or_default().to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        let fail = |d| (Some(state.clone()), d);
        let limit = timeout(p, "create", DEFAULT);
        wait(&format!("port {id} ACTIVE or DOWN"), limit, || async {
            let Some(doc) = get(
                os,
                Service::Network,
                "port_get",
                &format!("/v2.0/ports/{id}"),
            )
            .await?
            else {
                return Err(Diag::new(
                    "The port is gone",
                    format!("port {id} was deleted while it was made"),
                ));
            };
            Ok(matches!(doc["port"]["status"].as_str(), Some("ACTIVE" | "DOWN")).then_some(()))
        })
        .await
        .map_err(fail)?;
        put_tags(os, "ports", &id, p).await.map_err(fail)?;
        let doc = get(
            os,
            Service::Network,
            "port_get",
            &format!("/v2.0/ports/{id}"),
        )
        .await
        .map_err(fail)?
        .ok_or_else(|| fail(Diag::new("The port is gone", format!("port {id}"))))?;
        state.extend(observe(os, p, &doc["port"]));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(get(
            os,
            Service::Network,
            "port_get",
            &format!("/v2.0/ports/{id}"),
        )
        .await?
        .map(|d| observe(os, state, &d["port"])))
    }

    async fn update(&self, os: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = path_id(prior, "id")?;
        let mut body = serde_json::Map::new();
        for k in ["name", "description", "dns_name", "qos_policy_id"] {
            if planned.get(k) != prior.get(k) {
                body.insert(k.into(), json!(string(planned, k).unwrap_or_default()));
            }
        }
        for k in ["admin_state_up", "port_security_enabled"] {
            if planned.get(k) != prior.get(k) {
                if let Some(v) = boolean(planned, k) {
                    body.insert(k.into(), json!(v));
                }
            }
        }
        if planned.get("security_group_ids") != prior.get("security_group_ids")
            || planned.get("no_security_groups") != prior.get("no_security_groups")
        {
            let groups = if boolean(planned, "no_security_groups") == Some(true) {
                Vec::new()
            } else {
                list_of(planned, "security_group_ids")
            };
            body.insert("security_groups".into(), json!(groups));
        }
        if planned.get("allowed_address_pairs") != prior.get("allowed_address_pairs") {
            let pairs: Vec<J> = blocks(planned, "allowed_address_pairs")
                .iter()
                .map(|pair| {
                    let mut o = serde_json::Map::new();
                    o.insert("ip_address".into(), json!(string(pair, "ip_address")));
                    if let Some(v) = string(pair, "mac_address").filter(|v| !v.is_empty()) {
                        o.insert("mac_address".into(), json!(v));
                    }
                    J::Object(o)
                })
                .collect();
            body.insert("allowed_address_pairs".into(), J::Array(pairs));
        }
        if planned.get("fixed_ip") != prior.get("fixed_ip")
            && !blocks(planned, "fixed_ip").is_empty()
        {
            let fixed: Vec<J> = blocks(planned, "fixed_ip")
                .iter()
                .map(|ip| {
                    let mut o = serde_json::Map::new();
                    o.insert("subnet_id".into(), json!(string(ip, "subnet_id")));
                    if let Some(v) = string(ip, "ip_address").filter(|v| !v.is_empty()) {
                        o.insert("ip_address".into(), json!(v));
                    }
                    J::Object(o)
                })
                .collect();
            body.insert("fixed_ips".into(), J::Array(fixed));
        }
        neutron_update(
            os,
            "port_update",
            "port",
            "ports",
            &id,
            body,
            prior,
            planned,
        )
        .await?;
        let doc = get(
            os,
            Service::Network,
            "port_get",
            &format!("/v2.0/ports/{id}"),
        )
        .await?
        .ok_or_else(|| Diag::new("The port is gone", format!("port {id}")))?;
        let mut state = planned.clone();
        state.extend(observe(os, planned, &doc["port"]));
        Ok(state)
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        crate::common::delete(
            os,
            Service::Network,
            "port_delete",
            &format!("/v2.0/ports/{id}"),
        )
        .await?;
        let limit = timeout(state, "delete", DEFAULT);
        wait(&format!("port {id} deleted"), limit, || async {
            Ok(get(
                os,
                Service::Network,
                "port_get",
                &format!("/v2.0/ports/{id}"),
            )
            .await?
            .is_none()
            .then_some(()))
        })
        .await
    }
}
