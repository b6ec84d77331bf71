//! Neutron's routers and their interfaces (`openstack_networking_router_v2`,
//! `openstack_networking_router_interface_v2`), as terraform-provider-openstack 1.54.1
//! makes and reads them (`resource_openstack_networking_router{,_interface}_v2.go`).

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
use crate::schema::{boolean, optional, required, s, string, Block, Nesting, Obj};

const DEFAULT: std::time::Duration = std::time::Duration::from_secs(600);

fn router_schema() -> Block {
    let mut attrs = vec![
        crate::schema::id("The router's id."),
        region(),
        optional("name", Type::String, "Its name.").kept(),
        optional("description", Type::String, "Its description.").kept(),
        optional("admin_state_up", Type::Bool, "Administratively up.").kept(),
        optional("distributed", Type::Bool, "A distributed router.")
            .force_new()
            .kept(),
        // Deprecated upstream ("use external_network_id"); the Read writes both.
        optional("external_gateway", Type::String, "Its external network.").kept(),
        optional("external_network_id", Type::String, "Its external network.").kept(),
        optional("enable_snat", Type::Bool, "SNAT on its gateway.").kept(),
        optional(
            "external_subnet_ids",
            Type::List(Box::new(Type::String)),
            "Subnets of the external network to try for its gateway.",
        ),
        optional("tenant_id", Type::String, "The owning project.")
            .force_new()
            .kept(),
        value_specs(),
        optional(
            "availability_zone_hints",
            Type::List(Box::new(Type::String)),
            "Availability zone candidates.",
        )
        .force_new()
        .kept(),
    ];
    attrs.extend(tags());
    attrs.push(crate::common::filled_blocks(
        "external_fixed_ip",
        &[("subnet_id", Type::String), ("ip_address", Type::String)],
        false,
        "The addresses of its gateway.",
    ));
    let block = Block::new("A Neutron router.", attrs).with_nesting(
        "vendor_options",
        Block::new(
            "Options of this provider.",
            vec![optional(
                "set_router_gateway_after_create",
                Type::Bool,
                "Set the gateway in a second call.",
            )
            .default(Value::Bool(false))],
        ),
        false,
        Nesting::Set,
    );
    with_timeouts(block, &["create", "delete"])
}

/// What a router's Read writes.
fn observe(os: &Os, state: &Obj, r: &J) -> Obj {
    let mut seen = Obj::new();
    for k in ["id", "name", "description", "tenant_id"] {
        seen.insert(k.into(), text(&r[k]));
    }
    seen.insert("admin_state_up".into(), flag(&r["admin_state_up"]));
    seen.insert("distributed".into(), flag(&r["distributed"]));
    let gw = &r["external_gateway_info"];
    seen.insert("external_gateway".into(), text(&gw["network_id"]));
    seen.insert("external_network_id".into(), text(&gw["network_id"]));
    seen.insert("enable_snat".into(), flag(&gw["enable_snat"]));
    let ips = gw["external_fixed_ips"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|ip| {
            Value::Map(
                [
                    ("subnet_id".to_owned(), text(&ip["subnet_id"])),
                    ("ip_address".to_owned(), text(&ip["ip_address"])),
                ]
                .into(),
            )
        })
        .collect();
    seen.insert("external_fixed_ip".into(), Value::List(ips));
    seen.insert(
        "availability_zone_hints".into(),
        strings(&r["availability_zone_hints"]),
    );
    seen.insert("region".into(), region_of(os, state));
    read_tags(&mut seen, state, &r["tags"]);
    seen
}

/// The gateway a router is planned with (`None` without an external network).
fn gateway(p: &Obj) -> Option<J> {
    let network = string(p, "external_network_id")
        .filter(|v| !v.is_empty())
        .or_else(|| string(p, "external_gateway").filter(|v| !v.is_empty()))?;
    let mut gw = serde_json::Map::new();
    gw.insert("network_id".into(), json!(network));
    if let Some(snat) = boolean(p, "enable_snat") {
        gw.insert("enable_snat".into(), json!(snat));
    }
    let ips: Vec<J> = blocks(p, "external_fixed_ip")
        .iter()
        .map(|ip| {
            let mut o = serde_json::Map::new();
            if let Some(v) = string(ip, "subnet_id").filter(|v| !v.is_empty()) {
                o.insert("subnet_id".into(), json!(v));
            }
            if let Some(v) = string(ip, "ip_address").filter(|v| !v.is_empty()) {
                o.insert("ip_address".into(), json!(v));
            }
            J::Object(o)
        })
        .collect();
    if !ips.is_empty() {
        gw.insert("external_fixed_ips".into(), J::Array(ips));
    }
    Some(J::Object(gw))
}

