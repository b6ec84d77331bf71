//! Neutron's subnets (`openstack_networking_subnet_v2` and its data source), with
//! terraform-provider-openstack 1.54.1's attributes and what its Read writes
//! (`resource_openstack_networking_subnet_v2.go` at v1.54.1).

use http::Method;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    add_value_specs, blocks, call, delete_when_free, flag, get, list_of, neutron_update, number,
    path_id, put_tags, query, read_tags, region, region_of, strings, tags, text, timeout,
    value_specs, with_timeouts, Cloud,
};
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome, Resource};
use crate::schema::{
    boolean, computed, id, int, optional, required, s, string, Block, Nesting, Obj,
};

const DEFAULT: std::time::Duration = std::time::Duration::from_secs(600);

fn subnet_schema() -> Block {
    let mut attrs = vec![
        id("The subnet's id."),
        region(),
        required("network_id", Type::String, "Its network.").force_new(),
        optional("cidr", Type::String, "Its CIDR (canonical).")
            .force_new()
            .kept(),
        optional(
            "prefix_length",
            Type::Number,
            "A prefix length from its subnet pool.",
        )
        .force_new(),
        optional("name", Type::String, "Its name.").kept(),
        optional("description", Type::String, "Its description.").kept(),
        optional("tenant_id", Type::String, "The owning project.")
            .force_new()
            .kept(),
        optional("gateway_ip", Type::String, "Its gateway.").kept(),
        optional("no_gateway", Type::Bool, "No gateway.").default(Value::Bool(false)),
        optional("ip_version", Type::Number, "4 or 6.")
            .force_new()
            .default(crate::schema::n(4)),
        optional("enable_dhcp", Type::Bool, "DHCP on.").default(Value::Bool(true)),
        optional(
            "dns_nameservers",
            Type::List(Box::new(Type::String)),
            "Its DNS servers.",
        )
        .kept(),
        optional(
            "ipv6_address_mode",
            Type::String,
            "slaac, dhcpv6-stateful, dhcpv6-stateless.",
        )
        .force_new()
        .kept(),
        optional(
            "ipv6_ra_mode",
            Type::String,
            "The same for router advertisements.",
        )
        .force_new()
        .kept(),
        optional("subnetpool_id", Type::String, "Its subnet pool.")
            .force_new()
            .kept(),
        value_specs(),
        optional(
            "service_types",
            Type::List(Box::new(Type::String)),
            "Its service types.",
        )
        .kept(),
    ];
    attrs.extend(tags());
    let pool = [("start", Type::String), ("end", Type::String)];
    // `allocation_pools` is deprecated upstream and kept for states that hold it; the Read
    // writes both.
    attrs.push(crate::common::filled_blocks(
        "allocation_pools",
        &pool,
        false,
        "Its allocation pools (deprecated).",
    ));
    attrs.push(crate::common::filled_blocks(
        "allocation_pool",
        &pool,
        true,
        "Its allocation pools: the first and last address of each.",
    ));
    let block = Block::new("A Neutron subnet.", attrs).with_nesting(
        "host_routes",
        Block::new(
            "A host route.",
            vec![
                required("destination_cidr", Type::String, "Its destination."),
                required("next_hop", Type::String, "Its next hop."),
            ],
        ),
        false,
        Nesting::List,
    );
    with_timeouts(block, &["create", "delete"])
}

/// What a subnet's Read writes.
fn observe_subnet(os: &crate::common::Os, state: &Obj, n: &J) -> Obj {
    let mut seen = Obj::new();
    for k in [
        "id",
        "network_id",
        "cidr",
        "name",
        "description",
        "tenant_id",
        "ipv6_address_mode",
        "ipv6_ra_mode",
        "gateway_ip",
    ] {
        seen.insert(k.into(), text(&n[k]));
    }
    seen.insert("subnetpool_id".into(), text(&n["subnetpool_id"]));
    seen.insert("ip_version".into(), number(&n["ip_version"]));
    seen.insert("enable_dhcp".into(), flag(&n["enable_dhcp"]));
    seen.insert("dns_nameservers".into(), strings(&n["dns_nameservers"]));
    seen.insert("service_types".into(), strings(&n["service_types"]));
    seen.insert(
        "no_gateway".into(),
        Value::Bool(n["gateway_ip"].as_str().unwrap_or_default().is_empty()),
    );
    let pools: Vec<Value> = n["allocation_pools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            Value::Map(
                [
                    ("start".to_owned(), text(&p["start"])),
                    ("end".to_owned(), text(&p["end"])),
                ]
                .into(),
            )
        })
        .collect();
    seen.insert("allocation_pools".into(), Value::List(pools.clone()));
    seen.insert("allocation_pool".into(), Value::List(pools));
    seen.insert("region".into(), region_of(os, state));
    read_tags(&mut seen, state, &n["tags"]);
    seen
}

