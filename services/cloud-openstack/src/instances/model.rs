//! What Nova and Neutron answer, as the ccm reads it: servers (their flavor, their
//! addresses in NIC order), ports, and a listing's pages.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::addresses::ServerAddress;

#[derive(Debug, Deserialize)]
pub(super) struct Server {
    pub(super) id: String,
    pub(super) name: String,
    #[serde(default)]
    pub(super) status: String,
    #[serde(default)]
    pub(super) flavor: Flavor,
    #[serde(default)]
    pub(super) addresses: OrderedAddresses,
    #[serde(rename = "accessIPv4", default)]
    pub(super) access_ipv4: Option<String>,
    #[serde(rename = "accessIPv6", default)]
    pub(super) access_ipv6: Option<String>,
    #[serde(default)]
    pub(super) metadata: BTreeMap<String, String>,
    #[serde(rename = "OS-EXT-AZ:availability_zone", default)]
    pub(super) availability_zone: Option<String>,
}

/// A server's flavor: embedded (2.47+: `original_name`) or a reference (`id`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Flavor {
    #[serde(default)]
    pub(super) original_name: Option<String>,
    #[serde(default)]
    pub(super) id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Port {
    pub(super) id: String,
    #[serde(default)]
    pub(super) device_id: String,
    #[serde(default)]
    pub(super) device_owner: String,
    #[serde(default)]
    pub(super) status: String,
    #[serde(default)]
    pub(super) fixed_ips: Vec<FixedIp>,
    #[serde(default)]
    pub(super) created_at: Option<String>,
    #[serde(default)]
    pub(super) mac_address: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct FixedIp {
    pub(super) ip_address: String,
}

/// A server's `addresses` in the order Nova wrote them, which is its VIFs' order: Nova
/// builds the map from the instance's network info one VIF after another and keeps that
/// order (`nova/api/openstack/common.py`, `get_networks_for_instance_from_nw_info`, an
/// OrderedDict), each address carrying its VIF's MAC. A map type would lose it.
#[derive(Debug, Default)]
pub(super) struct OrderedAddresses(pub(super) Vec<(String, Vec<ServerAddress>)>);

impl<'de> Deserialize<'de> for OrderedAddresses {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OrderedAddresses;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of network names to addresses")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(OrderedAddresses(out))
            }
            fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
                Ok(OrderedAddresses::default())
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl OrderedAddresses {
    /// The VIFs' MACs, first NIC first.
    fn macs(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for mac in self
            .0
            .iter()
            .flat_map(|(_, l)| l)
            .filter_map(|a| a.mac.as_deref())
        {
            if !out.contains(&mac) {
                out.push(mac);
            }
        }
        out
    }
}

/// A server's ports in its NICs' order (the order Nova lists their MACs), so the first
/// InternalIP is the boot NIC's and the same on every sync; ports Nova does not show yet
/// after them, by creation time and id (Neutron's timestamps have whole seconds: the
/// ports of one boot often tie).
pub(super) fn in_nic_order(ports: &mut [&Port], addresses: &OrderedAddresses) {
    let macs = addresses.macs();
    ports.sort_by_cached_key(|p| {
        (
            macs.iter()
                .position(|m| m.eq_ignore_ascii_case(&p.mac_address))
                .unwrap_or(usize::MAX),
            p.created_at.clone(),
            p.id.clone(),
        )
    });
}

/// One page of a listing: Nova's servers or Neutron's ports, and the links to the next.
#[derive(Debug, Deserialize)]
pub(super) struct Page<T> {
    #[serde(alias = "servers", alias = "ports")]
    pub(super) items: Option<Vec<T>>,
    #[serde(alias = "servers_links", alias = "ports_links", default)]
    pub(super) links: Vec<Link>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Link {
    pub(super) rel: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nova lists a server's networks in its NICs' order (not by name); ports made in the
    /// same second come back from Neutron in any order: the NIC order wins.
    #[test]
    fn ports_follow_the_order_nova_lists_the_nics_in() {
        // From the text, as from Nova (a `serde_json::Value` would sort the keys).
        let server: Server = serde_json::from_str(
            r#"{"id": "s", "name": "n", "addresses": {
                "zeta": [{"addr": "10.9.0.5", "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"}],
                "alpha": [{"addr": "10.1.0.5", "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:02"}]
            }}"#,
        )
        .unwrap();
        let port = |id: &str, mac: &str, ip: &str| Port {
            id: id.into(),
            device_id: "s".into(),
            device_owner: "compute:nova".into(),
            status: "ACTIVE".into(),
            fixed_ips: vec![FixedIp {
                ip_address: ip.into(),
            }],
            created_at: Some("2026-11-24T22:00:00Z".into()),
            mac_address: mac.into(),
        };
        let (a, b, c) = (
            port("a", "FA:16:3E:00:00:02", "10.1.0.5"),
            port("b", "fa:16:3e:00:00:01", "10.9.0.5"),
            port("0-not-in-nova-yet", "fa:16:3e:00:00:03", "10.2.0.5"),
        );
        let mut ports = vec![&c, &a, &b];
        in_nic_order(&mut ports, &server.addresses);
        let ids: Vec<&str> = ports.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["b", "a", "0-not-in-nova-yet"]);
        let names: Vec<&str> = server.addresses.0.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha"], "the order as sent");
    }
}
