//! `terraform-provider-overcast migrate-state`: a state Deckhouse's layouts wrote, on
//! stdin, rewritten for ours on stdout; what moved and what was dropped on stderr. The
//! state says which cloud it is of: the oVirt provider's resources are zVirt's
//! (`overcast_terraform_zvirt::migrate`), terraform-provider-openstack's OpenStack's
//! (`overcast_terraform_openstack::migrate`), anything else is read as a DVP state
//! (`overcast_terraform_dvp::migrate`), which refuses what it does not know.

use overcast_terraform_core::migrate::Report;
use serde_json::Value;

/// The migration `state` needs.
pub fn migrate(state: &Value) -> Result<(Value, Report), String> {
    if overcast_terraform_zvirt::migrate::is_zvirt(state) {
        overcast_terraform_zvirt::migrate::migrate(state)
    } else if overcast_terraform_openstack::migrate::is_openstack(state) {
        overcast_terraform_openstack::migrate::migrate(state)
    } else {
        overcast_terraform_dvp::migrate::migrate(state)
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
