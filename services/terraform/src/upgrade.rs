//! A resource's state as an earlier (or a later) release of this provider wrote it,
//! read for `UpgradeResourceState` (issue 60: a release reads every format it may meet, or
//! refuses it saying why — never silently misreads it).
//!
//! Every resource's schema says [`STATE_VERSION`]; Terraform keeps it beside each
//! instance's attributes (`schema_version` in the state file) and hands both back. A state
//! of an earlier version is brought forward step by step (none yet: every release so far
//! wrote version 0); a later version is refused with what to do (Terraform refuses it
//! first, "managed by newer provider version"; this is for any other client).
//!
//! At the same version Terraform drops, before it asks the provider, every attribute the
//! schema lacks — so a release that changes a resource's attributes must bump the version,
//! or an older release would read a newer state as its own and lose what it does not know.
//! `state-shapes.json` records every resource's state type at [`STATE_VERSION`], and a test
//! fails when a shape changes without the version.

use crate::cty::{self, Type};
use crate::resource::Diag;
use crate::schema::Obj;

/// The schema version of every resource's state this release writes.
pub const STATE_VERSION: i64 = 0;

/// `raw` (the state's JSON attributes, as Terraform kept them), written at schema
/// `version`, as this release's state of type `ty`.
pub fn upgraded(resource: &str, version: i64, raw: &[u8], ty: &Type) -> Result<Option<Obj>, Diag> {
    if version > STATE_VERSION {
        return Err(Diag::new(
            format!("{resource}: state from a newer release of the provider"),
            format!(
                "this state was written at schema version {version}, and this release of the \
                 Overcast provider reads up to version {STATE_VERSION}. Use the release that \
                 wrote it, or a newer one: this one would drop what it does not know."
            ),
        ));
    }
    if raw.is_empty() {
        return Ok(None);
    }
    let json: serde_json::Value = serde_json::from_slice(raw)
        .map_err(|e| Diag::new(format!("{resource}: unreadable state"), e.to_string()))?;
    match cty::from_json(&json, ty)
        .map_err(|e| Diag::new(format!("{resource}: malformed state"), e))?
    {
        cty::Value::Null => Ok(None),
        cty::Value::Map(m) => Ok(Some(m)),
        other => Err(Diag::new(
            format!("{resource}: malformed state"),
            format!("an object was expected, not {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{computed, required, s, Block};

    fn ty() -> Type {
        Block::new(
            "",
            vec![
                computed("id", Type::String, ""),
                required("name", Type::String, ""),
            ],
        )
        .ty()
    }

    #[test]
    fn a_state_of_this_version_is_read_as_it_is() {
        let got = upgraded("r", 0, br#"{"id": "1", "name": "a"}"#, &ty()).unwrap();
        let got = got.unwrap();
        assert_eq!(got["id"], s("1"));
        assert_eq!(got["name"], s("a"));
        // An attribute the state lacks (one added since) is null, as Terraform reads it.
        let got = upgraded("r", 0, br#"{"id": "1"}"#, &ty()).unwrap().unwrap();
        assert_eq!(got["name"], cty::Value::Null);
    }

    #[test]
    fn a_newer_release_s_state_is_refused_saying_what_to_do() {
        let e = upgraded("r", 1, br#"{"id": "1", "name": "a"}"#, &ty()).unwrap_err();
        assert!(e.summary.contains("newer release"), "{e:?}");
        assert!(e.detail.contains("schema version 1"), "{e:?}");
    }

    /// Every resource's state type, by provider and resource, as JSON.
    fn shapes() -> serde_json::Value {
        let mut out = serde_json::Map::new();
        out.insert("version".into(), serde_json::json!(STATE_VERSION));
        out.insert("ovirt".into(), crate::zvirt::server().state_types());
        out.insert("deckhouse".into(), crate::dvp::server().state_types());
        serde_json::Value::Object(out)
    }

    #[test]
    fn a_resource_s_state_changes_shape_only_with_the_version() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/state-shapes.json");
        let now = shapes();
        if std::env::var_os("OVERCAST_WRITE_STATE_SHAPES").is_some() {
            std::fs::write(&path, serde_json::to_string_pretty(&now).unwrap() + "\n").unwrap();
        }
        let recorded: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(
            now == recorded || now["version"] != recorded["version"],
            "a resource's state changed shape at schema version {STATE_VERSION}: bump \
             STATE_VERSION, add the step that brings version {STATE_VERSION} forward, then \
             record the shapes (OVERCAST_WRITE_STATE_SHAPES=1 cargo test -p overcast-terraform)"
        );
        assert_eq!(
            now, recorded,
            "the version was bumped: record the new shapes (OVERCAST_WRITE_STATE_SHAPES=1)"
        );
    }
}
