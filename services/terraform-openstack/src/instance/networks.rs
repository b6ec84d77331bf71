//! A server's `network` blocks: resolved to Neutron networks before the create (upstream's
//! `getAllInstanceNetworks`: by port, by id or by name, each one ACTIVE network exactly),
//! and read back from Nova's `addresses` (upstream's `flattenInstanceNetworks`), element by
//! element as terraform-provider-openstack 1.54.1 writes them.

use std::collections::BTreeMap;

use overcast_cloud_openstack::Service;
use serde_json::{json, Value as J};

use crate::common::{blocks, call, query, Os};
use crate::cty::Value;
use crate::resource::{Diag, Outcome};
use crate::schema::{boolean, s, string, Obj};

/// One `network` block with its network known.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Nic {
    pub uuid: String,
    pub name: String,
    pub port: String,
    pub fixed_ip_v4: String,
    pub fixed_ip_v6: String,
    pub access_network: bool,
}

fn given(o: &Obj, k: &str) -> String {
    string(o, k).unwrap_or_default().to_owned()
}

/// The blocks as configured (nothing looked up): what a Read matches addresses against.
pub fn configured(o: &Obj) -> Vec<Nic> {
    blocks(o, "network")
        .into_iter()
        .map(|b| Nic {
            uuid: given(b, "uuid"),
            name: given(b, "name"),
            port: given(b, "port"),
            fixed_ip_v4: given(b, "fixed_ip_v4"),
            fixed_ip_v6: given(b, "fixed_ip_v6"),
            access_network: boolean(b, "access_network").unwrap_or(false),
        })
        .collect()
}

/// Exactly one of `found`, else upstream's words for none and for several.
fn one<'a>(found: &'a [J], kind: &str, term: &str) -> Outcome<&'a J> {
    match found {
        [one] => Ok(one),
        [] => Err(Diag::at(
            "network",
            format!("Could not find any matching network for {kind} {term}"),
            "no ACTIVE network of this project matches it",
        )),
        _ => Err(Diag::at(
            "network",
            format!("More than one network found for {kind} {term}"),
            "name the network by its id (uuid) instead",
        )),
    }
}

async fn list(os: &Os, what: &'static str, path: &str) -> Outcome<Vec<J>> {
    let doc = call(
        os,
        Service::Network,
        what,
        http::Method::GET,
        path,
        None,
        &[200],
        &format!("look up {path}"),
    )
    .await?;
    let key = if what == "ports_list" {
        "ports"
    } else {
        "networks"
    };
    Ok(doc[key].as_array().cloned().unwrap_or_default())
}

/// Each block with its network's id and name: none looked up where both are given.
pub async fn resolve(os: &Os, nics: Vec<Nic>) -> Outcome<Vec<Nic>> {
    let mut out = Vec::with_capacity(nics.len());
    for mut nic in nics {
        if nic.uuid.is_empty() && nic.name.is_empty() && nic.port.is_empty() {
            return Err(Diag::at(
                "network",
                "A network block needs uuid, name or port",
                "say which network (or port) the server is on",
            ));
        }
        if nic.uuid.is_empty() || nic.name.is_empty() {
            let (kind, term, filter) = if !nic.port.is_empty() {
                let ports = list(
                    os,
                    "ports_list",
                    &format!("/v2.0/ports?{}", query(&[("id", &nic.port)])),
                )
                .await?;
                let port = match ports.as_slice() {
                    [p] => p,
                    _ => {
                        return Err(Diag::at(
                            "network",
                            format!("Could not find any matching network for port {}", nic.port),
                            format!("Neutron has no port {}", nic.port),
                        ))
                    }
                };
                let network = port["network_id"].as_str().unwrap_or_default().to_owned();
                ("port", nic.port.clone(), ("id", network))
            } else if !nic.uuid.is_empty() {
                ("id", nic.uuid.clone(), ("id", nic.uuid.clone()))
            } else {
                ("name", nic.name.clone(), ("name", nic.name.clone()))
            };
            let networks = list(
                os,
                "networks_list",
                &format!(
                    "/v2.0/networks?{}",
                    query(&[(filter.0, &filter.1), ("status", "ACTIVE")])
                ),
            )
            .await?;
            let n = one(&networks, kind, &term)?;
            nic.uuid = n["id"].as_str().unwrap_or_default().to_owned();
            nic.name = n["name"].as_str().unwrap_or_default().to_owned();
        }
        out.push(nic);
    }
    Ok(out)
}

