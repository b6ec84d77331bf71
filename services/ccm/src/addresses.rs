//! Node address selection, the policy users of the vSphere and OpenStack providers ask
//! for: which subnets are internal and which external, which to leave out, and the order
//! (kubelet and the API server take the first InternalIP) — and the address kubelet was
//! told to use (`--node-ip`), which wins over every policy as it does in the upstream
//! cloud-node controller.

use k8s_openapi::api::core::v1::NodeAddress as K8sAddress;
use overcast_cloud::{AddressType, NodeAddress};
use std::net::IpAddr;

pub use overcast_cloud::cidr::Cidr;

#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    /// Addresses in these subnets are InternalIP.
    pub internal_subnets: Vec<Cidr>,
    /// Addresses in these subnets are ExternalIP.
    pub external_subnets: Vec<Cidr>,
    /// Addresses in these subnets are left out.
    pub excluded_subnets: Vec<Cidr>,
    /// Addresses in earlier subnets come first (the rest keep the cloud's order).
    pub sort_order: Vec<Cidr>,
}

impl AddressPolicy {
    pub fn apply(&self, addresses: &[NodeAddress]) -> Vec<NodeAddress> {
        let mut out: Vec<NodeAddress> = Vec::new();
        for a in addresses {
            let mut a = a.clone();
            if let Ok(ip) = a.address.parse::<IpAddr>() {
                if self.excluded_subnets.iter().any(|c| c.contains(ip)) {
                    continue;
                }
                if self.internal_subnets.iter().any(|c| c.contains(ip)) {
                    a.kind = AddressType::InternalIP;
                } else if self.external_subnets.iter().any(|c| c.contains(ip)) {
                    a.kind = AddressType::ExternalIP;
                }
            }
            if !out.contains(&a) {
                out.push(a);
            }
        }
        let rank = |a: &NodeAddress| {
            a.address
                .parse::<IpAddr>()
                .ok()
                .and_then(|ip| self.sort_order.iter().position(|c| c.contains(ip)))
                .unwrap_or(self.sort_order.len())
        };
        out.sort_by_key(rank);
        out
    }
}

