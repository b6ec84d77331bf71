//! Floating IPs, both ways Deckhouse's layouts make them: Nova's proxy
//! (`openstack_compute_floatingip_v2`, `…_associate_v2`: the masters and the bastion) and
//! Neutron's (`openstack_networking_floatingip_v2`, `…_associate_v2`: the bastion of some
//! releases), as terraform-provider-openstack 1.54.1 makes and reads them.

use std::time::Duration;

use http::Method;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    add_value_specs, call, get, neutron_update, path_id, put_tags, query, read_tags, region,
    region_of, safe, tags, text, timeout, value_specs, wait, with_timeouts, Cloud, Os,
};
use crate::cty::Type;
use crate::resource::{Diag, Outcome, Resource};
use crate::schema::{boolean, optional, required, s, string, Block, Obj};

const DEFAULT: Duration = Duration::from_secs(600);

/// The id of the external network named `pool`.
async fn pool_network(os: &Os, pool: &str) -> Outcome<String> {
    let doc = call(
        os,
        Service::Network,
        "network_list",
        Method::GET,
        &format!("/v2.0/networks?{}", query(&[("name", pool)])),
        None,
        &[200],
        "look up the pool",
    )
    .await?;
    doc["networks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["name"].as_str() == Some(pool))
        .and_then(|n| n["id"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            Diag::at(
                "pool",
                "No such pool",
                format!("No network found with name: {pool}"),
            )
        })
}

/// Nova's floating IP (its proxy to Neutron at microversion 2.1).
pub struct ComputeFloatingIp;

fn observe_compute(os: &Os, state: &Obj, f: &J) -> Obj {
    let mut seen = Obj::new();
    seen.insert("id".into(), text(&f["id"]));
    seen.insert("pool".into(), text(&f["pool"]));
    seen.insert("address".into(), text(&f["ip"]));
    seen.insert("fixed_ip".into(), text(&f["fixed_ip"]));
    seen.insert("instance_id".into(), text(&f["instance_id"]));
    seen.insert("region".into(), region_of(os, state));
    seen
}

#[async_trait::async_trait]
impl Resource<Cloud> for ComputeFloatingIp {
    fn schema(&self) -> Block {
        Block::new(
            "A floating IP through Nova.",
            vec![
                crate::schema::id("The floating IP's id."),
                region(),
                required("pool", Type::String, "The external network's name.").force_new(),
                crate::schema::computed("address", Type::String, "The address."),
                crate::schema::computed("fixed_ip", Type::String, "The address it forwards to."),
                crate::schema::computed("instance_id", Type::String, "The server it is on."),
            ],
        )
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let pool = string(p, "pool").unwrap_or_default();
        let made = call(
            os,
            Service::Compute,
            "floatingip_create",
            Method::POST,
            "/os-floating-ips",
            Some(&json!({ "pool": pool })),
            &[200],
            "allocate the floating IP",
        )
        .await
        .map_err(|d| (None, d))?;
        let mut state = p.clone();
        state.extend(observe_compute(os, p, &made["floating_ip"]));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(get(
            os,
            Service::Compute,
            "floatingip_get",
            &format!("/os-floating-ips/{id}"),
        )
        .await?
        .map(|d| observe_compute(os, state, &d["floating_ip"])))
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        crate::common::delete(
            os,
            Service::Compute,
            "floatingip_delete",
            &format!("/os-floating-ips/{id}"),
        )
        .await
    }
}

/// Whether Nova lists `address` as a floating address of `server`.
fn floating_on(server: &J, address: &str) -> bool {
    server["addresses"].as_object().is_some_and(|nets| {
        nets.values()
            .flat_map(|a| a.as_array().into_iter().flatten())
            .any(|a| a["OS-EXT-IPS:type"] == "floating" && a["addr"].as_str() == Some(address))
    })
}

/// A floating IP on a server through Nova (`addFloatingIp`); its id is
/// `<address>/<server>/<fixed address>`.
pub struct ComputeFloatingIpAssociate;

#[async_trait::async_trait]
impl Resource<Cloud> for ComputeFloatingIpAssociate {
    fn schema(&self) -> Block {
        with_timeouts(
            Block::new(
                "A floating IP on a server, through Nova.",
                vec![
                    crate::schema::id("<address>/<server id>/<fixed address>."),
                    region(),
                    required("floating_ip", Type::String, "The floating address.").force_new(),
                    required("instance_id", Type::String, "The server.").force_new(),
                    optional(
                        "fixed_ip",
                        Type::String,
                        "The server's address it forwards to.",
                    )
                    .force_new()
                    .kept(),
                    optional(
                        "wait_until_associated",
                        Type::Bool,
                        "Wait until Nova lists it on the server.",
                    )
                    .force_new(),
                ],
            ),
            &["create"],
        )
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let server = path_id(p, "instance_id").map_err(|d| (None, d))?;
        let address = string(p, "floating_ip").unwrap_or_default().to_owned();
        let fixed = string(p, "fixed_ip").unwrap_or_default().to_owned();
        let mut add = serde_json::Map::new();
        add.insert("address".into(), json!(address));
        if !fixed.is_empty() {
            add.insert("fixed_address".into(), json!(fixed));
        }
        call(
            os,
            Service::Compute,
            "server_add_floating_ip",
            Method::POST,
            &format!("/servers/{server}/action"),
            Some(&json!({ "addFloatingIp": add })),
            &[202],
            &format!("associate {address} with server {server}"),
        )
        .await
        .map_err(|d| (None, d))?;
        let mut state = p.clone();
        state.insert("id".into(), s(format!("{address}/{server}/{fixed}")));
        state.insert("region".into(), region_of(os, p));
        if boolean(p, "wait_until_associated") == Some(true) {
            let limit = timeout(p, "create", DEFAULT);
            wait(&format!("{address} on server {server}"), limit, || async {
                let doc = get(
                    os,
                    Service::Compute,
                    "server_get",
                    &format!("/servers/{server}"),
                )
                .await?
                .ok_or_else(|| Diag::new("The server is gone", format!("server {server}")))?;
                Ok(floating_on(&doc["server"], &address).then_some(()))
            })
            .await
            .map_err(|d| (Some(state.clone()), d))?;
        }
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = string(state, "id").unwrap_or_default().to_owned();
        let mut parts = id.splitn(3, '/');
        let (Some(address), Some(server), Some(fixed)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(Diag::at(
                "id",
                "Not an association's id",
                format!("{id:?} is not <address>/<server>/<fixed>"),
            ));
        };
        if !safe(server) {
            return Err(Diag::at("id", "Not an association's id", id.clone()));
        }
        let found = call(
            os,
            Service::Network,
            "floatingip_list",
            Method::GET,
            &format!(
                "/v2.0/floatingips?{}",
                query(&[("floating_ip_address", address)])
            ),
            None,
            &[200],
            "look up the floating IP",
        )
        .await?;
        if found["floatingips"].as_array().is_none_or(Vec::is_empty) {
            return Ok(None);
        }
        let Some(doc) = get(
            os,
            Service::Compute,
            "server_get",
            &format!("/servers/{server}"),
        )
        .await?
        else {
            return Ok(None);
        };
        if !floating_on(&doc["server"], address) {
            return Ok(None);
        }
        let mut seen = Obj::new();
        seen.insert("floating_ip".into(), s(address));
        seen.insert("instance_id".into(), s(server));
        seen.insert("fixed_ip".into(), s(fixed));
        seen.insert("region".into(), region_of(os, state));
        Ok(Some(seen))
    }

    fn import(&self, id: &str) -> Outcome<Obj> {
        if id.split('/').count() != 3 {
            return Err(Diag::new(
                "Cannot import the association",
                format!("{id:?} is not <address>/<server id>/<fixed address>"),
            ));
        }
        Ok(crate::common::id_only(id))
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let server = path_id(state, "instance_id")?;
        let address = string(state, "floating_ip").unwrap_or_default();
        match os
            .api
            .expect(
                Service::Compute,
                "server_remove_floating_ip",
                Method::POST,
                &format!("/servers/{server}/action"),
                Some(&json!({"removeFloatingIp": {"address": address}})),
                &[202],
            )
            .await
        {
            // Not associated (409) or the server gone (404): nothing to undo.
            Ok(_)
            | Err(
                overcast_cloud::CloudError::NotFound { .. }
                | overcast_cloud::CloudError::Conflict(_),
            ) => Ok(()),
            Err(e) => Err(Diag::cloud("disassociate the floating IP", e)),
        }
    }
}

/// Neutron's floating IP.
pub struct NetworkingFloatingIp;

async fn observe_networking(os: &Os, state: &Obj, f: &J) -> Outcome<Obj> {
    let mut seen = Obj::new();
    for (attr, key) in [
        ("id", "id"),
        ("description", "description"),
        ("address", "floating_ip_address"),
        ("port_id", "port_id"),
        ("fixed_ip", "fixed_ip_address"),
        ("tenant_id", "tenant_id"),
        ("dns_name", "dns_name"),
        ("dns_domain", "dns_domain"),
    ] {
        seen.insert(attr.into(), text(&f[key]));
    }
    let net = f["floating_network_id"].as_str().unwrap_or_default();
    let pool = if safe(net) {
        get(
            os,
            Service::Network,
            "network_get",
            &format!("/v2.0/networks/{net}"),
        )
        .await?
        .and_then(|d| d["network"]["name"].as_str().map(str::to_owned))
        .unwrap_or_default()
    } else {
        String::new()
    };
    seen.insert("pool".into(), s(pool));
    seen.insert("region".into(), region_of(os, state));
    read_tags(&mut seen, state, &f["tags"]);
    Ok(seen)
}

#[async_trait::async_trait]
impl Resource<Cloud> for NetworkingFloatingIp {
    fn schema(&self) -> Block {
        let mut attrs = vec![
            crate::schema::id("The floating IP's id."),
            region(),
            optional("description", Type::String, "Its description.").kept(),
            optional("address", Type::String, "The address.")
                .force_new()
                .kept(),
            required("pool", Type::String, "The external network's name.").force_new(),
            optional("port_id", Type::String, "The port it forwards to.").kept(),
            optional("tenant_id", Type::String, "The owning project.")
                .force_new()
                .kept(),
            optional(
                "fixed_ip",
                Type::String,
                "The port's address it forwards to.",
            )
            .kept(),
            optional("subnet_id", Type::String, "The external subnet.").kept(),
            optional(
                "subnet_ids",
                Type::List(Box::new(Type::String)),
                "External subnets to try.",
            ),
            value_specs(),
            optional("dns_name", Type::String, "Its DNS name.")
                .force_new()
                .kept(),
            optional("dns_domain", Type::String, "Its DNS domain.")
                .force_new()
                .kept(),
        ];
        attrs.extend(tags());
        with_timeouts(
            Block::new("A Neutron floating IP.", attrs),
            &["create", "delete"],
        )
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let pool = string(p, "pool").unwrap_or_default();
        let network = pool_network(os, pool).await.map_err(|d| (None, d))?;
        let mut body = serde_json::Map::new();
        body.insert("floating_network_id".into(), json!(network));
        for (attr, key) in [
            ("description", "description"),
            ("address", "floating_ip_address"),
            ("port_id", "port_id"),
            ("fixed_ip", "fixed_ip_address"),
            ("subnet_id", "subnet_id"),
            ("tenant_id", "tenant_id"),
            ("dns_name", "dns_name"),
            ("dns_domain", "dns_domain"),
        ] {
            if let Some(v) = string(p, attr).filter(|v| !v.is_empty()) {
                body.insert(key.into(), json!(v));
            }
        }
        add_value_specs(p, &mut body);
        let made = call(
            os,
            Service::Network,
            "floatingip_create",
            Method::POST,
            "/v2.0/floatingips",
            Some(&json!({ "floatingip": body })),
            &[201],
            "create the floating IP",
        )
        .await
        .map_err(|d| (None, d))?;
        let id = made["floatingip"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        let fail = |d| (Some(state.clone()), d);
        put_tags(os, "floatingips", &id, p).await.map_err(fail)?;
        let f = get(
            os,
            Service::Network,
            "floatingip_get",
            &format!("/v2.0/floatingips/{id}"),
        )
        .await
        .map_err(fail)?
        .ok_or_else(|| {
            fail(Diag::new(
                "The floating IP is gone",
                format!("floating IP {id}"),
            ))
        })?;
        let seen = observe_networking(os, p, &f["floatingip"])
            .await
            .map_err(fail)?;
        state.extend(seen);
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        match get(
            os,
            Service::Network,
            "floatingip_get",
            &format!("/v2.0/floatingips/{id}"),
        )
        .await?
        {
            Some(f) => observe_networking(os, state, &f["floatingip"])
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    async fn update(&self, os: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = path_id(prior, "id")?;
        let mut body = serde_json::Map::new();
        if planned.get("description") != prior.get("description") {
            body.insert(
                "description".into(),
                json!(string(planned, "description").unwrap_or_default()),
            );
        }
        if planned.get("port_id") != prior.get("port_id")
            || planned.get("fixed_ip") != prior.get("fixed_ip")
        {
            let port = string(planned, "port_id").filter(|v| !v.is_empty());
            body.insert("port_id".into(), port.map(|p| json!(p)).unwrap_or(J::Null));
            if let Some(f) = string(planned, "fixed_ip").filter(|v| !v.is_empty()) {
                body.insert("fixed_ip_address".into(), json!(f));
            }
        }
        neutron_update(
            os,
            "floatingip_update",
            "floatingip",
            "floatingips",
            &id,
            body,
            prior,
            planned,
        )
        .await?;
        let mut state = planned.clone();
        if let Some(f) = get(
            os,
            Service::Network,
            "floatingip_get",
            &format!("/v2.0/floatingips/{id}"),
        )
        .await?
        {
            state.extend(observe_networking(os, planned, &f["floatingip"]).await?);
        }
        Ok(state)
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        crate::common::delete(
            os,
            Service::Network,
            "floatingip_delete",
            &format!("/v2.0/floatingips/{id}"),
        )
        .await?;
        let limit = timeout(state, "delete", DEFAULT);
        wait(&format!("floating IP {id} deleted"), limit, || async {
            Ok(get(
                os,
                Service::Network,
                "floatingip_get",
                &format!("/v2.0/floatingips/{id}"),
            )
            .await?
            .is_none()
            .then_some(()))
        })
        .await
    }
}

/// A Neutron floating IP on a port; its id is the floating IP's.
pub struct NetworkingFloatingIpAssociate;

#[async_trait::async_trait]
impl Resource<Cloud> for NetworkingFloatingIpAssociate {
    fn schema(&self) -> Block {
        Block::new(
            "A Neutron floating IP on a port.",
            vec![
                crate::schema::id("The floating IP's id."),
                region(),
                required("floating_ip", Type::String, "The floating address.").force_new(),
                required("port_id", Type::String, "The port."),
                optional(
                    "fixed_ip",
                    Type::String,
                    "The port's address it forwards to.",
                )
                .kept(),
            ],
        )
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let address = string(p, "floating_ip").unwrap_or_default();
        let found = call(
            os,
            Service::Network,
            "floatingip_list",
            Method::GET,
            &format!(
                "/v2.0/floatingips?{}",
                query(&[("floating_ip_address", address)])
            ),
            None,
            &[200],
            "look up the floating IP",
        )
        .await
        .map_err(|d| (None, d))?;
        let ids: Vec<&str> = found["floatingips"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["id"].as_str())
            .collect();
        let id = match ids.as_slice() {
            [one] => (*one).to_owned(),
            [] => {
                return Err((
                    None,
                    Diag::at(
                        "floating_ip",
                        "No such floating IP",
                        format!(
                            "there are no openstack_networking_floatingip_v2 with {address} IP"
                        ),
                    ),
                ))
            }
            _ => {
                return Err((
                    None,
                    Diag::at(
                        "floating_ip",
                        "More than one floating IP",
                        address.to_owned(),
                    ),
                ))
            }
        };
        let mut body = serde_json::Map::new();
        body.insert(
            "port_id".into(),
            json!(string(p, "port_id").unwrap_or_default()),
        );
        if let Some(f) = string(p, "fixed_ip").filter(|v| !v.is_empty()) {
            body.insert("fixed_ip_address".into(), json!(f));
        }
        let made = call(
            os,
            Service::Network,
            "floatingip_update",
            Method::PUT,
            &format!("/v2.0/floatingips/{id}"),
            Some(&json!({ "floatingip": body })),
            &[200],
            &format!("associate {address}"),
        )
        .await
        .map_err(|d| (None, d))?;
        let mut state = p.clone();
        state.extend(observe_association(os, p, &made["floatingip"]));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(get(
            os,
            Service::Network,
            "floatingip_get",
            &format!("/v2.0/floatingips/{id}"),
        )
        .await?
        .map(|f| observe_association(os, state, &f["floatingip"])))
    }

    async fn update(&self, os: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = path_id(prior, "id")?;
        let mut body = serde_json::Map::new();
        body.insert(
            "port_id".into(),
            json!(string(planned, "port_id").unwrap_or_default()),
        );
        if planned.get("fixed_ip") != prior.get("fixed_ip") {
            if let Some(f) = string(planned, "fixed_ip").filter(|v| !v.is_empty()) {
                body.insert("fixed_ip_address".into(), json!(f));
            }
        }
        let made = call(
            os,
            Service::Network,
            "floatingip_update",
            Method::PUT,
            &format!("/v2.0/floatingips/{id}"),
            Some(&json!({ "floatingip": body })),
            &[200],
            "associate the floating IP",
        )
        .await?;
        let mut state = planned.clone();
        state.extend(observe_association(os, planned, &made["floatingip"]));
        Ok(state)
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        match os
            .api
            .expect(
                Service::Network,
                "floatingip_update",
                Method::PUT,
                &format!("/v2.0/floatingips/{id}"),
                Some(&json!({"floatingip": {"port_id": null}})),
                &[200],
            )
            .await
        {
            Ok(_) | Err(overcast_cloud::CloudError::NotFound { .. }) => Ok(()),
            Err(e) => Err(Diag::cloud("disassociate the floating IP", e)),
        }
    }
}

fn observe_association(os: &Os, state: &Obj, f: &J) -> Obj {
    let mut seen = Obj::new();
    seen.insert("id".into(), text(&f["id"]));
    seen.insert("floating_ip".into(), text(&f["floating_ip_address"]));
    seen.insert("port_id".into(), text(&f["port_id"]));
    seen.insert("fixed_ip".into(), text(&f["fixed_ip_address"]));
    seen.insert("region".into(), region_of(os, state));
    seen
}
