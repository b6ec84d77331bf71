//! The Cluster API types both providers' kinds are made of, shaped as the CRDs
//! controller-gen writes for them (`sigs.k8s.io/cluster-api` v1beta1 and v1beta2, and
//! `metav1.Condition`): the same names, required fields and enums, so the API server
//! accepts and refuses what it does for Deckhouse's CRDs.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `clusterv1.APIEndpoint`: where the workload cluster's API server listens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApiEndpoint {
    /// The hostname on which the API server is serving.
    pub host: String,
    /// The port on which the API server is serving.
    pub port: i32,
}

/// One address of a machine (`clusterv1.MachineAddress`): `Hostname`, `ExternalIP`,
/// `InternalIP`, `ExternalDNS` or `InternalDNS`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MachineAddress {
    /// MachineAddressType describes a valid MachineAddress type.
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

/// A Cluster API v1beta1 condition (`clusterv1.Condition`), what the zVirt kinds carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct V1Beta1Condition {
    /// Type of condition in CamelCase or in foo.example.com/CamelCase.
    #[serde(rename = "type")]
    pub type_: String,
    /// Status of the condition, one of True, False, Unknown.
    pub status: String,
    /// Error, Warning or Info; set only when the status is False.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// Last time the condition transitioned from one status to another.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `metav1.Condition`, what the Cluster API v1beta2 contract (and so the DVP kinds)
/// carries: every field but `observedGeneration` required, the status an enum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetaCondition {
    /// Type of condition in CamelCase or in foo.example.com/CamelCase.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    #[schemars(regex(
        pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
    ))]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0))]
    pub observed_generation: Option<i64>,
    /// Last time the condition transitioned from one status to another.
    pub last_transition_time: String,
    /// The reason for the condition's last transition, in CamelCase.
    #[schemars(length(min = 1, max = 1024))]
    #[schemars(regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"))]
    pub reason: String,
    #[schemars(length(max = 32768))]
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// The part of `metav1.ObjectMeta` a machine template's `spec.template.metadata` holds
/// (`clusterv1.ObjectMeta`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMeta {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A `resource.Quantity` (`8Gi`, `20Gi`, or a bare number), as the API server stores it:
/// written as a string or an integer. Kept as the text it came as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity(pub String);

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(Self(s)),
            serde_json::Value::Number(n) => Ok(Self(n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "a quantity is a string or a number, not {other}"
            ))),
        }
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    /// What controller-gen writes for a `resource.Quantity` field, less its `anyOf` of
    /// the two types (kube's structural rewrite empties it; `x-kubernetes-int-or-string`
    /// alone says the same to the API server).
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true
        })
    }
}

/// Marks `fields` of an object schema required, as controller-gen does for a Go field
/// without `omitempty` even when it has a default (the API server defaults before it
/// validates, so such a field may be left out only where its parent has a default).
pub fn require(schema: &mut Schema, fields: &[&str]) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let required = obj
        .entry("required")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let Some(list) = required.as_array_mut() {
        for f in fields {
            if !list.iter().any(|v| v == f) {
                list.push(serde_json::Value::String((*f).to_owned()));
            }
        }
        list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    }
}

/// The Cluster API contract's rule for a machine template: `spec.template.spec` never
/// changes once made (a new template is made instead), as upstream providers' webhooks
/// answer, here as the CRD's own validation rule (Kubernetes ≥ 1.25 with CRD validation
/// rules, on by default from 1.25).
pub const IMMUTABLE_RULE: &str = "self == oldSelf";
pub const IMMUTABLE_MESSAGE: &str =
    "spec.template.spec field is immutable. Please create a new resource instead.";

pub fn immutable(s: &mut Schema) {
    if let Some(obj) = s.as_object_mut() {
        obj.insert(
            "x-kubernetes-validations".into(),
            serde_json::json!([{"rule": IMMUTABLE_RULE, "message": IMMUTABLE_MESSAGE}]),
        );
    }
}

/// `+kubebuilder:validation:MinProperties=1`: an initialization is written with something
/// in it or not at all.
pub fn at_least_one_property(s: &mut Schema) {
    if let Some(obj) = s.as_object_mut() {
        obj.insert("minProperties".into(), 1.into());
    }
}
