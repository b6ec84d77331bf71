//! OCCM's `[LoadBalancer]`, `[LoadBalancerClass "<name>"]` and `[Route]` sections, with
//! OCCM's defaults (`pkg/openstack/openstack.go`, `ReadConfig`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use overcast_cloud::config::IniSection;
use overcast_cloud::ConfigError;

use super::{at, boolean};

/// `[LoadBalancer]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerOpts {
    /// `enabled` (default true): false turns the service controller's balancers off.
    pub enabled: bool,
    pub subnet_id: Option<String>,
    pub member_subnet_id: Option<String>,
    pub network_id: Option<String>,
    pub floating_network_id: Option<String>,
    pub floating_subnet_id: Option<String>,
    /// `floating-subnet` / `floating-subnet-tags`: matched subnets (not in this build;
    /// a Service that needs them is refused and says so).
    pub floating_subnet: Option<String>,
    pub floating_subnet_tags: Option<String>,
    pub classes: BTreeMap<String, LbClass>,
    /// `lb-method` (ROUND_ROBIN).
    pub lb_method: String,
    /// `lb-provider` (amphora).
    pub lb_provider: String,
    pub create_monitor: bool,
    pub monitor_delay: Duration,
    pub monitor_timeout: Duration,
    pub monitor_max_retries: u32,
    pub monitor_max_retries_down: u32,
    /// `manage-security-groups`: not in this build (the provider warns at start).
    pub manage_security_groups: bool,
    pub internal_lb: bool,
    /// `node-selector`: `key=value,key2` (a bare key matches any value).
    pub node_selector: Option<String>,
    pub cascade_delete: bool,
    pub flavor_id: Option<String>,
    pub availability_zone: Option<String>,
    pub enable_ingress_hostname: bool,
    pub ingress_hostname_suffix: String,
    pub max_shared_lb: u32,
    /// `default-tls-container-ref`: TLS termination (Barbican) is not in this build.
    pub tls_container_ref: Option<String>,
    pub provider_requires_serial_api_calls: bool,
}

impl Default for LoadBalancerOpts {
    fn default() -> Self {
        Self {
            enabled: true,
            subnet_id: None,
            member_subnet_id: None,
            network_id: None,
            floating_network_id: None,
            floating_subnet_id: None,
            floating_subnet: None,
            floating_subnet_tags: None,
            classes: BTreeMap::new(),
            lb_method: "ROUND_ROBIN".into(),
            lb_provider: "amphora".into(),
            create_monitor: false,
            monitor_delay: Duration::from_secs(5),
            monitor_timeout: Duration::from_secs(3),
            monitor_max_retries: 1,
            monitor_max_retries_down: 3,
            manage_security_groups: false,
            internal_lb: false,
            node_selector: None,
            cascade_delete: true,
            flavor_id: None,
            availability_zone: None,
            enable_ingress_hostname: false,
            ingress_hostname_suffix: "nip.io".into(),
            max_shared_lb: 2,
            tls_container_ref: None,
            provider_requires_serial_api_calls: false,
        }
    }
}

/// `[LoadBalancerClass "<name>"]`: what a Service annotated
/// `loadbalancer.openstack.org/class: <name>` uses instead of `[LoadBalancer]`'s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LbClass {
    pub floating_network_id: Option<String>,
    pub floating_subnet_id: Option<String>,
    pub floating_subnet: Option<String>,
    pub floating_subnet_tags: Option<String>,
    pub network_id: Option<String>,
    pub subnet_id: Option<String>,
    pub member_subnet_id: Option<String>,
}

fn text(s: &IniSection, key: &str) -> Option<String> {
    s.get(key)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn number(
    s: &IniSection,
    key: &str,
    path: Option<&Path>,
    default: u32,
) -> Result<u32, ConfigError> {
    match text(s, key) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| at(s, key, path, format!("{key} {v:?} is not a number"))),
    }
}

/// A Go duration as gcfg's `MyDuration` reads it (`5s`, `1m30s`, `500ms`); a bare number
/// is taken as seconds.
fn duration(
    s: &IniSection,
    key: &str,
    path: Option<&Path>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    let Some(v) = text(s, key) else {
        return Ok(default);
    };
    parse_go_duration(&v).ok_or_else(|| at(s, key, path, format!("{key} {v:?} is not a duration")))
}

pub fn parse_go_duration(v: &str) -> Option<Duration> {
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = v;
    while !rest.is_empty() {
        let split = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        let (n, tail) = rest.split_at(split);
        let n: f64 = n.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(n * scale).ok()?;
        rest = next;
    }
    Some(total)
}

