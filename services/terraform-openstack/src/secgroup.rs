//! Neutron's security groups and their rules (`openstack_networking_secgroup_v2`, its data
//! source, `openstack_networking_secgroup_rule_v2`), as terraform-provider-openstack 1.54.1
//! makes and reads them.

use http::Method;
use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{
    call, delete_when_free, get, list_of, neutron_update, number, path_id, put_tags, query,
    read_tags, region, region_of, strings, tags, text, timeout, with_timeouts, Cloud, Os,
};
use crate::cty::{Type, Value};
use crate::resource::{DataSource, Diag, Outcome, Resource};
use crate::schema::{boolean, computed, int, optional, required, s, string, Block, Obj};

const DEFAULT: std::time::Duration = std::time::Duration::from_secs(600);

/// Neutron's protocol names upstream accepts (besides a number).
const PROTOCOLS: [&str; 21] = [
    "ah",
    "dccp",
    "egp",
    "esp",
    "gre",
    "icmp",
    "igmp",
    "ipv6-encap",
    "ipv6-frag",
    "ipv6-icmp",
    "ipv6-nonxt",
    "ipv6-opts",
    "ipv6-route",
    "ospf",
    "pgm",
    "rsvp",
    "sctp",
    "tcp",
    "udp",
    "udplite",
    "vrrp",
];

fn observe_group(os: &Os, state: &Obj, g: &J) -> Obj {
    let mut seen = Obj::new();
    for k in ["id", "name", "description", "tenant_id"] {
        seen.insert(k.into(), text(&g[k]));
    }
    seen.insert("region".into(), region_of(os, state));
    read_tags(&mut seen, state, &g["tags"]);
    seen
}

pub struct SecGroup;

#[async_trait::async_trait]
impl Resource<Cloud> for SecGroup {
    fn schema(&self) -> Block {
        let mut attrs = vec![
            crate::schema::id("The group's id."),
            region(),
            required("name", Type::String, "Its name."),
            optional("description", Type::String, "Its description.").kept(),
            optional("tenant_id", Type::String, "The owning project.")
                .force_new()
                .kept(),
            optional(
                "delete_default_rules",
                Type::Bool,
                "Remove the egress rules Neutron adds to a new group.",
            )
            .force_new(),
        ];
        attrs.extend(tags());
        with_timeouts(Block::new("A Neutron security group.", attrs), &["delete"])
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let mut body = serde_json::Map::new();
        body.insert("name".into(), json!(string(p, "name").unwrap_or_default()));
        for k in ["description", "tenant_id"] {
            if let Some(v) = string(p, k).filter(|v| !v.is_empty()) {
                body.insert(k.into(), json!(v));
            }
        }
        let made = call(
            os,
            Service::Network,
            "secgroup_create",
            Method::POST,
            "/v2.0/security-groups",
            Some(&json!({ "security_group": body })),
            &[201],
            "create the security group",
        )
        .await
        .map_err(|d| (None, d))?;
        let group = made["security_group"].clone();
        let id = group["id"].as_str().unwrap_or_default().to_owned();
        let mut state = p.clone();
        state.insert("id".into(), s(&id));
        let fail = |d| (Some(state.clone()), d);
        if boolean(p, "delete_default_rules") == Some(true) {
            for rule in group["security_group_rules"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let rid = rule["id"].as_str().unwrap_or_default();
                crate::common::delete(
                    os,
                    Service::Network,
                    "secgroup_rule_delete",
                    &format!("/v2.0/security-group-rules/{rid}"),
                )
                .await
                .map_err(fail)?;
            }
        }
        put_tags(os, "security-groups", &id, p)
            .await
            .map_err(fail)?;
        let g = get(
            os,
            Service::Network,
            "secgroup_get",
            &format!("/v2.0/security-groups/{id}"),
        )
        .await
        .map_err(fail)?
        .map(|d| d["security_group"].clone())
        .unwrap_or(group);
        state.extend(observe_group(os, p, &g));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(get(
            os,
            Service::Network,
            "secgroup_get",
            &format!("/v2.0/security-groups/{id}"),
        )
        .await?
        .map(|d| observe_group(os, state, &d["security_group"])))
    }

    async fn update(&self, os: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let id = path_id(prior, "id")?;
        let mut body = serde_json::Map::new();
        for k in ["name", "description"] {
            if planned.get(k) != prior.get(k) {
                body.insert(k.into(), json!(string(planned, k).unwrap_or_default()));
            }
        }
        neutron_update(
            os,
            "secgroup_update",
            "security_group",
            "security-groups",
            &id,
            body,
            prior,
            planned,
        )
        .await?;
        let mut state = planned.clone();
        if let Some(d) = get(
            os,
            Service::Network,
            "secgroup_get",
            &format!("/v2.0/security-groups/{id}"),
        )
        .await?
        {
            state.extend(observe_group(os, planned, &d["security_group"]));
        }
        Ok(state)
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        // In use (a port not yet deleted): asked again until the timeout.
        let limit = timeout(state, "delete", DEFAULT);
        delete_when_free(
            os,
            "secgroup_delete",
            &format!("/v2.0/security-groups/{id}"),
            &format!("the security group {id}"),
            limit,
        )
        .await
    }
}

