//! Node address selection, the policy users of the vSphere and OpenStack providers ask
//! for: which subnets are internal and which external, which to leave out, and the order
//! (kubelet and the API server take the first InternalIP).

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
}
