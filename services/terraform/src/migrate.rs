//! `terraform-provider-overcast migrate-state`: a state Deckhouse's layouts wrote, on
//! stdin, rewritten for ours on stdout; what moved and what was dropped on stderr. The
//! state says which cloud it is of: the oVirt provider's resources are zVirt's
//! ([`crate::zvirt::migrate`]), anything else is read as a DVP state
//! ([`crate::dvp::migrate`]), which refuses what it does not know.

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

/// The migration `state` needs.
pub fn migrate(state: &Value) -> Result<(Value, Report), String> {
    if crate::zvirt::migrate::is_zvirt(state) {
        crate::zvirt::migrate::migrate(state)
    } else {
        crate::dvp::migrate::migrate(state)
    }
}

/// The command: the state on stdin, the migrated state on stdout, what moved on stderr.
pub fn run() -> Result<(), String> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
        .map_err(|e| format!("reading the state from stdin: {e}"))?;
    let state: Value =
        serde_json::from_str(&text).map_err(|e| format!("the state is not JSON: {e}"))?;
    let (migrated, report) = migrate(&state)?;
    for m in &report.moved {
        eprintln!("moved   {m}");
    }
    for d in &report.dropped {
        eprintln!("dropped {d}");
    }
    for a in &report.added {
        eprintln!("added   {a}");
    }
    // Written, not printed: a full disk or a closed pipe is an error that says so (and a
    // non-zero exit), not a panic.
    let mut text = serde_json::to_string_pretty(&migrated).map_err(|e| e.to_string())?;
    text.push('\n');
    let mut out = std::io::stdout().lock();
    std::io::Write::write_all(&mut out, text.as_bytes())
        .and_then(|()| std::io::Write::flush(&mut out))
        .map_err(|e| format!("writing the migrated state to stdout: {e}"))
}
