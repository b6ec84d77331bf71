//! What a disk is called on the engine, and what its description records.
//!
//! The alias is the CSI volume name when the engine can both take it and find it again:
//! its bean validation admits letters, digits and `-_.` up to 255 characters
//! (`@ValidI18NName`), and its search refuses `'` and `;` anywhere and a value ending in
//! `\` — answering such a search with an empty list, so a retried create would find
//! nothing and make a second disk. Any other name is given the alias `csi-<md5 of the
//! name>` (deterministic, so a retry finds it) and the name is kept in the description.
//!
//! The description (`varchar(500)`, ASCII or letters: `@ValidDescription`) holds JSON:
//! the cluster, the parameters, the CSI name when it is not the alias, the region, and
//! as much of the PVC metadata as fits.

use std::collections::BTreeMap;

use overcast_cloud::{CloudError, Result};

/// The engine's `DISK_DESCRIPTION_MAX_SIZE`.
pub(super) const DESCRIPTION_MAX: usize = 500;
/// Below the engine's `GENERAL_NAME_SIZE` (255): the search term and the URL stay short.
const ALIAS_MAX: usize = 200;

/// What the provider writes into a disk's description.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Description {
    /// `--cluster`: whose disk this is.
    pub(super) cluster: String,
    #[serde(default)]
    pub(super) parameters: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) metadata: BTreeMap<String, String>,
    /// The data center of the disk's storage domain (absent on disks made before the
    /// provider knew topology: those carry no zone, reachable from every node as before).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(super) region: String,
    /// The CSI volume name, when the alias is not it (see [`alias_for`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<String>,
}

/// The alias of the disk for CSI volume `name`.
pub(super) fn alias_for(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= ALIAS_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain {
        name.to_owned()
    } else {
        format!("csi-{:x}", md5::compute(name.as_bytes()))
    }
}

/// The description's text: JSON with every non-ASCII character escaped, within the
/// engine's 500 characters. Metadata that does not fit is left out, longest value first
/// (it only labels the disk); parameters and the name must fit, or the create is refused.
pub(super) fn description_text(description: &Description) -> Result<String> {
    let mut d = description.clone();
    loop {
        let text = ascii_json(&serde_json::to_string(&d).unwrap_or_default());
        if text.len() <= DESCRIPTION_MAX {
            return Ok(text);
        }
        let longest = d
            .metadata
            .iter()
            .max_by_key(|(k, v)| k.len() + v.len())
            .map(|(k, _)| k.clone());
        match longest {
            Some(k) => {
                d.metadata.remove(&k);
            }
            None => {
                return Err(CloudError::InvalidArgument(format!(
                    "zvirt: the volume's name and parameters take {} characters; the engine keeps {DESCRIPTION_MAX} in a disk's description",
                    text.len()
                )))
            }
        }
    }
}

/// `json` with every non-ASCII character written as a `\u` escape (JSON reads it back
/// the same).
fn ascii_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_engine_cannot_take_or_find_get_a_hashed_alias() {
        assert_eq!(
            alias_for("pvc-0a1b2c3d-0000-4000-8000-000000000001"),
            "pvc-0a1b2c3d-0000-4000-8000-000000000001"
        );
        assert_eq!(alias_for("sanity_Node.1-x"), "sanity_Node.1-x");
        for hard in [
            "it's",
            "a;b",
            "ends\\",
            "two words",
            "q\"uote",
            "st*r",
            "ünï",
            "",
            &"x".repeat(201),
        ] {
            let alias = alias_for(hard);
            assert!(
                alias.starts_with("csi-") && alias.len() == 36,
                "{hard:?} → {alias}"
            );
            assert_eq!(alias, alias_for(hard), "deterministic");
        }
        assert_ne!(alias_for("a;b"), alias_for("a;c"));
    }

    #[test]
    fn the_description_fits_the_engine_s_column_and_is_ascii() {
        let long = "p".repeat(253);
        let d = Description {
            cluster: "c".into(),
            parameters: BTreeMap::from([("storageDomainName".into(), "data".into())]),
            metadata: BTreeMap::from([
                ("csi.storage.k8s.io/pvc/name".into(), long.clone()),
                ("csi.storage.k8s.io/pvc/namespace".into(), "n".repeat(63)),
                (
                    "csi.storage.k8s.io/pv/name".into(),
                    "pvc-0a1b2c3d-0000-4000-8000-000000000001".into(),
                ),
            ]),
            region: "Default".into(),
            name: Some("nämé;x".into()),
        };
        let text = description_text(&d).unwrap();
        assert!(text.len() <= DESCRIPTION_MAX && text.is_ascii(), "{text}");
        let back: Description = serde_json::from_str(&text).unwrap();
        assert_eq!(back.name.as_deref(), Some("nämé;x"));
        assert_eq!(back.parameters, d.parameters);
        // The longest label went; the others stayed.
        assert!(!back.metadata.contains_key("csi.storage.k8s.io/pvc/name"));
        assert!(back.metadata.contains_key("csi.storage.k8s.io/pv/name"));
        let huge = Description {
            parameters: BTreeMap::from([("storageDomainName".into(), "d".repeat(600))]),
            ..d
        };
        assert!(matches!(
            description_text(&huge),
            Err(CloudError::InvalidArgument(_))
        ));
    }
}
