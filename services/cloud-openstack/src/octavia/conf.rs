//! What one Service asks of its load balancer: its annotations over `[LoadBalancer]`
//! (and the `[LoadBalancerClass]` it names), read as OCCM's `checkService` and
//! `makeSvcConf` read them — the same names, defaults and precedence — without a call.

use std::collections::BTreeMap;

use overcast_cloud::{CloudError, LoadBalancerSpec, Result};

use crate::config::LoadBalancerOpts;

pub const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";
const PREFIX: &str = "loadbalancer.openstack.org/";
pub const LOAD_BALANCER_ID: &str = "loadbalancer.openstack.org/load-balancer-id";
pub const LOAD_BALANCER_ADDRESS: &str = "loadbalancer.openstack.org/load-balancer-address";
/// The id this ccm wrote to [`LOAD_BALANCER_ID`], written beside it: an id the ccm wrote
/// names a balancer the ccm made, which it makes anew when that one is gone; any other
/// id is the user's (a shared balancer) or OCCM's, and its balancer gone is said, not
/// replaced.
pub const LOAD_BALANCER_ID_WRITTEN: &str = "openstack.overcast.dev/load-balancer-id";
pub const KEEP_FLOATING_IP: &str = "loadbalancer.openstack.org/keep-floatingip";
/// A floating IP we made says so in its description (OCCM deletes only those).
pub const FIP_DESCRIPTION: &str = "Floating IP for Kubernetes external service";

/// Octavia features by API version (OCCM's `IsOctaviaFeatureSupported`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    pub tags: bool,
    pub vip_acl: bool,
    pub flavors: bool,
    pub timeouts: bool,
    pub availability_zones: bool,
    pub http_monitors_on_udp: bool,
}

impl Features {
    pub fn of(version: (u32, u32), provider: &str) -> Self {
        let at_least = |minor: u32| version >= (2, minor);
        let ovn = provider == "ovn";
        Self {
            tags: at_least(5),
            vip_acl: !ovn && at_least(12),
            flavors: !ovn && at_least(6),
            timeouts: !ovn && at_least(1),
            availability_zones: !ovn && at_least(14),
            http_monitors_on_udp: !ovn && at_least(16),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitor {
    pub delay: u32,
    pub timeout: u32,
    pub max_retries: u32,
    pub max_retries_down: u32,
}

/// One Service's load-balancer settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConf {
    pub internal: bool,
    pub lb_id: Option<String>,
    pub network_id: Option<String>,
    pub subnet_id: Option<String>,
    /// Members' subnet when configured (else the load balancer's).
    pub member_subnet_id: Option<String>,
    pub port_id: Option<String>,
    pub floating_network_id: Option<String>,
    pub floating_subnet_id: Option<String>,
    pub keep_floating_ip: bool,
    pub conn_limit: i64,
    pub lb_method: String,
    /// `X-Forwarded-For`: the listener speaks HTTP and inserts the header.
    pub keep_client_ip: bool,
    /// `PROXY` or `PROXYV2` as the pool's protocol.
    pub proxy_protocol: Option<&'static str>,
    /// Listener timeouts in ms, when Octavia has them (client data, member connect,
    /// member data, TCP inspect).
    pub timeouts: Option<[i64; 4]>,
    pub allowed_cidrs: Option<Vec<String>>,
    pub flavor_id: Option<String>,
    pub availability_zone: Option<String>,
    pub monitor: Option<Monitor>,
    pub health_check_node_port: Option<u16>,
    pub node_selector: BTreeMap<String, String>,
    pub hostname: Option<String>,
}

fn annotation<'a>(spec: &'a LoadBalancerSpec, key: &str) -> Option<&'a str> {
    spec.annotations.get(key).map(String::as_str)
}

fn ours(key: &str) -> String {
    format!("{PREFIX}{key}")
}

/// OCCM's `getBoolFromServiceAnnotation`: "true"/"false", anything else the default.
fn flag(spec: &LoadBalancerSpec, key: &str, default: bool) -> bool {
    match annotation(spec, key) {
        Some("true") => true,
        Some("false") => false,
        _ => default,
    }
}

/// OCCM's `getIntFromServiceAnnotation`: a number, anything else the default.
fn int(spec: &LoadBalancerSpec, key: &str, default: i64) -> i64 {
    annotation(spec, key)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The annotation if present, else the fallback; empty is unset (OCCM reads an empty
/// annotation as "", not as the fallback: an empty `floating-network-id` goes to
/// autodetection, not to `[LoadBalancer]`'s).
fn string(spec: &LoadBalancerSpec, key: &str, fallback: Option<&String>) -> Option<String> {
    match annotation(spec, key) {
        Some(v) => Some(v.to_owned()).filter(|v| !v.is_empty()),
        None => fallback.cloned().filter(|v| !v.is_empty()),
    }
}

/// `key=value,key2` → a selector (a bare key matches any value).
pub fn selector(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.trim().to_owned(), v.trim().to_owned()),
            None => (kv.to_owned(), String::new()),
        })
        .collect()
}