/// A canonical CIDR (`10.0.0.0/24`, not `10.0.0.1/24`), as upstream checks it before
/// sending (Neutron would store the network's address).
fn canonical(cidr: &str) -> bool {
    let Some((addr, len)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(ip), Ok(len)) = (addr.parse::<std::net::Ipv4Addr>(), len.parse::<u32>()) else {
        // IPv6: taken as given.
        return cidr.contains(':');
    };
    if len > 32 {
        return false;
    }
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(ip) & !mask == 0
}

pub struct Subnet;

#[async_trait::async_trait]
impl Resource<Cloud> for Subnet {
    fn schema(&self) -> Block {
        subnet_schema()
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        if let Some(cidr) = string(c, "cidr").filter(|c| !c.is_empty()) {
            if !canonical(cidr) {
                out.push(Diag::at(
                    "cidr",
                    "cidr is not a subnet's address",
                    format!("{cidr:?}: write the network's address (10.0.0.0/24)"),
                ));
            }
        }
        if let Some(v) = int(c, "ip_version").filter(|v| *v != 4 && *v != 6) {
            out.push(Diag::at(
                "ip_version",
                "ip_version is 4 or 6",
                v.to_string(),
            ));
        }
        let dns = list_of(c, "dns_nameservers");
        let mut unique = dns.clone();
        unique.sort();
        unique.dedup();
        if unique.len() != dns.len() {
            out.push(Diag::at(
                "dns_nameservers",
                "dns_nameservers must be unique",
                dns.join(", "),
            ));
        }
        out
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let mut body = serde_json::Map::new();
        for k in [
            "network_id",
            "cidr",
            "name",
            "description",
            "tenant_id",
            "ipv6_address_mode",
            "ipv6_ra_mode",
            "subnetpool_id",
        ] {
            if let Some(v) = string(p, k).filter(|v| !v.is_empty()) {
                body.insert(k.into(), json!(v));
            }
        }
        let pools: Vec<J> = {
            let set = blocks(p, "allocation_pool");
            let chosen = if set.is_empty() {
                blocks(p, "allocation_pools")
            } else {
                set
            };
            chosen
                .iter()
                .map(|b| json!({"start": string(b, "start"), "end": string(b, "end")}))
                .collect()
        };
        if !pools.is_empty() {
            body.insert("allocation_pools".into(), J::Array(pools));
        }
        if boolean(p, "no_gateway") == Some(true) {
            body.insert("gateway_ip".into(), J::Null);
        } else if let Some(g) = string(p, "gateway_ip").filter(|g| !g.is_empty()) {
            body.insert("gateway_ip".into(), json!(g));
        }
        body.insert(
            "ip_version".into(),
            json!(int(p, "ip_version").unwrap_or(4)),
        );
        body.insert(
            "enable_dhcp".into(),
            json!(boolean(p, "enable_dhcp").unwrap_or(true)),
        );
        let dns = list_of(p, "dns_nameservers");
        if !dns.is_empty() {
            body.insert("dns_nameservers".into(), json!(dns));
        }
        let services = list_of(p, "service_types");
        if !services.is_empty() {
            body.insert("service_types".into(), json!(services));
        }
        let routes: Vec<J> = blocks(p, "host_routes")
            .iter()
            .map(|r| json!({"destination": string(r, "destination_cidr"), "nexthop": string(r, "next_hop")}))
            .collect();
        if !routes.is_empty() {
            body.insert("host_routes".into(), J::Array(routes));
        }
        if let Some(l) = int(p, "prefix_length") {
            body.insert("prefixlen".into(), json!(l));
        }
        add_value_specs(p, &mut body);
        let made = call(
            os,
            Service::Network,
            "subnet_create",
            Method::POST,
            "/v2.0/subnets",
            Some(&json!({ "subnet": body })),
            &[201],
            "create the subnet",
        )
        .await
        .map_err(|d| (None, d))?;
        let id = made["subnet"]["id"].as_str().unwrap_or_default().to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        put_tags(os, "subnets", &id, p)
            .await
            .map_err(|d| (Some(state.clone()), d))?;
        let n = get(
            os,
            Service::Network,
            "subnet_get",
            &format!("/v2.0/subnets/{id}"),
        )
        .await
        .map_err(|d| (Some(state.clone()), d))?
        .ok_or_else(|| {
            (
                Some(state.clone()),
                Diag::new(
                    "The subnet is gone",
                    format!("subnet {id} vanished after its create"),
                ),
            )
        })?;
        state.extend(observe_subnet(os, p, &n["subnet"]));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(get(
            os,
            Service::Network,
            "subnet_get",
            &format!("/v2.0/subnets/{id}"),
        )
        .await?
        .map(|d| observe_subnet(os, state, &d["subnet"])))
    }