async fn read_router(os: &Os, id: &str) -> Outcome<Option<J>> {
    Ok(get(
        os,
        Service::Network,
        "router_get",
        &format!("/v2.0/routers/{id}"),
    )
    .await?
    .map(|d| d["router"].clone()))
}

pub struct Router;

#[async_trait::async_trait]
impl Resource<Cloud> for Router {
    fn schema(&self) -> Block {
        router_schema()
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let has_network = ["external_network_id", "external_gateway"]
            .iter()
            .any(|k| string(c, k).is_some_and(|v| !v.is_empty()));
        if boolean(c, "enable_snat").is_some()
            && !has_network
            && !matches!(c.get("external_network_id"), Some(Value::Unknown))
        {
            return vec![Diag::at(
                "enable_snat",
                "enable_snat needs an external network",
                "setting enable_snat requires external_network_id to be set",
            )];
        }
        Vec::new()
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let mut body = serde_json::Map::new();
        for k in ["name", "description", "tenant_id"] {
            if let Some(v) = string(p, k).filter(|v| !v.is_empty()) {
                body.insert(k.into(), json!(v));
            }
        }
        let hints = list_of(p, "availability_zone_hints");
        if !hints.is_empty() {
            body.insert("availability_zone_hints".into(), json!(hints));
        }
        if boolean(p, "admin_state_up") == Some(true) {
            body.insert("admin_state_up".into(), json!(true));
        }
        if let Some(d) = boolean(p, "distributed") {
            body.insert("distributed".into(), json!(d));
        }
        let after = blocks(p, "vendor_options")
            .first()
            .and_then(|v| boolean(v, "set_router_gateway_after_create"))
            .unwrap_or(false);
        let gw = gateway(p);
        if let Some(gw) = gw.clone().filter(|_| !after) {
            body.insert("external_gateway_info".into(), gw);
        }
        add_value_specs(p, &mut body);
        let made = call(
            os,
            Service::Network,
            "router_create",
            Method::POST,
            "/v2.0/routers",
            Some(&json!({ "router": body })),
            &[201],
            "create the router",
        )
        .await
        .map_err(|d| (None, d))?;
        let id = made["router"]["id"].as_str().unwrap_or_default().to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        let fail = |d| (Some(state.clone()), d);
        if let Some(gw) = gw.filter(|_| after) {
            call(
                os,
                Service::Network,
                "router_update",
                Method::PUT,
                &format!("/v2.0/routers/{id}"),
                Some(&json!({"router": {"external_gateway_info": gw}})),
                &[200],
                "set the router's gateway",
            )
            .await
            .map_err(fail)?;
        }
        let limit = timeout(p, "create", DEFAULT);
        let r = wait(&format!("router {id} ACTIVE"), limit, || async {
            let r = read_router(os, &id).await?.ok_or_else(|| {
                Diag::new(
                    "The router is gone",
                    format!("router {id} was deleted while it was made"),
                )
            })?;
            Ok((r["status"] == "ACTIVE").then_some(r))
        })
        .await
        .map_err(fail)?;
        put_tags(os, "routers", &id, p).await.map_err(fail)?;
        state.extend(observe(os, p, &r));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(read_router(os, &id).await?.map(|r| observe(os, state, &r)))
    }

    async fn update(&self, os: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = path_id(prior, "id")?;
        let mut body = serde_json::Map::new();
        for k in ["name", "description"] {
            if planned.get(k) != prior.get(k) {
                body.insert(k.into(), json!(string(planned, k).unwrap_or_default()));
            }
        }
        if planned.get("admin_state_up") != prior.get("admin_state_up") {
            if let Some(v) = boolean(planned, "admin_state_up") {
                body.insert("admin_state_up".into(), json!(v));
            }
        }
        let gateway_changed = [
            "external_network_id",
            "external_gateway",
            "enable_snat",
            "external_fixed_ip",
        ]
        .iter()
        .any(|k| planned.get(*k) != prior.get(*k));
        if gateway_changed {
            body.insert(
                "external_gateway_info".into(),
                gateway(planned).unwrap_or_else(|| json!({})),
            );
        }
        neutron_update(
            os,
            "router_update",
            "router",
            "routers",
            &id,
            body,
            prior,
            planned,
        )
        .await?;
        let r = read_router(os, &id)
            .await?
            .ok_or_else(|| Diag::new("The router is gone", format!("router {id}")))?;
        let mut state = planned.clone();
        state.extend(observe(os, planned, &r));
        Ok(state)
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        crate::common::delete(
            os,
            Service::Network,
            "router_delete",
            &format!("/v2.0/routers/{id}"),
        )
        .await?;
        let limit = timeout(state, "delete", DEFAULT);
        wait(&format!("router {id} deleted"), limit, || async {
            Ok(read_router(os, &id).await?.is_none().then_some(()))
        })
        .await
    }
}

