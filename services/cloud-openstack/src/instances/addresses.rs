//! A server's node addresses, as openstack-cloud-controller-manager gives them
//! (`pkg/openstack/instances_addresses.go`, `nodeAddresses`), so a node keeps the
//! addresses — and the first InternalIP kubelet and the API server use — when the ccm is
//! switched: the fixed IPs of its ACTIVE ports first (InternalIP, in port order), then
//! `accessIPv4`/`accessIPv6` (ExternalIP), the `hostname` metadata (Hostname), then the
//! server's `addresses` by network name: floating → ExternalIP, a `public-network-name`
//! network → ExternalIP (and no longer InternalIP), other networks InternalIP unless
//! `internal-network-name` lists others (then left out); IPv6 left out when disabled;
//! finally `address-sort-order`. Trunk subports are not read (OCCM asks Neutron for each,
//! per node per sync).

use std::collections::BTreeMap;
use std::net::IpAddr;

use overcast_cloud::{AddressType, NodeAddress};
use serde::Deserialize;

use crate::config::Networking;

/// One entry of a server's `addresses` map.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ServerAddress {
    pub addr: String,
    /// `fixed` or `floating`.
    #[serde(rename = "OS-EXT-IPS:type", default)]
    pub kind: Option<String>,
    /// The MAC of the VIF it is on.
    #[serde(rename = "OS-EXT-IPS-MAC:mac_addr", default)]
    pub mac: Option<String>,
}

/// What of a server its addresses come from.
#[derive(Debug, Clone, Default)]
pub struct AddressSource<'a> {
    /// The fixed IPs of each of its ports, in the ports' order, ACTIVE ports only.
    pub port_ips: Vec<&'a str>,
    pub access_ipv4: Option<&'a str>,
    pub access_ipv6: Option<&'a str>,
    /// The `hostname` metadata key.
    pub hostname: Option<&'a str>,
    /// Network name → its addresses, as Nova lists them.
    pub addresses: Option<&'a BTreeMap<String, Vec<ServerAddress>>>,
}