impl ServiceConf {
    pub fn read(spec: &LoadBalancerSpec, opts: &LoadBalancerOpts, f: Features) -> Result<Self> {
        let invalid = |why: String| CloudError::InvalidArgument(format!("{}: {why}", spec.service));
        if spec.ports.is_empty() {
            return Err(invalid("no ports for a load balancer".into()));
        }
        let class_name = annotation(spec, &ours("class")).filter(|c| !c.is_empty());
        let class = match class_name {
            Some(c) => Some(
                opts.classes
                    .get(c)
                    .ok_or_else(|| invalid(format!("invalid loadbalancer class {c:?}")))?,
            ),
            None => None,
        };
        if let Some(tls) = string(
            spec,
            &ours("default-tls-container-ref"),
            opts.tls_container_ref.as_ref(),
        ) {
            return Err(invalid(format!(
                "TLS termination ({tls}) needs Barbican, which this provider does not speak yet"
            )));
        }
        let internal = opts.internal_lb || flag(spec, INTERNAL, false);
        let pick = |key: &str, from_class: Option<&String>, from_opts: Option<&String>| {
            string(spec, &ours(key), None)
                .or_else(|| from_class.cloned())
                .or_else(|| from_opts.cloned())
                .filter(|v| !v.is_empty())
        };
        let network_id = pick(
            "network-id",
            class.and_then(|c| c.network_id.as_ref()),
            opts.network_id.as_ref(),
        );
        let subnet_id = pick(
            "subnet-id",
            class.and_then(|c| c.subnet_id.as_ref()),
            opts.subnet_id.as_ref(),
        );
        let member_subnet_id = pick(
            "member-subnet-id",
            class.and_then(|c| c.member_subnet_id.as_ref()),
            opts.member_subnet_id.as_ref(),
        )
        .or_else(|| opts.subnet_id.clone());
        let (mut floating_network_id, mut floating_subnet_id) = (None, None);
        if !internal {
            // A class's floating network wins, then the annotation, then [LoadBalancer].
            floating_network_id = class
                .and_then(|c| c.floating_network_id.clone())
                .or_else(|| {
                    string(
                        spec,
                        &ours("floating-network-id"),
                        opts.floating_network_id.as_ref(),
                    )
                });
            floating_subnet_id = class
                .and_then(|c| c.floating_subnet_id.clone())
                .or_else(|| string(spec, &ours("floating-subnet-id"), None))
                .or_else(|| opts.floating_subnet_id.clone());
            let by_match = class
                .and_then(|c| c.floating_subnet.clone().or(c.floating_subnet_tags.clone()))
                .or_else(|| string(spec, &ours("floating-subnet"), None))
                .or_else(|| string(spec, &ours("floating-subnet-tags"), None))
                .or_else(|| {
                    opts.floating_subnet
                        .clone()
                        .or(opts.floating_subnet_tags.clone())
                });
            if floating_subnet_id.is_none() {
                if let Some(m) = by_match {
                    return Err(invalid(format!(
                        "floating subnets matched by name or tags ({m}) are not in this build; \
                         name one with floating-subnet-id"
                    )));
                }
            }
        }
        let keep_client_ip = flag(spec, &ours("x-forwarded-for"), false);
        let proxy_protocol = match annotation(spec, &ours("proxy-protocol")) {
            Some("true") | Some("v1") => Some("PROXY"),
            Some("v2") => Some("PROXYV2"),
            _ => None,
        };
        if proxy_protocol.is_some() && keep_client_ip {
            return Err(invalid(format!(
                "annotation {} and {} cannot be used together",
                ours("proxy-protocol"),
                ours("x-forwarded-for")
            )));
        }
        let enable_monitor = flag(spec, &ours("enable-health-monitor"), opts.create_monitor);
        let secs = |d: std::time::Duration| d.as_secs() as i64;
        let monitor = enable_monitor.then(|| Monitor {
            delay: int(
                spec,
                &ours("health-monitor-delay"),
                secs(opts.monitor_delay),
            )
            .max(0) as u32,
            timeout: int(
                spec,
                &ours("health-monitor-timeout"),
                secs(opts.monitor_timeout),
            )
            .max(0) as u32,
            max_retries: int(
                spec,
                &ours("health-monitor-max-retries"),
                opts.monitor_max_retries.into(),
            )
            .max(0) as u32,
            max_retries_down: int(
                spec,
                &ours("health-monitor-max-retries-down"),
                opts.monitor_max_retries_down.into(),
            )
            .max(0) as u32,
        });
        let timeouts = f.timeouts.then(|| {
            [
                int(spec, &ours("timeout-client-data"), 50000),
                int(spec, &ours("timeout-member-connect"), 5000),
                int(spec, &ours("timeout-member-data"), 50000),
                int(spec, &ours("timeout-tcp-inspect"), 0),
            ]
        });
        let allowed_cidrs = if f.vip_acl {
            let ranges = if spec.source_ranges.is_empty() {
                annotation(
                    spec,
                    "service.beta.kubernetes.io/load-balancer-source-ranges",
                )
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
            } else {
                spec.source_ranges.clone()
            };
            for r in &ranges {
                r.parse::<overcast_cloud::cidr::Cidr>()
                    .map_err(|e| invalid(format!("source range {r:?}: {e}")))?;
            }
            // OCCM's default: everyone (of the address family).
            Some(if ranges.is_empty() {
                vec!["0.0.0.0/0".to_owned()]
            } else {
                ranges
            })
        } else {
            None
        };
        Ok(Self {
            internal,
            lb_id: string(spec, LOAD_BALANCER_ID, None),
            network_id,
            subnet_id,
            member_subnet_id,
            port_id: string(spec, &ours("port-id"), None),
            floating_network_id,
            floating_subnet_id,
            keep_floating_ip: flag(spec, KEEP_FLOATING_IP, false),
            conn_limit: int(spec, &ours("connection-limit"), -1),
            lb_method: string(spec, &ours("lb-method"), None)
                .unwrap_or_else(|| opts.lb_method.clone()),
            keep_client_ip,
            proxy_protocol,
            timeouts,
            allowed_cidrs,
            flavor_id: if f.flavors {
                string(spec, &ours("flavor-id"), opts.flavor_id.as_ref())
            } else {
                None
            },
            availability_zone: if f.availability_zones {
                string(
                    spec,
                    &ours("availability-zone"),
                    opts.availability_zone.as_ref(),
                )
            } else {
                None
            },
            health_check_node_port: if enable_monitor && spec.local_traffic {
                spec.health_check_node_port
            } else {
                None
            },
            monitor,
            node_selector: selector(
                &string(spec, &ours("node-selector"), opts.node_selector.as_ref())
                    .unwrap_or_default(),
            ),
            hostname: string(spec, &ours("hostname"), None),
        })
    }

