//! Each command: build the request, make the call, shape the answer into a [`Report`].

use std::collections::HashMap;

use overcast_api::csi_v1 as csi;
use serde_json::{json, Value};
use tonic::transport::Channel;

use crate::cli::{AccessMode, ControllerCmd, Group, IdentityCmd, NodeCmd, Usage};
use crate::output::Report;

const ZONE_KEY: &str = "topology.kubernetes.io/zone";
const REGION_KEY: &str = "topology.kubernetes.io/region";

pub enum Failure {
    Rpc(tonic::Status),
    Usage(String),
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        Self::Rpc(s)
    }
}

type Result<T> = std::result::Result<T, Failure>;

pub async fn run(group: &Group, channel: Channel) -> Result<Report> {
    match group {
        Group::Identity(cmd) => identity(cmd, channel).await,
        Group::Controller(cmd) => controller(cmd, channel).await,
        Group::Node(cmd) => node(cmd, channel).await,
    }
}

/// `16Mi`, `1Gi`, `500M`, `4096`.
pub fn parse_size(s: &str) -> Result<i64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: i64 = num
        .parse()
        .map_err(|_| Failure::Usage(format!("size {s:?} is not a number with an optional unit")))?;
    let mult: i64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "K" | "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        other => {
            return Err(Failure::Usage(format!(
                "unknown size unit {other:?} (Ki Mi Gi Ti K M G T)"
            )))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| Failure::Usage(format!("size {s:?} is too large")))
}

/// `k=v` words, as `controller publish -q` prints them. A word without `=` goes on the
/// value before it: a value may hold spaces (vSphere's `type=vSphere CNS Block Volume`),
/// and the printed words come back split by the shell.
fn pairs(items: &[String], what: &str) -> Result<HashMap<String, String>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for word in items.iter().flat_map(|i| i.split_whitespace()) {
        match (word.split_once('='), out.last_mut()) {
            (Some((k, v)), _) if !k.is_empty() => out.push((k.to_owned(), v.to_owned())),
            (None, Some((_, value))) => {
                value.push(' ');
                value.push_str(word);
            }
            _ => return Err(Failure::Usage(format!("{what} {word:?} is not key=value"))),
        }
    }
    Ok(out.into_iter().collect())
}

fn capability(u: &Usage) -> csi::VolumeCapability {
    use csi::volume_capability::{
        access_mode::Mode, AccessMode as Am, AccessType, BlockVolume, MountVolume,
    };
    let mode = match u.access_mode {
        AccessMode::SingleNodeWriter => Mode::SingleNodeWriter,
        AccessMode::SingleNodeReaderOnly => Mode::SingleNodeReaderOnly,
        AccessMode::SingleNodeSingleWriter => Mode::SingleNodeSingleWriter,
        AccessMode::SingleNodeMultiWriter => Mode::SingleNodeMultiWriter,
        AccessMode::MultiNodeReaderOnly => Mode::MultiNodeReaderOnly,
        AccessMode::MultiNodeSingleWriter => Mode::MultiNodeSingleWriter,
        AccessMode::MultiNodeMultiWriter => Mode::MultiNodeMultiWriter,
    };
    let access_type = if u.block {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume {
            fs_type: u.fs.clone().unwrap_or_default(),
            mount_flags: u.mount_flags.clone(),
            volume_mount_group: String::new(),
        })
    };
    csi::VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(Am { mode: mode as i32 }),
    }
}

fn topology(zone: &Option<String>, region: &Option<String>) -> Option<csi::Topology> {
    let mut segments = HashMap::new();
    if let Some(z) = zone {
        segments.insert(ZONE_KEY.to_owned(), z.clone());
    }
    if let Some(r) = region {
        segments.insert(REGION_KEY.to_owned(), r.clone());
    }
    (!segments.is_empty()).then_some(csi::Topology { segments })
}

fn sorted(map: &HashMap<String, String>) -> Value {
    let m: serde_json::Map<String, Value> = map
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect();
    Value::Object(m)
}

fn volume_json(v: &csi::Volume) -> Value {
    json!({
        "volume_id": v.volume_id,
        "capacity_bytes": v.capacity_bytes,
        "accessible_topology": v.accessible_topology.iter().map(|t| sorted(&t.segments)).collect::<Vec<_>>(),
        "volume_context": sorted(&v.volume_context),
    })
}

fn condition_json(c: Option<&csi::VolumeCondition>) -> Value {
    c.map_or(
        Value::Null,
        |c| json!({"abnormal": c.abnormal, "message": c.message}),
    )
}

