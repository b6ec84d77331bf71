//! What a cloud's configuration file takes, described from the code that reads it, for
//! the configuration reference (`docs/reference.md`): the sections and keys the parser
//! knows and the variables that win over them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, Visitor};

use super::ConfigError;

/// A YAML file's text (`None` or blank: `T`'s default) read as `T`, and its top-level keys
/// `T` does not read (the caller warns: upstream ignores them).
pub fn yaml_and_unknown_keys<T: DeserializeOwned + Default>(
    cloud: &'static str,
    path: Option<&Path>,
    text: Option<&str>,
) -> Result<(T, Vec<String>), ConfigError> {
    let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok((T::default(), Vec::new()));
    };
    let invalid =
        |e| ConfigError::invalid(cloud, path, format!("not the YAML this cloud reads: {e}"));
    let value: T = serde_saphyr::from_str(text).map_err(invalid)?;
    // Read again as bare keys: the ones the type does not name.
    let keys: BTreeMap<String, IgnoredAny> = serde_saphyr::from_str(text).map_err(invalid)?;
    let known = serde_fields::<T>();
    let unknown = keys
        .into_keys()
        .filter(|k| !known.contains(&k.as_str()))
        .collect();
    Ok((value, unknown))
}

/// One cloud's `--cloud-config` file and the environment variables its provider reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileKeys {
    /// How the file is written (`YAML`, `INI (gcfg)`…), and anything a reader must know.
    pub format: &'static str,
    /// Each section (`""` for the top level) with the keys it takes, in the parser's order.
    pub sections: Vec<(String, Vec<&'static str>)>,
    /// Each variable and what it sets.
    pub env: Vec<(&'static str, &'static str)>,
}

/// The keys a struct deserializes from, as serde's derive names them (after `rename` and
/// `rename_all`): the same list serde checks a file against. Panics for a type that is
/// not a plain struct (a `#[serde(flatten)]` field makes serde read a map, whose keys it
/// cannot list).
pub fn serde_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields = None;
    let _ = T::deserialize(Fields(&mut fields));
    fields.unwrap_or_else(|| {
        panic!(
            "{} does not deserialize as a struct with named fields",
            std::any::type_name::<T>()
        )
    })
}

/// A deserializer that answers nothing: it only remembers the fields a struct asks for.
struct Fields<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> Deserializer<'de> for Fields<'_> {
    type Error = de::value::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(de::Error::custom("only the field names were wanted"))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[allow(dead_code)]
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct File {
        server: Option<String>,
        ca_bundle: Option<String>,
        #[serde(rename = "ipFamily")]
        ip_family: Option<Vec<String>>,
    }

    #[test]
    fn the_fields_are_the_names_serde_reads() {
        assert_eq!(serde_fields::<File>(), ["server", "caBundle", "ipFamily"]);
    }

    #[test]
    #[should_panic(expected = "does not deserialize as a struct")]
    fn a_map_has_no_fields_to_list() {
        serde_fields::<std::collections::BTreeMap<String, String>>();
    }
}