    /// The listener's protocol for a Service port: HTTP when the client's address goes
    /// in a header, else the port's own.
    pub fn listener_protocol(&self, port_protocol: &str) -> String {
        if self.keep_client_ip {
            "HTTP".into()
        } else {
            port_protocol.into()
        }
    }

    /// The pool's protocol for a listener: PROXY(V2) when asked, HTTP for headers.
    pub fn pool_protocol(&self, listener_protocol: &str) -> String {
        match self.proxy_protocol {
            Some(p) => p.into(),
            None if self.keep_client_ip => "HTTP".into(),
            None => listener_protocol.into(),
        }
    }

    /// The monitor's type for a port (OCCM's `buildMonitorCreateOpts`).
    pub fn monitor_type(&self, port_protocol: &str, f: Features, provider: &str) -> String {
        let http_ok = provider != "ovn" && (port_protocol != "UDP" || f.http_monitors_on_udp);
        if self.health_check_node_port.is_some() && http_ok {
            "HTTP".into()
        } else if port_protocol == "UDP" {
            "UDP-CONNECT".into()
        } else {
            port_protocol.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overcast_cloud::{LbPort, Protocol, ServiceRef};

    fn spec(annotations: &[(&str, &str)]) -> LoadBalancerSpec {
        LoadBalancerSpec {
            name: "a0123".into(),
            service: ServiceRef {
                namespace: "shop".into(),
                name: "web".into(),
                uid: "0123".into(),
            },
            ports: vec![LbPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: 30080,
            }],
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..LoadBalancerSpec::default()
        }
    }

    const NEW: Features = Features {
        tags: true,
        vip_acl: true,
        flavors: true,
        timeouts: true,
        availability_zones: true,
        http_monitors_on_udp: true,
    };

    #[test]
    fn features_follow_the_api_version_and_provider() {
        assert_eq!(Features::of((2, 26), "amphora"), NEW);
        let old = Features::of((2, 4), "amphora");
        assert!(!old.tags && old.timeouts && !old.vip_acl);
        let ovn = Features::of((2, 26), "ovn");
        assert!(ovn.tags && !ovn.timeouts && !ovn.vip_acl);
    }

    #[test]
    fn annotations_over_the_file_as_occm_reads_them() {
        let mut opts = LoadBalancerOpts {
            floating_network_id: Some("pub".into()),
            subnet_id: Some("s-conf".into()),
            ..LoadBalancerOpts::default()
        };
        let c = ServiceConf::read(&spec(&[]), &opts, NEW).unwrap();
        assert_eq!(c.floating_network_id.as_deref(), Some("pub"));
        assert_eq!(c.subnet_id.as_deref(), Some("s-conf"));
        assert_eq!(c.member_subnet_id.as_deref(), Some("s-conf"));
        assert_eq!(c.timeouts, Some([50000, 5000, 50000, 0]));
        assert_eq!(c.allowed_cidrs, Some(vec!["0.0.0.0/0".to_owned()]));
        assert_eq!(c.conn_limit, -1);
        assert!(c.monitor.is_none());

        // An empty floating-network-id annotation leaves the network to autodetection.
        let c = ServiceConf::read(
            &spec(&[("loadbalancer.openstack.org/floating-network-id", "")]),
            &opts,
            NEW,
        )
        .unwrap();
        assert_eq!(c.floating_network_id, None);

        // Internal: no floating network at all.
        let c = ServiceConf::read(&spec(&[(INTERNAL, "true")]), &opts, NEW).unwrap();
        assert!(c.internal && c.floating_network_id.is_none());

        let c = ServiceConf::read(
            &spec(&[
                ("loadbalancer.openstack.org/enable-health-monitor", "true"),
                ("loadbalancer.openstack.org/health-monitor-delay", "9"),
                ("loadbalancer.openstack.org/timeout-client-data", "1000"),
                ("loadbalancer.openstack.org/x-forwarded-for", "true"),
            ]),
            &opts,
            NEW,
        )
        .unwrap();
        assert_eq!(
            c.monitor,
            Some(Monitor {
                delay: 9,
                timeout: 3,
                max_retries: 1,
                max_retries_down: 3
            })
        );
        assert_eq!(c.timeouts.unwrap()[0], 1000);
        assert_eq!(c.listener_protocol("TCP"), "HTTP");
        assert_eq!(c.pool_protocol("HTTP"), "HTTP");

        let both = spec(&[
            ("loadbalancer.openstack.org/x-forwarded-for", "true"),
            ("loadbalancer.openstack.org/proxy-protocol", "v2"),
        ]);
        assert!(ServiceConf::read(&both, &opts, NEW).is_err());
        let proxy = spec(&[("loadbalancer.openstack.org/proxy-protocol", "v2")]);
        let c = ServiceConf::read(&proxy, &opts, NEW).unwrap();
        assert_eq!(c.pool_protocol("TCP"), "PROXYV2");

        // A class that is not configured is refused; one that is supplies the subnets.
        let classy = spec(&[("loadbalancer.openstack.org/class", "inner")]);
        assert!(ServiceConf::read(&classy, &opts, NEW).is_err());
        opts.classes.insert(
            "inner".into(),
            crate::config::LbClass {
                subnet_id: Some("s-class".into()),
                floating_network_id: Some("pub2".into()),
                ..Default::default()
            },
        );
        let c = ServiceConf::read(&classy, &opts, NEW).unwrap();
        assert_eq!(c.subnet_id.as_deref(), Some("s-class"));
        assert_eq!(c.floating_network_id.as_deref(), Some("pub2"));
    }

    #[test]
    fn monitor_types_follow_occm() {
        let opts = LoadBalancerOpts::default();
        let mut s = spec(&[("loadbalancer.openstack.org/enable-health-monitor", "true")]);
        let c = ServiceConf::read(&s, &opts, NEW).unwrap();
        assert_eq!(c.monitor_type("TCP", NEW, "amphora"), "TCP");
        assert_eq!(c.monitor_type("UDP", NEW, "amphora"), "UDP-CONNECT");
        s.local_traffic = true;
        s.health_check_node_port = Some(31000);
        let c = ServiceConf::read(&s, &opts, NEW).unwrap();
        assert_eq!(c.monitor_type("TCP", NEW, "amphora"), "HTTP");
        assert_eq!(c.monitor_type("TCP", NEW, "ovn"), "TCP");
    }

    #[test]
    fn selectors_parse_as_occm_does() {
        let s = selector("role=edge, zone ,tier=web");
        assert_eq!(s.get("role").map(String::as_str), Some("edge"));
        assert_eq!(s.get("zone").map(String::as_str), Some(""));
        assert_eq!(s.len(), 3);
    }
}