    async fn update(&self, os: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = path_id(prior, "id")?;
        let mut body = serde_json::Map::new();
        for k in ["name", "description"] {
            if planned.get(k) != prior.get(k) {
                body.insert(k.into(), json!(string(planned, k).unwrap_or_default()));
            }
        }
        if planned.get("gateway_ip") != prior.get("gateway_ip")
            || planned.get("no_gateway") != prior.get("no_gateway")
        {
            if boolean(planned, "no_gateway") == Some(true) {
                body.insert("gateway_ip".into(), J::Null);
            } else if let Some(g) = string(planned, "gateway_ip") {
                body.insert("gateway_ip".into(), json!(g));
            }
        }
        if planned.get("enable_dhcp") != prior.get("enable_dhcp") {
            body.insert(
                "enable_dhcp".into(),
                json!(boolean(planned, "enable_dhcp").unwrap_or(true)),
            );
        }
        if planned.get("dns_nameservers") != prior.get("dns_nameservers") {
            body.insert(
                "dns_nameservers".into(),
                json!(list_of(planned, "dns_nameservers")),
            );
        }
        if planned.get("allocation_pool") != prior.get("allocation_pool")
            || planned.get("allocation_pools") != prior.get("allocation_pools")
        {
            let set = blocks(planned, "allocation_pool");
            let chosen = if set.is_empty() {
                blocks(planned, "allocation_pools")
            } else {
                set
            };
            let pools: Vec<J> = chosen
                .iter()
                .map(|b| json!({"start": string(b, "start"), "end": string(b, "end")}))
                .collect();
            body.insert("allocation_pools".into(), J::Array(pools));
        }
        neutron_update(
            os,
            "subnet_update",
            "subnet",
            "subnets",
            &id,
            body,
            prior,
            planned,
        )
        .await?;
        let n = get(
            os,
            Service::Network,
            "subnet_get",
            &format!("/v2.0/subnets/{id}"),
        )
        .await?
        .ok_or_else(|| Diag::new("The subnet is gone", format!("subnet {id}")))?;
        let mut state = planned.clone();
        state.extend(observe_subnet(os, planned, &n["subnet"]));
        Ok(state)
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        // In use (a port not yet released): asked again until the timeout, as upstream.
        let limit = timeout(state, "delete", DEFAULT);
        delete_when_free(
            os,
            "subnet_delete",
            &format!("/v2.0/subnets/{id}"),
            &format!("the subnet {id}"),
            limit,
        )
        .await
    }
}

/// `data "openstack_networking_subnet_v2"`: one subnet by name, network, CIDR, …
pub struct SubnetData;

#[async_trait::async_trait]
impl DataSource<Cloud> for SubnetData {
    fn schema(&self) -> Block {
        let pools = Type::List(Box::new(Type::Object(
            [
                ("start".to_owned(), Type::String),
                ("end".to_owned(), Type::String),
            ]
            .into(),
        )));
        Block::new(
            "A Neutron subnet, found by its attributes.",
            vec![
                id("The subnet's id."),
                region(),
                optional("name", Type::String, "Its name.").kept(),
                optional("description", Type::String, "Its description.").kept(),
                optional("dhcp_enabled", Type::Bool, "DHCP on."),
                optional("network_id", Type::String, "Its network.").kept(),
                optional("tenant_id", Type::String, "The owning project.").kept(),
                optional("ip_version", Type::Number, "4 or 6.").kept(),
                optional("gateway_ip", Type::String, "Its gateway.").kept(),
                optional("cidr", Type::String, "Its CIDR.").kept(),
                optional("ipv6_address_mode", Type::String, "IPv6 address mode.").kept(),
                optional("ipv6_ra_mode", Type::String, "IPv6 RA mode.").kept(),
                optional("subnetpool_id", Type::String, "Its subnet pool.").kept(),
                optional("subnet_id", Type::String, "Its id.").kept(),
                optional(
                    "tags",
                    Type::Set(Box::new(Type::String)),
                    "Tags it must carry.",
                ),
                computed("enable_dhcp", Type::Bool, "DHCP on."),
                computed("allocation_pools", pools, "Its allocation pools."),
                computed(
                    "dns_nameservers",
                    Type::List(Box::new(Type::String)),
                    "Its DNS servers.",
                ),
                computed(
                    "host_routes",
                    Type::List(Box::new(Type::Object(
                        [
                            ("destination_cidr".to_owned(), Type::String),
                            ("next_hop".to_owned(), Type::String),
                        ]
                        .into(),
                    ))),
                    "Its host routes.",
                ),
                computed(
                    "service_types",
                    Type::List(Box::new(Type::String)),
                    "Its service types.",
                ),
                computed(
                    "all_tags",
                    Type::Set(Box::new(Type::String)),
                    "Every tag it has.",
                ),
            ],
        )
    }