fn context_words(ctx: &HashMap<String, String>) -> String {
    let mut words: Vec<String> = ctx.iter().map(|(k, v)| format!("{k}={v}")).collect();
    words.sort();
    words.join(" ")
}

async fn identity(cmd: &IdentityCmd, channel: Channel) -> Result<Report> {
    let mut c = csi::identity_client::IdentityClient::new(channel);
    Ok(match cmd {
        IdentityCmd::Info => {
            let r = c
                .get_plugin_info(csi::GetPluginInfoRequest {})
                .await?
                .into_inner();
            Report::fields(
                json!({"name": r.name, "vendor_version": r.vendor_version, "manifest": sorted(&r.manifest)}),
                r.name.clone(),
            )
        }
        IdentityCmd::Capabilities => {
            use csi::plugin_capability::Type;
            let r = c
                .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
                .await?
                .into_inner();
            let names: Vec<String> = r
                .capabilities
                .iter()
                .filter_map(|c| match &c.r#type {
                    Some(Type::Service(s)) => Some(s.r#type().as_str_name().to_owned()),
                    Some(Type::VolumeExpansion(e)) => {
                        Some(format!("VOLUME_EXPANSION_{}", e.r#type().as_str_name()))
                    }
                    None => None,
                })
                .collect();
            list_report(names)
        }
        IdentityCmd::Probe => {
            let r = c.probe(csi::ProbeRequest {}).await?.into_inner();
            let ready = r.ready.unwrap_or(true);
            Report::fields(json!({"ready": ready}), ready.to_string())
        }
    })
}

fn list_report(names: Vec<String>) -> Report {
    Report {
        json: json!(names),
        header: vec!["CAPABILITY"],
        rows: names.iter().map(|n| vec![n.clone()]).collect(),
        quiet: names.join(" "),
    }
}

async fn controller(cmd: &ControllerCmd, channel: Channel) -> Result<Report> {
    let mut c = csi::controller_client::ControllerClient::new(channel);
    Ok(match cmd {
        ControllerCmd::Create {
            name,
            size,
            limit,
            params,
            zone,
            region,
            usage,
        } => {
            let required = size.as_deref().map(parse_size).transpose()?.unwrap_or(0);
            let limit = limit.as_deref().map(parse_size).transpose()?.unwrap_or(0);
            let req = csi::CreateVolumeRequest {
                name: name.clone(),
                capacity_range: (required != 0 || limit != 0).then_some(csi::CapacityRange {
                    required_bytes: required,
                    limit_bytes: limit,
                }),
                volume_capabilities: vec![capability(usage)],
                parameters: pairs(params, "--param")?,
                accessibility_requirements: topology(zone, region).map(|t| {
                    csi::TopologyRequirement {
                        requisite: vec![t.clone()],
                        preferred: vec![t],
                    }
                }),
                ..Default::default()
            };
            let v = c
                .create_volume(req)
                .await?
                .into_inner()
                .volume
                .unwrap_or_default();
            Report::fields(volume_json(&v), v.volume_id.clone())
        }
        ControllerCmd::Delete { volume_id } => {
            c.delete_volume(csi::DeleteVolumeRequest {
                volume_id: volume_id.clone(),
                ..Default::default()
            })
            .await?;
            Report::fields(json!({"deleted": volume_id}), volume_id.clone())
        }
        ControllerCmd::List { max, token } => {
            let r = c
                .list_volumes(csi::ListVolumesRequest {
                    max_entries: *max,
                    starting_token: token.clone(),
                })
                .await?
                .into_inner();
            let entries: Vec<Value> = r
                .entries
                .iter()
                .map(|e| {
                    let mut v = volume_json(e.volume.as_ref().unwrap_or(&csi::Volume::default()));
                    let status = e.status.clone().unwrap_or_default();
                    v["published_node_ids"] = json!(status.published_node_ids);
                    v["condition"] = condition_json(status.volume_condition.as_ref());
                    v
                })
                .collect();
            let rows = entries
                .iter()
                .map(|e| {
                    vec![
                        crate::output::plain(&e["volume_id"]),
                        // CSI volumes have no name; the Overcast driver returns it in the
                        // volume context (other drivers: "-").
                        e["volume_context"]
                            .get(overcast_api::VOLUME_NAME_KEY)
                            .map_or_else(|| "-".to_owned(), crate::output::plain),
                        crate::output::plain(&e["capacity_bytes"]),
                        crate::output::plain(&e["published_node_ids"]),
                        if e["condition"]["abnormal"] == json!(true) {
                            crate::output::plain(&e["condition"]["message"])
                        } else {
                            "healthy".into()
                        },
                    ]
                })
                .collect();
            let quiet = entries
                .iter()
                .map(|e| crate::output::plain(&e["volume_id"]))
                .collect::<Vec<_>>()
                .join("\n");
            Report {
                json: json!({"entries": entries, "next_token": r.next_token}),
                header: vec!["VOLUME", "NAME", "BYTES", "PUBLISHED", "CONDITION"],
                rows,
                quiet,
            }
        }
        ControllerCmd::Get { volume_id } => {
            let r = c
                .controller_get_volume(csi::ControllerGetVolumeRequest {
                    volume_id: volume_id.clone(),
                })
                .await?
                .into_inner();
            let mut v = volume_json(&r.volume.unwrap_or_default());
            let status = r.status.unwrap_or_default();
            v["published_node_ids"] = json!(status.published_node_ids);
            v["condition"] = condition_json(status.volume_condition.as_ref());
            Report::fields(v, volume_id.clone())
        }
        ControllerCmd::Publish {
            volume_id,
            node,
            readonly,
            usage,
        } => {
            let req = csi::ControllerPublishVolumeRequest {
                volume_id: volume_id.clone(),
                node_id: node.clone(),
                volume_capability: Some(capability(usage)),
                readonly: *readonly,
                ..Default::default()
            };
            let ctx = c
                .controller_publish_volume(req)
                .await?
                .into_inner()
                .publish_context;
            Report::fields(
                json!({"publish_context": sorted(&ctx)}),
                context_words(&ctx),
            )
        }
        ControllerCmd::Unpublish { volume_id, node } => {
            let req = csi::ControllerUnpublishVolumeRequest {
                volume_id: volume_id.clone(),
                node_id: node.clone(),
                ..Default::default()
            };
            c.controller_unpublish_volume(req).await?;
            Report::fields(json!({"unpublished": volume_id}), volume_id.clone())
        }
        ControllerCmd::Expand {
            volume_id,
            size,
            usage,
        } => {
            let req = csi::ControllerExpandVolumeRequest {
                volume_id: volume_id.clone(),
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: parse_size(size)?,
                    limit_bytes: 0,
                }),
                volume_capability: Some(capability(usage)),
                ..Default::default()
            };
            let r = c.controller_expand_volume(req).await?.into_inner();
            Report::fields(
                json!({"capacity_bytes": r.capacity_bytes, "node_expansion_required": r.node_expansion_required}),
                r.capacity_bytes.to_string(),
            )
        }
        ControllerCmd::Capacity {
            zone,
            region,
            params,
        } => {
            let req = csi::GetCapacityRequest {
                accessible_topology: topology(zone, region),
                parameters: pairs(params, "--param")?,
                ..Default::default()
            };
            let r = c.get_capacity(req).await?.into_inner();
            Report::fields(
                json!({
                    "available_capacity": r.available_capacity,
                    "maximum_volume_size": r.maximum_volume_size,
                    "minimum_volume_size": r.minimum_volume_size,
                }),
                r.available_capacity.to_string(),
            )
        }
        ControllerCmd::Capabilities => {
            let r = c
                .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
                .await?
                .into_inner();
            let names = r
                .capabilities
                .iter()
                .filter_map(|c| {
                    c.r#type
                        .as_ref()
                        .map(|csi::controller_service_capability::Type::Rpc(r)| {
                            r.r#type().as_str_name().to_owned()
                        })
                })
                .collect();
            list_report(names)
        }
    })
}