impl LoadBalancerOpts {
    pub(super) fn read(sections: &[IniSection], path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut o = Self::default();
        if let Some(s) = sections.iter().find(|s| s.name == "loadbalancer") {
            let flag = |key: &str, default: bool| -> Result<bool, ConfigError> {
                if s.get(key).is_some() {
                    boolean(s, key, path)
                } else {
                    Ok(default)
                }
            };
            o.enabled = flag("enabled", true)?;
            o.subnet_id = text(s, "subnet-id");
            o.member_subnet_id = text(s, "member-subnet-id");
            o.network_id = text(s, "network-id");
            o.floating_network_id = text(s, "floating-network-id");
            o.floating_subnet_id = text(s, "floating-subnet-id");
            o.floating_subnet = text(s, "floating-subnet");
            o.floating_subnet_tags = text(s, "floating-subnet-tags");
            if let Some(m) = text(s, "lb-method") {
                o.lb_method = m;
            }
            if let Some(p) = text(s, "lb-provider") {
                o.lb_provider = p;
            }
            o.create_monitor = flag("create-monitor", false)?;
            o.monitor_delay = duration(s, "monitor-delay", path, o.monitor_delay)?;
            o.monitor_timeout = duration(s, "monitor-timeout", path, o.monitor_timeout)?;
            o.monitor_max_retries = number(s, "monitor-max-retries", path, 1)?;
            o.monitor_max_retries_down = number(s, "monitor-max-retries-down", path, 3)?;
            o.manage_security_groups = flag("manage-security-groups", false)?;
            o.internal_lb = flag("internal-lb", false)?;
            o.node_selector = text(s, "node-selector");
            o.cascade_delete = flag("cascade-delete", true)?;
            o.flavor_id = text(s, "flavor-id");
            o.availability_zone = text(s, "availability-zone");
            o.enable_ingress_hostname = flag("enable-ingress-hostname", false)?;
            if let Some(suffix) = text(s, "ingress-hostname-suffix") {
                o.ingress_hostname_suffix = suffix;
            }
            o.max_shared_lb = number(s, "max-shared-lb", path, 2)?;
            o.tls_container_ref = text(s, "default-tls-container-ref");
            o.provider_requires_serial_api_calls =
                flag("provider-requires-serial-api-calls", false)?;
        }
        for s in sections.iter().filter(|s| s.name == "loadbalancerclass") {
            let Some(name) = s.sub.clone() else {
                return Err(at(
                    s,
                    "",
                    path,
                    "a [LoadBalancerClass] section needs a name: [LoadBalancerClass \"name\"]"
                        .into(),
                ));
            };
            o.classes.insert(
                name,
                LbClass {
                    floating_network_id: text(s, "floating-network-id"),
                    floating_subnet_id: text(s, "floating-subnet-id"),
                    floating_subnet: text(s, "floating-subnet"),
                    floating_subnet_tags: text(s, "floating-subnet-tags"),
                    network_id: text(s, "network-id"),
                    subnet_id: text(s, "subnet-id"),
                    member_subnet_id: text(s, "member-subnet-id"),
                },
            );
        }
        Ok(o)
    }
}

/// `[Route] router-id`: the router the pod network's routes go on.
pub(super) fn router_id(sections: &[IniSection]) -> Option<String> {
    sections
        .iter()
        .find(|s| s.name == "route")
        .and_then(|s| text(s, "router-id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_read_as_gcfg_reads_them() {
        assert_eq!(parse_go_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_go_duration("5 s"), None);
        assert_eq!(parse_go_duration("5x"), None);
    }

    #[test]
    fn defaults_and_classes() {
        let text = "[LoadBalancer]\nfloating-network-id = pub\nmonitor-delay = 10s\ncascade-delete = false\n\
                    [LoadBalancerClass \"internal\"]\nsubnet-id = s1\n";
        let sections = overcast_cloud::config::parse_ini(text).unwrap();
        let o = LoadBalancerOpts::read(&sections, None).unwrap();
        assert!(o.enabled);
        assert_eq!(o.floating_network_id.as_deref(), Some("pub"));
        assert_eq!(o.monitor_delay, Duration::from_secs(10));
        assert_eq!(o.monitor_timeout, Duration::from_secs(3));
        assert!(!o.cascade_delete);
        assert_eq!(o.lb_method, "ROUND_ROBIN");
        assert_eq!(o.classes["internal"].subnet_id.as_deref(), Some("s1"));
        let bad =
            overcast_cloud::config::parse_ini("[LoadBalancer]\nmonitor-delay = soon\n").unwrap();
        assert!(LoadBalancerOpts::read(&bad, None).is_err());
    }
}