/// `data "openstack_networking_secgroup_v2"`: one group by name or id.
pub struct SecGroupData;

#[async_trait::async_trait]
impl DataSource<Cloud> for SecGroupData {
    fn schema(&self) -> Block {
        Block::new(
            "A Neutron security group, found by name or id.",
            vec![
                crate::schema::id("The group's id."),
                region(),
                optional("secgroup_id", Type::String, "Its id.").kept(),
                optional("name", Type::String, "Its name.").kept(),
                optional("description", Type::String, "Its description.").kept(),
                optional("tenant_id", Type::String, "The owning project.").kept(),
                optional(
                    "tags",
                    Type::Set(Box::new(Type::String)),
                    "Tags it must carry.",
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
            ("secgroup_id", "id"),
            ("name", "name"),
            ("description", "description"),
            ("tenant_id", "tenant_id"),
        ] {
            if let Some(v) = string(config, attr).filter(|v| !v.is_empty()) {
                filters.push((key, v.to_owned()));
            }
        }
        let tags = list_of(config, "tags");
        if !tags.is_empty() {
            filters.push(("tags", tags.join(",")));
        }
        let pairs: Vec<(&str, &str)> = filters.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let doc = call(
            os,
            Service::Network,
            "secgroup_list",
            Method::GET,
            &format!("/v2.0/security-groups?{}", query(&pairs)),
            None,
            &[200],
            "list security groups",
        )
        .await?;
        let found: Vec<&J> = doc["security_groups"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let what = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let g = match found.as_slice() {
            [one] => *one,
            [] => {
                return Err(Diag::new(
                    "No security group found",
                    format!("no security group matches {what}"),
                ))
            }
            _ => {
                return Err(Diag::new(
                    "More than one security group found",
                    format!("{} security groups match {what}", found.len()),
                ))
            }
        };
        let mut out = config.clone();
        for k in ["id", "name", "description", "tenant_id"] {
            out.insert(k.into(), text(&g[k]));
        }
        out.insert("secgroup_id".into(), text(&g["id"]));
        out.insert("all_tags".into(), strings(&g["tags"]));
        out.insert("region".into(), region_of(os, config));
        Ok(out)
    }
}

pub struct SecGroupRule;

#[async_trait::async_trait]
impl Resource<Cloud> for SecGroupRule {
    fn schema(&self) -> Block {
        let new = |a: crate::schema::Attr| a.force_new();
        with_timeouts(
            Block::new(
                "A rule of a Neutron security group (every change replaces it).",
                vec![
                    crate::schema::id("The rule's id."),
                    region(),
                    new(optional("description", Type::String, "Its description.").kept()),
                    new(required("direction", Type::String, "ingress or egress.")),
                    new(required("ethertype", Type::String, "IPv4 or IPv6.")),
                    new(optional("port_range_min", Type::Number, "The first port.")).kept(),
                    new(optional("port_range_max", Type::Number, "The last port.")).kept(),
                    new(optional(
                        "protocol",
                        Type::String,
                        "tcp, udp, icmp, a number, …",
                    ))
                    .kept(),
                    new(optional(
                        "remote_group_id",
                        Type::String,
                        "The group it lets in.",
                    ))
                    .kept(),
                    new(optional(
                        "remote_ip_prefix",
                        Type::String,
                        "The CIDR it lets in.",
                    ))
                    .kept(),
                    new(required("security_group_id", Type::String, "Its group.")),
                    new(optional("tenant_id", Type::String, "The owning project.")).kept(),
                ],
            ),
            &["delete"],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        if let Some(d) = string(c, "direction").filter(|d| !matches!(*d, "ingress" | "egress")) {
            out.push(Diag::at(
                "direction",
                "direction is ingress or egress",
                d.to_owned(),
            ));
        }
        if let Some(e) = string(c, "ethertype").filter(|e| !matches!(*e, "IPv4" | "IPv6")) {
            out.push(Diag::at(
                "ethertype",
                "ethertype is IPv4 or IPv6",
                e.to_owned(),
            ));
        }
        if let Some(p) = string(c, "protocol").filter(|p| !p.is_empty()) {
            if p.parse::<u32>().is_err() && !PROTOCOLS.contains(&p) {
                out.push(Diag::at(
                    "protocol",
                    "Unknown protocol",
                    format!(
                        "{p:?} is neither a number nor one of {}",
                        PROTOCOLS.join(", ")
                    ),
                ));
            }
        }
        let ports = int(c, "port_range_min").is_some_and(|v| v > 0)
            || int(c, "port_range_max").is_some_and(|v| v > 0);
        if ports
            && string(c, "protocol").is_none_or(str::is_empty)
            && !matches!(c.get("protocol"), Some(Value::Unknown))
        {
            out.push(Diag::at(
                "protocol",
                "A protocol must be specified when using port_range_min and port_range_max",
                "",
            ));
        }
        out
    }

    async fn create(&self, os: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let mut body = serde_json::Map::new();
        for k in [
            "direction",
            "description",
            "ethertype",
            "security_group_id",
            "protocol",
            "remote_group_id",
            "remote_ip_prefix",
        ] {
            if let Some(v) = string(p, k).filter(|v| !v.is_empty()) {
                body.insert(k.into(), json!(v));
            }
        }
        if let Some(t) = string(p, "tenant_id").filter(|v| !v.is_empty()) {
            body.insert("project_id".into(), json!(t));
        }
        for k in ["port_range_min", "port_range_max"] {
            if let Some(v) = int(p, k).filter(|v| *v > 0) {
                body.insert(k.into(), json!(v));
            }
        }
        let group = string(p, "security_group_id").unwrap_or_default();
        let _one_at_a_time = os.serialized(group).await;
        let made = call(
            os,
            Service::Network,
            "secgroup_rule_create",
            Method::POST,
            "/v2.0/security-group-rules",
            Some(&json!({ "security_group_rule": body })),
            &[201],
            "create the security group rule",
        )
        .await
        .map_err(|d| (None, d))?;
        let mut state = p.clone();
        state.extend(observe_rule(os, p, &made["security_group_rule"]));
        Ok(state)
    }

    async fn read(&self, os: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let id = path_id(state, "id")?;
        Ok(get(
            os,
            Service::Network,
            "secgroup_rule_get",
            &format!("/v2.0/security-group-rules/{id}"),
        )
        .await?
        .map(|d| observe_rule(os, state, &d["security_group_rule"])))
    }

    async fn delete(&self, os: &Cloud, state: &Obj) -> Outcome<()> {
        let id = path_id(state, "id")?;
        let group = string(state, "security_group_id").unwrap_or_default();
        let _one_at_a_time = os.serialized(group).await;
        crate::common::delete(
            os,
            Service::Network,
            "secgroup_rule_delete",
            &format!("/v2.0/security-group-rules/{id}"),
        )
        .await
    }
}

/// What a rule's Read writes. `remote_ip_prefix` as the state spells it where Neutron's
/// says the same in another case (upstream records it lower-cased, its StateFunc; a
/// configured `FD00::/64` is recorded as written here), else lower-cased.
fn observe_rule(os: &Os, state: &Obj, r: &J) -> Obj {
    let mut seen = Obj::new();
    for k in [
        "id",
        "description",
        "direction",
        "ethertype",
        "protocol",
        "remote_group_id",
        "security_group_id",
        "tenant_id",
    ] {
        seen.insert(k.into(), text(&r[k]));
    }
    let prefix = r["remote_ip_prefix"].as_str().unwrap_or_default();
    let recorded = string(state, "remote_ip_prefix").filter(|p| p.eq_ignore_ascii_case(prefix));
    seen.insert(
        "remote_ip_prefix".into(),
        s(recorded.map_or_else(|| prefix.to_lowercase(), str::to_owned)),
    );
    seen.insert("port_range_min".into(), number(&r["port_range_min"]));
    seen.insert("port_range_max".into(), number(&r["port_range_max"]));
    seen.insert("region".into(), region_of(os, state));
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_is_refused_before_any_call_as_upstream_refuses_it() {
        let rule = |pairs: &[(&str, Value)]| -> Obj {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect()
        };
        let ok = rule(&[
            ("direction", s("ingress")),
            ("ethertype", s("IPv4")),
            ("protocol", s("tcp")),
            ("port_range_min", crate::schema::n(22)),
        ]);
        assert!(SecGroupRule.validate(&ok).is_empty());
        let bad = rule(&[
            ("direction", s("in")),
            ("ethertype", s("IPv5")),
            ("protocol", s("any")),
        ]);
        assert_eq!(SecGroupRule.validate(&bad).len(), 3);
        let no_protocol = rule(&[
            ("direction", s("ingress")),
            ("ethertype", s("IPv4")),
            ("port_range_max", crate::schema::n(22)),
        ]);
        assert!(SecGroupRule.validate(&no_protocol)[0]
            .summary
            .contains("A protocol must be specified"));
        assert!(SecGroupRule
            .validate(&rule(&[
                ("direction", s("egress")),
                ("ethertype", s("IPv6")),
                ("protocol", s("58"))
            ]))
            .is_empty());
    }
}
