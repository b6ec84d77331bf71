//! A resource's state as an earlier (or a later) release of this provider wrote it,
//! read for `UpgradeResourceState` (issue 60: a release reads every format it may meet, or
//! refuses it saying why — never silently misreads it).
//!
//! Every resource's schema says [`STATE_VERSION`]; Terraform keeps it beside each
//! instance's attributes (`schema_version` in the state file) and hands both back. A state
//! of an earlier version is brought forward step by step; a later version is refused with
//! what to do (Terraform refuses it first, "managed by newer provider version"; this is
//! for any other client). The versions:
//! - 0: every release up to issue 68's (and every upstream provider's state a takeover
//!   migrates: SDKv2 writes 0).
//! - 1: `dvp_virtual_machine` has `annotations` (Deckhouse's layouts annotate a VM with
//!   its instance class's `additionalAnnotations`). A version-0 state lacks the key: it
//!   reads as the empty map (its `absent`), which is what the VM had from us.
//!
//! At version 0, what releases wrote before an attribute existed lacks its key: an
//! attribute that says what it was then ([`crate::schema::Attr::absent`]) takes that
//! value (the DVP VM's `node_selector`, added after 688adc9: null there, an empty map
//! now, and a change of it replaces the VM — the upgrade test found the master replaced).
//!
//! At the same version Terraform drops, before it asks the provider, every attribute the
//! schema lacks — so a release that changes a resource's attributes must bump the version,
//! or an older release would read a newer state as its own and lose what it does not know.
//! `state-shapes.json` records every resource's state type at [`STATE_VERSION`], and a test
//! fails when a shape changes without the version.

use crate::cty;
use crate::resource::Diag;
use crate::schema::{Block, Obj};

/// The schema version of every resource's state this release writes.
pub const STATE_VERSION: i64 = 1;

/// `raw` (the state's JSON attributes, as Terraform kept them), written at schema
/// `version`, as this release's state of the resource `block`.
pub fn upgraded(
    resource: &str,
    version: i64,
    raw: &[u8],
    block: &Block,
) -> Result<Option<Obj>, Diag> {
    upgraded_to(STATE_VERSION, resource, version, raw, block)
}

/// [`upgraded`] for a provider whose states are at `current` (a legacy SDK's stand-in
/// keeps the upstream's 0: `Server::state_version`).
pub fn upgraded_to(
    current: i64,
    resource: &str,
    version: i64,
    raw: &[u8],
    block: &Block,
) -> Result<Option<Obj>, Diag> {
    let ty = &block.ty();
    if version > current {
        return Err(Diag::new(
            format!("{resource}: state from a newer release of the provider"),
            format!(
                "this state was written at schema version {version}, and this release of the \
                 Overcast provider reads up to version {current}. Use the release that \
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
        cty::Value::Map(mut m) => {
            // Only in a state a release of ours wrote whole: one that holds nothing but
            // its id (an import's, `migrate-state`'s) is filled by the refresh, which
            // takes everything the cloud says only while nothing else is known.
            let written = block
                .attrs
                .iter()
                .any(|a| a.name != "id" && json.get(a.name).is_some_and(|v| !v.is_null()));
            for a in block.attrs.iter().filter(|_| written) {
                if let Some(then) = a.absent.as_ref().filter(|_| json.get(a.name).is_none()) {
                    m.insert(a.name.to_owned(), then.clone());
                }
            }
            Ok(Some(m))
        }
        other => Err(Diag::new(
            format!("{resource}: malformed state"),
            format!("an object was expected, not {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cty::Type;
    use crate::schema::{computed, optional, required, s, Block};

    fn ty() -> Block {
        Block::new(
            "",
            vec![
                computed("id", Type::String, ""),
                required("name", Type::String, ""),
                optional("selector", Type::Map(Box::new(Type::String)), "")
                    .absent_as(cty::Value::Map(Default::default())),
            ],
        )
    }

    #[test]
    fn a_state_of_this_version_is_read_as_it_is() {
        let got = upgraded("r", 0, br#"{"id": "1", "name": "a"}"#, &ty()).unwrap();
        let got = got.unwrap();
        assert_eq!(got["id"], s("1"));
        assert_eq!(got["name"], s("a"));
        // An attribute the state lacks (one added since) is null, as Terraform reads it;
        // one that says what it was before it existed is that.
        let got = upgraded("r", 0, br#"{"id": "1", "name": "a"}"#, &ty())
            .unwrap()
            .unwrap();
        assert_eq!(got["selector"], cty::Value::Map(Default::default()));
        let got = upgraded("r", 0, br#"{"name": "a"}"#, &ty())
            .unwrap()
            .unwrap();
        assert_eq!(got["id"], cty::Value::Null);
        // Present, even null, it is what the state says.
        let got = upgraded("r", 0, br#"{"id": "1", "selector": null}"#, &ty())
            .unwrap()
            .unwrap();
        assert_eq!(got["selector"], cty::Value::Null);
        // A state of its id alone (an import's) is left for the refresh to fill.
        let got = upgraded("r", 0, br#"{"id": "1"}"#, &ty()).unwrap().unwrap();
        assert_eq!(got["selector"], cty::Value::Null);
    }

    #[test]
    fn a_newer_release_s_state_is_refused_saying_what_to_do() {
        let e = upgraded(
            "r",
            STATE_VERSION + 1,
            br#"{"id": "1", "name": "a"}"#,
            &ty(),
        )
        .unwrap_err();
        assert!(e.summary.contains("newer release"), "{e:?}");
        assert!(
            e.detail
                .contains(&format!("schema version {}", STATE_VERSION + 1)),
            "{e:?}"
        );
    }
}