fn is_v6(address: &str) -> bool {
    matches!(address.parse::<IpAddr>(), Ok(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none())
}

fn add(out: &mut Vec<NodeAddress>, kind: AddressType, address: &str) {
    if !out.iter().any(|a| a.kind == kind && a.address == address) {
        out.push(NodeAddress {
            kind,
            address: address.to_owned(),
        });
    }
}

fn remove(out: &mut Vec<NodeAddress>, address: &str) {
    out.retain(|a| a.address != address);
}

pub fn node_addresses(src: &AddressSource<'_>, opts: &Networking) -> Vec<NodeAddress> {
    let keep = |a: &str| !(opts.ipv6_disabled && is_v6(a));
    let mut out = Vec::new();
    for ip in &src.port_ips {
        if keep(ip) {
            add(&mut out, AddressType::InternalIP, ip);
        }
    }
    if let Some(a) = src.access_ipv4.filter(|a| !a.is_empty()) {
        add(&mut out, AddressType::ExternalIP, a);
    }
    if let Some(a) = src
        .access_ipv6
        .filter(|a| !a.is_empty() && !opts.ipv6_disabled)
    {
        add(&mut out, AddressType::ExternalIP, a);
    }
    if let Some(h) = src.hostname.filter(|h| !h.is_empty()) {
        add(&mut out, AddressType::Hostname, h);
    }
    // A BTreeMap iterates by network name, as OCCM sorts them.
    for (network, list) in src.addresses.into_iter().flatten() {
        for a in list {
            let kind = if a.kind.as_deref() == Some("floating") {
                AddressType::ExternalIP
            } else if opts.public_networks.iter().any(|n| n == network) {
                // Listed as public: never both External and Internal.
                remove(&mut out, &a.addr);
                AddressType::ExternalIP
            } else if opts.internal_networks.is_empty()
                || opts.internal_networks.iter().any(|n| n == network)
            {
                AddressType::InternalIP
            } else {
                remove(&mut out, &a.addr);
                continue;
            };
            if keep(&a.addr) {
                add(&mut out, kind, &a.addr);
            }
        }
    }
    if !opts.address_sort_order.is_empty() {
        sort(&mut out, opts);
    }
    out
}

/// OCCM's `sortNodeAddresses`: addresses in an earlier CIDR first, those of one CIDR by
/// their bytes; the others keep their place after them (a stable sort).
fn sort(out: &mut [NodeAddress], opts: &Networking) {
    let list = &opts.address_sort_order;
    let priority = |a: &NodeAddress| -> usize {
        match a.address.parse::<IpAddr>() {
            Ok(ip) => list
                .iter()
                .position(|c| c.contains(ip))
                .map_or(0, |i| list.len() - i),
            Err(_) => 0,
        }
    };
    let bytes = |a: &NodeAddress| -> [u8; 16] {
        match a.address.parse::<IpAddr>() {
            Ok(IpAddr::V4(v4)) => v4.to_ipv6_mapped().octets(),
            Ok(IpAddr::V6(v6)) => v6.octets(),
            Err(_) => [0; 16],
        }
    };
    out.sort_by(|l, r| {
        let (pl, pr) = (priority(l), priority(r));
        if pl > 0 && pl == pr {
            bytes(l).cmp(&bytes(r))
        } else {
            pr.cmp(&pl)
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(pairs: &[(&str, &[(&str, &str)])]) -> BTreeMap<String, Vec<ServerAddress>> {
        pairs
            .iter()
            .map(|(net, list)| {
                (
                    net.to_string(),
                    list.iter()
                        .map(|(addr, kind)| ServerAddress {
                            addr: addr.to_string(),
                            kind: Some(kind.to_string()),
                            mac: None,
                        })
                        .collect(),
                )
            })
            .collect()
    }

    fn pairs(out: &[NodeAddress]) -> Vec<(&'static str, String)> {
        out.iter()
            .map(|a| (a.kind.as_str(), a.address.clone()))
            .collect()
    }

    fn own(v: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        v.iter().map(|(k, a)| (*k, a.to_string())).collect()
    }

    /// The server of OCCM's TestNodeAddresses (`pkg/openstack/openstack_test.go`).
    fn occm_server() -> BTreeMap<String, Vec<ServerAddress>> {
        let mut addrs = addresses(&[
            (
                "private",
                &[("10.0.0.32", "fixed"), ("50.56.176.36", "floating")],
            ),
            ("public", &[]),
        ]);
        let untyped = |a: &str| ServerAddress {
            addr: a.into(),
            kind: None,
            mac: None,
        };
        addrs.get_mut("private").unwrap().push(untyped("10.0.0.31"));
        addrs.get_mut("public").unwrap().extend([
            untyped("50.56.176.35"),
            untyped("2001:4800:780e:510:be76:4eff:fe04:84a8"),
        ]);
        addrs
    }

    const HOSTNAME: &str = "a1-yinvcez57-0-bvynoyawrhcg-kube-minion-fg5i4jwcc2yy.novalocal";

    fn occm_source(addrs: &BTreeMap<String, Vec<ServerAddress>>) -> AddressSource<'_> {
        AddressSource {
            port_ips: vec!["10.0.0.32", "10.0.0.31"],
            access_ipv4: Some("50.56.176.99"),
            access_ipv6: Some("2001:4800:790e:510:be76:4eff:fe04:82a8"),
            hostname: Some(HOSTNAME),
            addresses: Some(addrs),
        }
    }

    /// OCCM's TestNodeAddresses, and its answer.
    #[test]
    fn occms_case_gives_occms_answer() {
        let addrs = occm_server();
        let opts = Networking {
            public_networks: vec!["public".into()],
            ..Default::default()
        };
        assert_eq!(
            pairs(&node_addresses(&occm_source(&addrs), &opts)),
            own(&[
                ("InternalIP", "10.0.0.32"),
                ("InternalIP", "10.0.0.31"),
                ("ExternalIP", "50.56.176.99"),
                ("ExternalIP", "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                ("Hostname", HOSTNAME),
                ("ExternalIP", "50.56.176.36"),
                ("ExternalIP", "50.56.176.35"),
                ("ExternalIP", "2001:4800:780e:510:be76:4eff:fe04:84a8"),
            ])
        );
    }

    /// OCCM's TestNodeAddressesWithAddressSortOrderOptions, and its answer.
    #[test]
    fn occms_sorted_case_gives_occms_answer() {
        let addrs = occm_server();
        let opts = Networking {
            public_networks: vec!["public".into()],
            address_sort_order: ["10.0.0.0/8", "50.56.176.0/24", "2001:4800::/32"]
                .iter()
                .map(|c| c.parse().unwrap())
                .collect(),
            ..Default::default()
        };
        assert_eq!(
            pairs(&node_addresses(&occm_source(&addrs), &opts)),
            own(&[
                ("InternalIP", "10.0.0.31"),
                ("InternalIP", "10.0.0.32"),
                ("ExternalIP", "50.56.176.35"),
                ("ExternalIP", "50.56.176.36"),
                ("ExternalIP", "50.56.176.99"),
                ("ExternalIP", "2001:4800:780e:510:be76:4eff:fe04:84a8"),
                ("ExternalIP", "2001:4800:790e:510:be76:4eff:fe04:82a8"),
                ("Hostname", HOSTNAME),
            ])
        );
    }

    #[test]
    fn internal_network_names_leave_the_other_fixed_addresses_out() {
        let addrs = addresses(&[
            ("a-net", &[("10.1.0.5", "fixed")]),
            (
                "b-net",
                &[("10.2.0.5", "fixed"), ("203.0.113.9", "floating")],
            ),
        ]);
        let src = AddressSource {
            port_ips: vec!["10.2.0.5", "10.1.0.5"],
            addresses: Some(&addrs),
            hostname: Some("node-1"),
            ..Default::default()
        };
        let opts = Networking {
            internal_networks: vec!["b-net".into()],
            ..Default::default()
        };
        assert_eq!(
            pairs(&node_addresses(&src, &opts)),
            own(&[
                ("InternalIP", "10.2.0.5"),
                ("Hostname", "node-1"),
                ("ExternalIP", "203.0.113.9"),
            ])
        );
    }

    #[test]
    fn ipv6_is_left_out_when_disabled() {
        let addrs = addresses(&[("n", &[("fd00::5", "fixed"), ("10.0.0.5", "fixed")])]);
        let src = AddressSource {
            port_ips: vec!["fd00::5", "10.0.0.5"],
            access_ipv6: Some("2001:db8::1"),
            addresses: Some(&addrs),
            ..Default::default()
        };
        let opts = Networking {
            ipv6_disabled: true,
            ..Default::default()
        };
        assert_eq!(
            pairs(&node_addresses(&src, &opts)),
            own(&[("InternalIP", "10.0.0.5")])
        );
    }

    /// OCCM's sort: the first CIDR's addresses first, by bytes; unmatched keep their order.
    #[test]
    fn the_sort_order_groups_by_cidr_and_keeps_the_rest_in_place() {
        let addrs = addresses(&[(
            "n",
            &[
                ("10.0.0.9", "fixed"),
                ("192.168.1.7", "fixed"),
                ("10.0.0.3", "fixed"),
                ("172.16.0.1", "fixed"),
                ("192.168.1.2", "fixed"),
            ],
        )]);
        let src = AddressSource {
            addresses: Some(&addrs),
            ..Default::default()
        };
        let opts = Networking {
            address_sort_order: vec![
                "192.168.0.0/16".parse().unwrap(),
                "10.0.0.0/8".parse().unwrap(),
            ],
            ..Default::default()
        };
        let got: Vec<String> = node_addresses(&src, &opts)
            .into_iter()
            .map(|a| a.address)
            .collect();
        assert_eq!(
            got,
            [
                "192.168.1.2",
                "192.168.1.7",
                "10.0.0.3",
                "10.0.0.9",
                "172.16.0.1"
            ]
        );
    }
}