/// What kubelet run with `--cloud-provider=external --node-ip=IP[,IP]` writes on its
/// Node: the addresses it was told to use, for the ccm to honour.
pub const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// The cloud's addresses with kubelet's `--node-ip` honoured, as k8s.io/cloud-provider's
/// `GetNodeAddressesFromNodeIP` does it: each given IP must be among the cloud's (compared
/// as addresses, not strings); for every address type a given IP matched, that IP is the
/// only address of the type, listed first; the other types follow in the cloud's order.
/// A node whose VM has several NICs, or a host with a bridge beside its uplink, is then
/// reached on the network its kubelet was told to use, not on whichever the cloud lists
/// first. The value is read strictly, as upstream's `ParseNodeIPAnnotation`: one IP, or
/// one of each family, comma-separated.
pub fn with_node_ip(provided: &str, cloud: &[K8sAddress]) -> Result<Vec<K8sAddress>, String> {
    let ips: Vec<IpAddr> = provided
        .split(',')
        .map(|ip| {
            ip.parse::<IpAddr>()
                .map_err(|_| format!("{PROVIDED_NODE_IP} {provided:?}: {ip:?} is no IP address"))
        })
        .collect::<Result<_, _>>()?;
    let dual_stack_pair = ips.len() == 2
        && ips[0].is_ipv4() != ips[1].is_ipv4()
        && !ips.iter().any(IpAddr::is_unspecified);
    if ips.len() > 2 || (ips.len() == 2 && !dual_stack_pair) {
        return Err(format!(
            "{PROVIDED_NODE_IP} {provided:?}: must be one IP address or one of each family"
        ));
    }
    // As Go's `net.IP.Equal`: an IPv4-mapped IPv6 address is its IPv4 address.
    let ips: Vec<IpAddr> = ips.into_iter().map(|ip| ip.to_canonical()).collect();
    let same = |a: &K8sAddress, ip: &IpAddr| {
        a.address
            .parse::<IpAddr>()
            .ok()
            .map(|a| a.to_canonical())
            .as_ref()
            == Some(ip)
    };
    let mut out: Vec<K8sAddress> = Vec::new();
    let mut enforced_types: Vec<&str> = Vec::new();
    for ip in &ips {
        let matched: Vec<&K8sAddress> = cloud.iter().filter(|a| same(a, ip)).collect();
        if matched.is_empty() {
            return Err(format!(
                "the cloud does not list the address kubelet was given ({PROVIDED_NODE_IP} {ip})"
            ));
        }
        for a in matched {
            out.push(a.clone());
            enforced_types.push(&a.type_);
        }
    }
    out.extend(
        cloud
            .iter()
            .filter(|a| !enforced_types.contains(&a.type_.as_str()))
            .cloned(),
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(kind: AddressType, a: &str) -> NodeAddress {
        NodeAddress {
            kind,
            address: a.into(),
        }
    }

    #[test]
    fn subnets_decide_type_exclusion_and_order() {
        let policy = AddressPolicy {
            internal_subnets: vec!["10.0.0.0/8".parse().unwrap()],
            external_subnets: vec!["203.0.113.0/24".parse().unwrap()],
            excluded_subnets: vec!["172.17.0.0/16".parse().unwrap()],
            sort_order: vec![
                "192.168.0.0/16".parse().unwrap(),
                "10.0.0.0/8".parse().unwrap(),
            ],
        };
        let cloud = vec![
            addr(AddressType::InternalIP, "203.0.113.7"),
            addr(AddressType::InternalIP, "172.17.0.1"),
            addr(AddressType::ExternalIP, "10.1.2.3"),
            addr(AddressType::InternalIP, "192.168.1.5"),
            addr(AddressType::Hostname, "node-1"),
        ];
        assert_eq!(
            policy.apply(&cloud),
            vec![
                addr(AddressType::InternalIP, "192.168.1.5"),
                addr(AddressType::InternalIP, "10.1.2.3"),
                addr(AddressType::ExternalIP, "203.0.113.7"),
                addr(AddressType::Hostname, "node-1"),
            ]
        );
        assert_eq!(
            AddressPolicy::default().apply(&cloud),
            cloud,
            "no policy: the cloud's addresses as they are"
        );
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd00::2".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
    }

    fn k8s(kind: &str, a: &str) -> K8sAddress {
        K8sAddress {
            type_: kind.into(),
            address: a.into(),
        }
    }

    #[test]
    fn kubelets_node_ip_is_the_only_address_of_its_type() {
        // A host's uplink, its bridge, an IPv6 address, an external one (in the cloud's
        // order), and kubelet told to use the bridge's.
        let cloud = vec![
            k8s("InternalIP", "192.168.122.10"),
            k8s("InternalIP", "10.88.0.1"),
            k8s("InternalIP", "fd00::0a"),
            k8s("ExternalIP", "203.0.113.7"),
            k8s("Hostname", "vm"),
        ];
        assert_eq!(
            with_node_ip("10.88.0.1", &cloud).unwrap(),
            vec![
                k8s("InternalIP", "10.88.0.1"),
                k8s("ExternalIP", "203.0.113.7"),
                k8s("Hostname", "vm"),
            ]
        );
        // Dual stack: both kept, in kubelet's order; compared as addresses (fd00::a is
        // the cloud's fd00::0a).
        assert_eq!(
            with_node_ip("fd00::a,192.168.122.10", &cloud).unwrap(),
            vec![
                k8s("InternalIP", "fd00::0a"),
                k8s("InternalIP", "192.168.122.10"),
                k8s("ExternalIP", "203.0.113.7"),
                k8s("Hostname", "vm"),
            ]
        );
        // The external address given: the internal ones stay, the other external goes.
        let two_external = [cloud.clone(), vec![k8s("ExternalIP", "198.51.100.1")]].concat();
        assert_eq!(
            with_node_ip("203.0.113.7", &two_external).unwrap(),
            vec![
                k8s("ExternalIP", "203.0.113.7"),
                k8s("InternalIP", "192.168.122.10"),
                k8s("InternalIP", "10.88.0.1"),
                k8s("InternalIP", "fd00::0a"),
                k8s("Hostname", "vm"),
            ]
        );
    }

    #[test]
    fn a_node_ip_the_cloud_lacks_or_cannot_be_read_is_refused() {
        let cloud = vec![k8s("InternalIP", "10.0.0.5"), k8s("Hostname", "vm")];
        for bad in [
            "10.0.0.6",
            "10.0.0.5,10.0.0.6",
            "10.0.0.5,",
            "",
            "vm",
            "10.0.0.5,fd00::1,10.0.0.7",
            "0.0.0.0,::",
            " 10.0.0.5",
        ] {
            assert!(with_node_ip(bad, &cloud).is_err(), "{bad:?}");
        }
        assert_eq!(
            with_node_ip("::ffff:10.0.0.5", &cloud).unwrap()[0].address,
            "10.0.0.5",
            "an IPv4-mapped address is its IPv4 address, as upstream compares them"
        );
        let err = with_node_ip("10.0.0.6", &cloud).unwrap_err();
        assert!(err.contains("10.0.0.6"), "{err}");
    }
}