/// A router's interface on a subnet or a port; its id is the interface's port.
pub struct RouterInterface;

#[async_trait::async_trait]
impl Resource<Cloud> for RouterInterface {
    fn schema(&self) -> Block {
        with_timeouts(
            Block::new(
                "A router's interface on a subnet (or a port).",
                vec![
                    crate::schema::id("The interface's port."),
                    region(),
                    required("router_id", Type::String, "The router.").force_new(),
                    optional("subnet_id", Type::String, "The subnet.")
                        .force_new()
                        .kept(),
                    optional("port_id", Type::String, "The port.")
                        .force_new()
                        .kept(),
                    optional(
                        "force_destroy",
                        Type::Bool,
                        "Remove the router's routes through the subnet to remove the interface.",
                    )
                    .default(Value::Bool(false)),
                ],
            ),
            &["create", "delete"],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let given = |k| !matches!(c.get(k), None | Some(Value::Null));
        if given("subnet_id") == given("port_id") {
            return vec![Diag::at(
                "subnet_id",
                "Give subnet_id or port_id",
                "exactly one of them names what the interface is on",
            )];
        }
        Vec::new()
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let router = path_id(p, "router_id").map_err(|d| (None, d))?;
        let mut body = serde_json::Map::new();
        for k in ["subnet_id", "port_id"] {
            if let Some(v) = string(p, k).filter(|v| !v.is_empty()) {
                body.insert(k.into(), json!(v));
            }
        }
        let made = call(
            os,
            Service::Network,
            "router_add_interface",
            Method::PUT,
            &format!("/v2.0/routers/{router}/add_router_interface"),
            Some(&J::Object(body)),
            &[200],
            "add the router's interface",
        )
        .await
        .map_err(|d| (None, d))?;
        let port = made["port_id"].as_str().unwrap_or_default().to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&port));
        let limit = timeout(p, "create", DEFAULT);
        let fail = |d| (Some(state.clone()), d);
        let seen = wait(
            &format!("port {port} of router {router}"),
            limit,
            || async {
                let Some(doc) = get(
                    os,
                    Service::Network,
                    "port_get",
                    &format!("/v2.0/ports/{port}"),
                )
                .await?
                else {
                    return Ok(None);
                };
                let status = doc["port"]["status"].as_str().unwrap_or_default();
                Ok(matches!(status, "ACTIVE" | "DOWN").then(|| doc["port"].clone()))
            },
        )
        .await
        .map_err(fail)?;
        state.extend(observe_interface(os, p, &seen));
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
        .map(|d| observe_interface(os, state, &d["port"])))
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let router = path_id(state, "router_id")?;
        let mut body = serde_json::Map::new();
        match string(state, "subnet_id").filter(|v| !v.is_empty()) {
            Some(subnet) => body.insert("subnet_id".into(), json!(subnet)),
            None => body.insert(
                "port_id".into(),
                json!(string(state, "id").unwrap_or_default()),
            ),
        };
        let limit = timeout(state, "delete", DEFAULT);
        wait(
            &format!("router {router}'s interface removed"),
            limit,
            || async {
                match os
                    .api
                    .expect(
                        Service::Network,
                        "router_remove_interface",
                        Method::PUT,
                        &format!("/v2.0/routers/{router}/remove_router_interface"),
                        Some(&J::Object(body.clone())),
                        &[200],
                    )
                    .await
                {
                    Ok(_) | Err(overcast_cloud::CloudError::NotFound { .. }) => Ok(Some(())),
                    // Still in use (a floating IP through it): asked again.
                    Err(overcast_cloud::CloudError::Conflict(_)) => Ok(None),
                    Err(e) => Err(Diag::cloud("remove the router's interface", e)),
                }
            },
        )
        .await
    }
}

/// What an interface's Read writes, from its port.
fn observe_interface(os: &Os, state: &Obj, port: &J) -> Obj {
    let mut seen = Obj::new();
    seen.insert("id".into(), text(&port["id"]));
    seen.insert("router_id".into(), text(&port["device_id"]));
    seen.insert("port_id".into(), text(&port["id"]));
    if let Some([ip]) = port["fixed_ips"].as_array().map(Vec::as_slice) {
        seen.insert("subnet_id".into(), text(&ip["subnet_id"]));
    }
    seen.insert("region".into(), region_of(os, state));
    seen
}