/// The create request's `networks`: each key left out when empty.
pub fn request(nics: &[Nic]) -> J {
    J::Array(
        nics.iter()
            .map(|n| {
                let mut o = serde_json::Map::new();
                for (k, v) in [
                    ("uuid", &n.uuid),
                    ("port", &n.port),
                    ("fixed_ip", &n.fixed_ip_v4),
                ] {
                    if !v.is_empty() {
                        o.insert(k.into(), json!(v));
                    }
                }
                J::Object(o)
            })
            .collect(),
    )
}

/// A NIC as Nova's `addresses` say it: its fixed addresses and MAC.
#[derive(Debug, Default, Clone)]
struct Seen {
    v4: String,
    v6: String,
    mac: String,
}

/// `addresses` per network name, NICs merged by MAC in the order Nova lists them; a
/// floating address adds nothing but its (merged) NIC.
fn addresses(server: &J) -> BTreeMap<String, Vec<Seen>> {
    let mut out = BTreeMap::new();
    let Some(networks) = server["addresses"].as_object() else {
        return out;
    };
    for (name, entries) in networks {
        let mut nics: Vec<Seen> = Vec::new();
        for e in entries.as_array().into_iter().flatten() {
            let mac = e["OS-EXT-IPS-MAC:mac_addr"].as_str().unwrap_or_default();
            let at = match nics.iter().position(|n| n.mac == mac) {
                Some(i) => i,
                None => {
                    nics.push(Seen {
                        mac: mac.to_owned(),
                        ..Default::default()
                    });
                    nics.len() - 1
                }
            };
            let kind = e["OS-EXT-IPS:type"].as_str().unwrap_or("fixed");
            if kind != "fixed" {
                continue;
            }
            let addr = e["addr"].as_str().unwrap_or_default();
            if e["version"].as_i64() == Some(6) {
                nics[at].v6 = format!("[{addr}]");
            } else {
                nics[at].v4 = addr.to_owned();
            }
        }
        out.insert(name.clone(), nics);
    }
    out
}

fn element(name: &str, seen: &Seen, uuid: &str, port: &str, access: bool) -> Value {
    Value::Map(
        [
            ("uuid".to_owned(), s(uuid)),
            ("name".to_owned(), s(name)),
            ("port".to_owned(), s(port)),
            ("fixed_ip_v4".to_owned(), s(&seen.v4)),
            ("fixed_ip_v6".to_owned(), s(&seen.v6)),
            ("floating_ip".to_owned(), s("")),
            ("mac".to_owned(), s(&seen.mac)),
            ("access_network".to_owned(), Value::Bool(access)),
        ]
        .into(),
    )
}

/// What a Read writes into `network`, and the access addresses it implies (upstream's
/// `flattenInstanceNetworks` and `getInstanceAccessAddresses`).
pub struct Flattened {
    pub network: Value,
    pub access_v4: String,
    pub access_v6: String,
}

