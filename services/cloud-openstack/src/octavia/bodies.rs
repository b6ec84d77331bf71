//! The bodies OCCM sends: a listener, its pool, the members, the monitor, named
//! `listener_<i>_<lb>`, `pool_<i>_<lb>`, `monitor_<i>_<lb>`.

use overcast_cloud::{Backend, LbPort};
use serde_json::{json, Value};

use super::conf::{Features, ServiceConf};
use super::{cut255, OctaviaLoadBalancers};

impl OctaviaLoadBalancers {
    pub(super) fn listener_body(
        &self,
        i: usize,
        name: &str,
        p: &LbPort,
        c: &ServiceConf,
        f: Features,
    ) -> Value {
        let mut l = json!({
            "name": cut255(format!("listener_{i}_{name}")),
            "protocol": c.listener_protocol(p.protocol.as_str()),
            "protocol_port": p.port,
            "connection_limit": c.conn_limit,
        });
        if f.tags {
            l["tags"] = json!([name]);
        }
        if let Some([client, connect, data, inspect]) = c.timeouts {
            l["timeout_client_data"] = json!(client);
            l["timeout_member_connect"] = json!(connect);
            l["timeout_member_data"] = json!(data);
            l["timeout_tcp_inspect"] = json!(inspect);
        }
        if c.keep_client_ip {
            l["insert_headers"] = json!({"X-Forwarded-For": "true"});
        }
        if let Some(cidrs) = &c.allowed_cidrs {
            l["allowed_cidrs"] = json!(cidrs);
        }
        l
    }

    pub(super) fn pool_body(
        &self,
        i: usize,
        name: &str,
        listener_protocol: &str,
        c: &ServiceConf,
        affinity: bool,
    ) -> Value {
        let mut p = json!({
            "name": cut255(format!("pool_{i}_{name}")),
            "protocol": c.pool_protocol(listener_protocol),
            "lb_algorithm": c.lb_method,
        });
        if affinity {
            p["session_persistence"] = json!({"type": "SOURCE_IP"});
        }
        p
    }

    pub(super) fn members(
        &self,
        p: &LbPort,
        nodes: &[&Backend],
        c: &ServiceConf,
        subnet: Option<&str>,
    ) -> Vec<Value> {
        nodes
            .iter()
            .map(|b| {
                let mut m =
                    json!({"name": b.node, "address": b.address, "protocol_port": p.node_port});
                if let Some(s) = subnet {
                    m["subnet_id"] = json!(s);
                }
                if let Some(hc) = c.health_check_node_port {
                    m["monitor_port"] = json!(hc);
                }
                m
            })
            .collect()
    }

    pub(super) fn monitor_body(
        &self,
        i: usize,
        name: &str,
        p: &LbPort,
        c: &ServiceConf,
        f: Features,
    ) -> Option<Value> {
        let m = c.monitor.as_ref()?;
        let kind = c.monitor_type(p.protocol.as_str(), f, &self.opts.lb_provider);
        let mut body = json!({
            "name": cut255(format!("monitor_{i}_{name}")),
            "type": kind,
            "delay": m.delay,
            "timeout": m.timeout,
            "max_retries": m.max_retries,
            "max_retries_down": m.max_retries_down,
        });
        if kind == "HTTP" {
            body["url_path"] = json!("/healthz");
            body["http_method"] = json!("GET");
            body["expected_codes"] = json!("200");
        }
        Some(body)
    }
}
