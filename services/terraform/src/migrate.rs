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
    println!(
        "{}",
        serde_json::to_string_pretty(&migrated).map_err(|e| e.to_string())?
    );
    Ok(())
}
