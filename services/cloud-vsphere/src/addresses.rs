//! A node's addresses from its VM's guest NICs, as cloud-provider-vsphere chooses them
//! (`DiscoverNode` / `discoverIPs`): NICs that are not the VM's own (device id -1) and
//! addresses only the guest can reach (loopback, link-local, unspecified) are left out;
//! per IP family in priority order, the InternalIP is the first address in
//! `internal-network-subnet-cidr`, else the first on `internal-vm-network-name`, and the
//! ExternalIP likewise; when neither is found the first address of the family is both
//! (on-prem VMs often have InternalIP = ExternalIP); `exclude-*` subnets are never
//! chosen. The guest's host name is the Hostname and, as PROVIDERS.md's five types ask,
//! the InternalDNS (and the ExternalDNS when there is an ExternalIP).

use std::net::IpAddr;

use overcast_cloud::cidr::Cidr;
use overcast_cloud::{AddressType, NodeAddress};

use crate::config::{IpFamily, Nodes};
use crate::vms::Vm;

#[derive(Debug, Clone)]
struct Candidate {
    ip: IpAddr,
    network: String,
}

/// The node addresses of `vm`; none when its guest reports no usable address (the ccm
/// then leaves the node's own).
pub fn of(vm: &Vm, nodes: &Nodes, families: &[IpFamily]) -> Vec<NodeAddress> {
    let mut out: Vec<NodeAddress> = Vec::new();
    let mut add = |kind: AddressType, address: String| {
        let a = NodeAddress { kind, address };
        if !out.contains(&a) {
            out.push(a);
        }
    };
    let own: Vec<_> = vm
        .nics
        .iter()
        .filter(|n| n.device_config_id != -1)
        .collect();
    // Both network names given and neither on the VM: upstream finds no address.
    if let (Some(i), Some(e)) = (&nodes.internal_network_name, &nodes.external_network_name) {
        if !own
            .iter()
            .any(|n| n.network.eq_ignore_ascii_case(i) || n.network.eq_ignore_ascii_case(e))
        {
            return Vec::new();
        }
    }
    let candidates: Vec<Candidate> = own
        .iter()
        .flat_map(|n| {
            n.ips.iter().filter_map(|ip| {
                let ip: IpAddr = ip.parse().ok()?;
                (!guest_only(ip)).then(|| Candidate {
                    ip,
                    network: n.network.clone(),
                })
            })
        })
        .collect();
    let mut found_external = false;
    let mut found_any = false;
    for family in families {
        let (internal, external) = discover(&candidates, *family, nodes);
        if let Some(c) = internal {
            add(AddressType::InternalIP, c.ip.to_string());
            found_any = true;
        }
        if let Some(c) = external {
            add(AddressType::ExternalIP, c.ip.to_string());
            found_external = true;
            found_any = true;
        }
    }
    if !found_any {
        return Vec::new();
    }
    if let Some(h) = &vm.host_name {
        add(AddressType::Hostname, h.clone());
        add(AddressType::InternalDNS, h.clone());
        if found_external {
            add(AddressType::ExternalDNS, h.clone());
        }
    }
    // Kubelet and the API server read the Hostname first among equals; upstream lists it
    // first.
    out.sort_by_key(|a| a.kind != AddressType::Hostname);
    out
}

/// Loopback, link-local, unspecified: reachable from inside the guest alone.
fn guest_only(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.is_unspecified(),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || (v6.segments()[0] & 0xff0f) == 0xff02
        }
    }
}