/// The `network` elements: with blocks configured, one per block in their order (the
/// block's network by name, its next NIC); without, one per NIC Nova lists. A block whose
/// network has no address (a server in ERROR without ports) is written without one, where
/// upstream writes nothing: a list shorter than the configuration would replace the server
/// at the next plan (`network` replaces it), and Terraform 1.0 takes no apply whose block
/// count is not the plan's.
pub fn flatten(server: &J, nics: &[Nic]) -> Flattened {
    let mut by_name = addresses(server);
    let mut out = Vec::new();
    let (mut v4, mut v6) = (String::new(), String::new());
    let mut note = |seen: &Seen, access: bool| {
        if !seen.v4.is_empty() && (v4.is_empty() || access) {
            v4 = seen.v4.clone();
        }
        if !seen.v6.is_empty() && (v6.is_empty() || access) {
            v6 = seen.v6.clone();
        }
    };
    if nics.is_empty() {
        for (name, seen) in &by_name {
            for nic in seen {
                note(nic, false);
                out.push(element(name, nic, "", "", false));
            }
        }
    } else {
        for nic in nics {
            let first = match by_name.get_mut(&nic.name).filter(|l| !l.is_empty()) {
                Some(list) => list.remove(0),
                None => Seen::default(),
            };
            note(&first, nic.access_network);
            out.push(element(
                &nic.name,
                &first,
                &nic.uuid,
                &nic.port,
                nic.access_network,
            ));
        }
    }
    let fallback = |k: &str| server[k].as_str().unwrap_or_default().to_owned();
    Flattened {
        network: Value::List(out),
        access_v4: if v4.is_empty() {
            fallback("accessIPv4")
        } else {
            v4
        },
        access_v6: if v6.is_empty() {
            fallback("accessIPv6")
        } else {
            v6
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nova's `addresses` (Zed, a port-based NIC with a floating address beside it).
    fn server() -> J {
        json!({"addresses": {"kube": [
            {"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01", "version": 4, "addr": "10.0.0.12", "OS-EXT-IPS:type": "fixed"},
            {"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01", "version": 6, "addr": "fd00::12", "OS-EXT-IPS:type": "fixed"},
            {"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01", "version": 4, "addr": "203.0.113.7", "OS-EXT-IPS:type": "floating"},
            {"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:02", "version": 4, "addr": "10.0.0.13", "OS-EXT-IPS:type": "fixed"}
        ]}, "accessIPv4": "", "accessIPv6": ""})
    }

    #[test]
    fn a_block_takes_its_network_s_next_nic_and_the_floating_address_is_not_fixed() {
        let nic = Nic {
            uuid: "net-1".into(),
            name: "kube".into(),
            port: "port-1".into(),
            ..Default::default()
        };
        let f = flatten(
            &server(),
            &[
                nic.clone(),
                Nic {
                    port: "port-2".into(),
                    ..nic
                },
            ],
        );
        let Value::List(l) = f.network else { panic!() };
        assert_eq!(l.len(), 2);
        let Value::Map(first) = &l[0] else { panic!() };
        assert_eq!(first["fixed_ip_v4"], s("10.0.0.12"));
        assert_eq!(first["fixed_ip_v6"], s("[fd00::12]"));
        assert_eq!(first["port"], s("port-1"));
        let Value::Map(second) = &l[1] else { panic!() };
        assert_eq!(second["fixed_ip_v4"], s("10.0.0.13"));
        assert_eq!(f.access_v4, "10.0.0.12");
        assert_eq!(f.access_v6, "[fd00::12]");
    }

    #[test]
    fn a_block_whose_network_has_no_address_is_written_without_one() {
        let nic = Nic {
            name: "other".into(),
            port: "port-9".into(),
            ..Default::default()
        };
        let f = flatten(&server(), &[nic]);
        let Value::List(l) = f.network else { panic!() };
        assert_eq!(l.len(), 1);
        let Value::Map(e) = &l[0] else { panic!() };
        assert_eq!(e["port"], s("port-9"));
        assert_eq!(e["fixed_ip_v4"], s(""));
    }

    #[test]
    fn without_blocks_every_nic_is_listed_with_no_uuid() {
        let f = flatten(&server(), &[]);
        let Value::List(l) = f.network else { panic!() };
        assert_eq!(l.len(), 2);
        let Value::Map(first) = &l[0] else { panic!() };
        assert_eq!(first["uuid"], s(""));
        assert_eq!(first["name"], s("kube"));
    }
}