    async fn read(&self, os: &Cloud, config: &Obj) -> Outcome<Obj> {
        let mut filters: Vec<(&str, String)> = Vec::new();
        for (attr, key) in [
            ("name", "name"),
            ("description", "description"),
            ("network_id", "network_id"),
            ("tenant_id", "tenant_id"),
            ("gateway_ip", "gateway_ip"),
            ("cidr", "cidr"),
            ("ipv6_address_mode", "ipv6_address_mode"),
            ("ipv6_ra_mode", "ipv6_ra_mode"),
            ("subnetpool_id", "subnetpool_id"),
            ("subnet_id", "id"),
        ] {
            if let Some(v) = string(config, attr).filter(|v| !v.is_empty()) {
                filters.push((key, v.to_owned()));
            }
        }
        if let Some(v) = int(config, "ip_version") {
            filters.push(("ip_version", v.to_string()));
        }
        if let Some(v) = boolean(config, "dhcp_enabled") {
            filters.push(("enable_dhcp", v.to_string()));
        }
        let pairs: Vec<(&str, &str)> = filters.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let doc = call(
            os,
            Service::Network,
            "subnet_list",
            Method::GET,
            &format!("/v2.0/subnets?{}", query(&pairs)),
            None,
            &[200],
            "list subnets",
        )
        .await?;
        let found: Vec<&J> = doc["subnets"].as_array().into_iter().flatten().collect();
        let what = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let n = match found.as_slice() {
            [one] => *one,
            [] => {
                return Err(Diag::new(
                    "No subnet found",
                    format!("no subnet matches {what}"),
                ))
            }
            _ => {
                return Err(Diag::new(
                    "More than one subnet found",
                    format!("{} subnets match {what}", found.len()),
                ))
            }
        };
        let mut out = config.clone();
        for k in [
            "id",
            "name",
            "description",
            "network_id",
            "tenant_id",
            "gateway_ip",
            "cidr",
            "ipv6_address_mode",
            "ipv6_ra_mode",
            "subnetpool_id",
        ] {
            out.insert(k.into(), text(&n[k]));
        }
        out.insert("subnet_id".into(), text(&n["id"]));
        out.insert("ip_version".into(), number(&n["ip_version"]));
        out.insert("enable_dhcp".into(), flag(&n["enable_dhcp"]));
        out.insert("dns_nameservers".into(), strings(&n["dns_nameservers"]));
        out.insert("service_types".into(), strings(&n["service_types"]));
        out.insert("all_tags".into(), strings(&n["tags"]));
        let pools = n["allocation_pools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                Value::Map(
                    [
                        ("start".to_owned(), text(&p["start"])),
                        ("end".to_owned(), text(&p["end"])),
                    ]
                    .into(),
                )
            })
            .collect();
        out.insert("allocation_pools".into(), Value::List(pools));
        let routes = n["host_routes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                Value::Map(
                    [
                        ("destination_cidr".to_owned(), text(&r["destination"])),
                        ("next_hop".to_owned(), text(&r["nexthop"])),
                    ]
                    .into(),
                )
            })
            .collect();
        out.insert("host_routes".into(), Value::List(routes));
        out.insert("region".into(), region_of(os, config));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cidr_is_canonical_only_as_the_network_s_address() {
        assert!(canonical("10.0.0.0/24"));
        assert!(canonical("0.0.0.0/0"));
        assert!(!canonical("10.0.0.1/24"));
        assert!(!canonical("10.0.0.0"));
        assert!(!canonical("10.0.0.0/33"));
        assert!(canonical("fd00::/64"));
    }
}