async fn node(cmd: &NodeCmd, channel: Channel) -> Result<Report> {
    let mut n = csi::node_client::NodeClient::new(channel);
    Ok(match cmd {
        NodeCmd::Info => {
            let r = n
                .node_get_info(csi::NodeGetInfoRequest {})
                .await?
                .into_inner();
            let topology = r
                .accessible_topology
                .map(|t| sorted(&t.segments))
                .unwrap_or(Value::Null);
            Report::fields(
                json!({"node_id": r.node_id, "max_volumes_per_node": r.max_volumes_per_node, "accessible_topology": topology}),
                r.node_id.clone(),
            )
        }
        NodeCmd::Capabilities => {
            let r = n
                .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
                .await?
                .into_inner();
            let names = r
                .capabilities
                .iter()
                .filter_map(|c| {
                    c.r#type
                        .as_ref()
                        .map(|csi::node_service_capability::Type::Rpc(r)| {
                            r.r#type().as_str_name().to_owned()
                        })
                })
                .collect();
            list_report(names)
        }
        NodeCmd::Stage {
            volume_id,
            staging,
            context,
            usage,
        } => {
            let req = csi::NodeStageVolumeRequest {
                volume_id: volume_id.clone(),
                publish_context: pairs(context, "--context")?,
                staging_target_path: staging.clone(),
                volume_capability: Some(capability(usage)),
                ..Default::default()
            };
            n.node_stage_volume(req).await?;
            Report::fields(
                json!({"staged": volume_id, "staging_target_path": staging}),
                staging.clone(),
            )
        }
        NodeCmd::Unstage { volume_id, staging } => {
            let req = csi::NodeUnstageVolumeRequest {
                volume_id: volume_id.clone(),
                staging_target_path: staging.clone(),
            };
            n.node_unstage_volume(req).await?;
            Report::fields(json!({"unstaged": volume_id}), volume_id.clone())
        }
        NodeCmd::Publish {
            volume_id,
            staging,
            target,
            readonly,
            context,
            usage,
        } => {
            let req = csi::NodePublishVolumeRequest {
                volume_id: volume_id.clone(),
                publish_context: pairs(context, "--context")?,
                staging_target_path: staging.clone(),
                target_path: target.clone(),
                volume_capability: Some(capability(usage)),
                readonly: *readonly,
                ..Default::default()
            };
            n.node_publish_volume(req).await?;
            Report::fields(
                json!({"published": volume_id, "target_path": target}),
                target.clone(),
            )
        }
        NodeCmd::Unpublish { volume_id, target } => {
            n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                volume_id: volume_id.clone(),
                target_path: target.clone(),
            })
            .await?;
            Report::fields(json!({"unpublished": volume_id}), volume_id.clone())
        }
        NodeCmd::Stats { volume_id, path } => {
            let req = csi::NodeGetVolumeStatsRequest {
                volume_id: volume_id.clone(),
                volume_path: path.clone(),
                staging_target_path: String::new(),
            };
            let r = n.node_get_volume_stats(req).await?.into_inner();
            let usage: Vec<Value> = r
                .usage
                .iter()
                .map(|u| json!({"unit": u.unit().as_str_name(), "total": u.total, "used": u.used, "available": u.available}))
                .collect();
            let rows = usage
                .iter()
                .map(|u| {
                    ["unit", "total", "used", "available"]
                        .iter()
                        .map(|k| crate::output::plain(&u[*k]))
                        .collect()
                })
                .collect();
            let condition = condition_json(r.volume_condition.as_ref());
            let quiet = crate::output::plain(&condition["message"]);
            Report {
                json: json!({"usage": usage, "condition": condition}),
                header: vec!["UNIT", "TOTAL", "USED", "AVAILABLE"],
                rows,
                quiet,
            }
        }
        NodeCmd::Expand {
            volume_id,
            path,
            size,
            staging,
            usage,
        } => {
            let required = size.as_deref().map(parse_size).transpose()?;
            let req = csi::NodeExpandVolumeRequest {
                volume_id: volume_id.clone(),
                volume_path: path.clone(),
                capacity_range: required.map(|r| csi::CapacityRange {
                    required_bytes: r,
                    limit_bytes: 0,
                }),
                staging_target_path: staging.clone(),
                volume_capability: Some(capability(usage)),
                ..Default::default()
            };
            let r = n.node_expand_volume(req).await?.into_inner();
            Report::fields(
                json!({"capacity_bytes": r.capacity_bytes}),
                r.capacity_bytes.to_string(),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        for (s, want) in [
            ("4096", 4096),
            ("16Mi", 16 << 20),
            ("1Gi", 1 << 30),
            ("500M", 500_000_000),
            ("2k", 2000),
        ] {
            assert!(matches!(parse_size(s), Ok(n) if n == want), "{s}");
        }
        for bad in ["", "Mi", "12XB", "99999999999999999999"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_values_split_on_spaces_and_equals() {
        let m = pairs(&["a=1 b=2".into(), "c=x=y".into()], "--context")
            .ok()
            .unwrap_or_default();
        assert_eq!(m.get("a").map(String::as_str), Some("1"));
        assert_eq!(m.get("c").map(String::as_str), Some("x=y"));
        assert!(pairs(&["novalue".into()], "--context").is_err());
        // vSphere's context, as `publish -q` prints it and an unquoted $CTX splits it.
        let words: Vec<String> = "diskUUID=ab type=vSphere CNS Block Volume wwn=ab"
            .split(' ')
            .map(str::to_owned)
            .collect();
        let m = pairs(&words, "--context").ok().unwrap_or_default();
        assert_eq!(
            m.get("type").map(String::as_str),
            Some("vSphere CNS Block Volume")
        );
        assert_eq!(m.get("wwn").map(String::as_str), Some("ab"));
        assert_eq!(m.len(), 3);
    }
}