fn discover<'a>(
    all: &'a [Candidate],
    family: IpFamily,
    nodes: &Nodes,
) -> (Option<&'a Candidate>, Option<&'a Candidate>) {
    let of_family: Vec<&Candidate> = all.iter().filter(|c| family.matches(c.ip)).collect();
    let outside = |excluded: &[Cidr]| -> Vec<&'a Candidate> {
        of_family
            .iter()
            .copied()
            .filter(|c| !excluded.iter().any(|x| x.contains(c.ip)))
            .collect()
    };
    let internal_ok = outside(&nodes.exclude_internal_subnets);
    let external_ok = outside(&nodes.exclude_external_subnets);
    if internal_ok.is_empty() && external_ok.is_empty() {
        return (None, None);
    }
    let by_subnet = |list: &[&'a Candidate], subnets: &[Cidr]| {
        subnets
            .iter()
            .find_map(|s| list.iter().copied().find(|c| s.contains(c.ip)))
    };
    let by_name = |list: &[&'a Candidate], name: &Option<String>| {
        name.as_ref().and_then(|n| {
            list.iter()
                .copied()
                .find(|c| c.network.eq_ignore_ascii_case(n))
        })
    };
    let mut internal = by_subnet(&internal_ok, &nodes.internal_subnets);
    let mut external = by_subnet(&external_ok, &nodes.external_subnets);
    if internal.is_none() {
        internal = by_name(&internal_ok, &nodes.internal_network_name);
    }
    if external.is_none() {
        external = by_name(&external_ok, &nodes.external_network_name);
    }
    if internal.is_none() && external.is_none() {
        internal = internal_ok.first().copied();
        external = external_ok.first().copied();
    }
    (internal, external)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soap::Moref;
    use crate::vms::GuestNic;

    fn vm(nics: &[(&str, &[&str], i64)]) -> Vm {
        Vm {
            moref: Moref::new("VirtualMachine", "vm-1"),
            name: "vm".into(),
            uuid: Some("u".into()),
            template: false,
            num_cpu: 2,
            memory_mb: 4096,
            guest_id: "ubuntu64Guest".into(),
            host_name: Some("node-1".into()),
            nics: nics
                .iter()
                .map(|(net, ips, id)| GuestNic {
                    network: (*net).into(),
                    ips: ips.iter().map(|s| (*s).to_owned()).collect(),
                    device_config_id: *id,
                })
                .collect(),
            power: "poweredOn".into(),
            connection: "connected".into(),
            host: None,
            unreadable: Vec::new(),
        }
    }

    fn pairs(a: &[NodeAddress]) -> Vec<(&'static str, &str)> {
        a.iter()
            .map(|a| (a.kind.as_str(), a.address.as_str()))
            .collect()
    }

    fn cidrs(s: &[&str]) -> Vec<Cidr> {
        s.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn without_a_policy_the_first_address_is_both_internal_and_external() {
        let v = vm(&[
            ("docker", &["172.17.0.1"], -1),
            (
                "VM Network",
                &["127.0.0.1", "fe80::1", "10.0.0.5", "10.0.0.6"],
                4000,
            ),
        ]);
        let a = of(&v, &Nodes::default(), &[IpFamily::V4]);
        assert_eq!(
            pairs(&a),
            [
                ("Hostname", "node-1"),
                ("InternalIP", "10.0.0.5"),
                ("ExternalIP", "10.0.0.5"),
                ("InternalDNS", "node-1"),
                ("ExternalDNS", "node-1"),
            ]
        );
    }

    #[test]
    fn subnets_then_network_names_choose_and_exclusions_are_never_chosen() {
        let v = vm(&[
            ("public", &["203.0.113.7"], 4000),
            ("private", &["192.168.1.10", "10.1.0.4"], 4001),
        ]);
        let mut nodes = Nodes {
            internal_subnets: cidrs(&["10.1.0.0/16"]),
            external_subnets: cidrs(&["203.0.113.0/24"]),
            ..Nodes::default()
        };
        let a = of(&v, &nodes, &[IpFamily::V4]);
        assert!(pairs(&a).contains(&("InternalIP", "10.1.0.4")), "{a:?}");
        assert!(pairs(&a).contains(&("ExternalIP", "203.0.113.7")), "{a:?}");
        // By name, with the first private address excluded from internal use.
        nodes = Nodes {
            internal_network_name: Some("PRIVATE".into()),
            exclude_internal_subnets: cidrs(&["192.168.0.0/16"]),
            ..Nodes::default()
        };
        let a = of(&v, &nodes, &[IpFamily::V4]);
        assert!(pairs(&a).contains(&("InternalIP", "10.1.0.4")), "{a:?}");
        assert!(
            !pairs(&a).iter().any(|(k, _)| *k == "ExternalIP"),
            "an internal match alone is what upstream returns: {a:?}"
        );
        // Both names given, neither on the VM: no address at all.
        nodes.external_network_name = Some("elsewhere".into());
        nodes.internal_network_name = Some("nowhere".into());
        assert!(of(&v, &nodes, &[IpFamily::V4]).is_empty());
    }

    #[test]
    fn families_are_taken_in_order_and_a_guest_without_addresses_reports_none() {
        let v = vm(&[("net", &["2001:db8::5", "10.0.0.5"], 4000)]);
        let a = of(&v, &Nodes::default(), &[IpFamily::V6, IpFamily::V4]);
        let internal: Vec<_> = a
            .iter()
            .filter(|a| a.kind == AddressType::InternalIP)
            .map(|a| a.address.as_str())
            .collect();
        assert_eq!(internal, ["2001:db8::5", "10.0.0.5"]);
        assert!(of(
            &vm(&[("net", &[], 4000)]),
            &Nodes::default(),
            &[IpFamily::V4]
        )
        .is_empty());
        assert!(of(
            &vm(&[("net", &["::1"], 4000)]),
            &Nodes::default(),
            &[IpFamily::V6]
        )
        .is_empty());
    }
}
