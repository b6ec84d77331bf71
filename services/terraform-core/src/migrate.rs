//! What every cloud's `migrate-state` shares: the report an operator reads, a state's
//! resources, and the rewritten state (its serial one up) or the refusal naming every
//! resource it cannot place.

use serde_json::Value;

/// What became of each resource of the state, for the operator to read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub moved: Vec<String>,
    pub dropped: Vec<String>,
    /// Resources the state lacked that the layout has, written as an import of the
    /// object that is already there.
    pub added: Vec<String>,
}

/// The resources of a Terraform state of format 4 (what both migrations read).
pub fn resources(state: &Value) -> Result<&Vec<Value>, String> {
    if state["version"] != 4 {
        return Err(format!(
            "a Terraform state of format 4 is expected, this is format {}",
            state["version"]
        ));
    }
    state["resources"]
        .as_array()
        .ok_or_else(|| "the state lists no resources".to_owned())
}

/// `state` with `resources` instead of its own and its serial one up, or the refusal
/// naming every resource in `unknown` (then nothing is to be written).
pub fn rewritten(
    state: &Value,
    resources: Vec<Value>,
    unknown: &[String],
) -> Result<Value, String> {
    if !unknown.is_empty() {
        return Err(format!(
            "not migrated, nothing written:\n  {}",
            unknown.join("\n  ")
        ));
    }
    let serial = state["serial"]
        .as_u64()
        .ok_or("the state has no serial number: not a state Terraform wrote")?;
    let mut migrated = state.clone();
    migrated["serial"] = serde_json::json!(serial + 1);
    migrated["resources"] = Value::Array(resources);
    Ok(migrated)
}
