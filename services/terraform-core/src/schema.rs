//! A resource's schema as written here, and what follows from it: the protocol's
//! `Schema`, the cty object type its values are read and written with, and which
//! changes force a replacement.

use std::collections::BTreeMap;

use overcast_api::tfplugin6::{self as tf, schema as ts};

use crate::cty::{Type, Value};

/// Whether the user sets an attribute, the provider, or either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Required,
    Optional,
    /// Set by the provider only.
    Computed,
}

#[derive(Debug, Clone)]
pub struct Attr {
    pub name: &'static str,
    pub ty: Type,
    pub usage: Use,
    pub sensitive: bool,
    /// A change makes a new object (the cloud cannot change it in place).
    pub force_new: bool,
    /// The value when the configuration gives none (the attribute is then also
    /// "computed" to Terraform, which lets a plan hold a value the user did not write).
    pub default: Option<Value>,
    /// Optional and computed: left out of the configuration, it keeps what the state
    /// holds (a value the cloud reported, or another provider wrote) instead of being
    /// planned to null.
    pub kept: bool,
    /// Its value in a state an earlier release wrote before the attribute existed (the
    /// state's JSON lacks the key): what this release writes for an object made without
    /// it. Brought forward in `UpgradeResourceState`; without it the attribute reads as
    /// null there, and a refresh leaves a null optional attribute null.
    pub absent: Option<Value>,
    pub description: &'static str,
}

/// A nested block given zero or more times (`initialization_nic { … }`): its value is a
/// list of objects (empty when not given, never null).
#[derive(Debug, Clone)]
pub struct Nested {
    pub name: &'static str,
    pub block: Block,
    pub force_new: bool,
    pub nesting: Nesting,
}

/// How a nested block is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nesting {
    /// Zero or more times, in order: a list of objects.
    List,
    /// Zero or more times, the order not the user's (SDKv2's `TypeSet` of a resource).
    Set,
    /// At most once: an object, null when not given (SDKv2's `timeouts`).
    Single,
}

#[derive(Debug, Clone, Default)]
pub struct Block {
    pub attrs: Vec<Attr>,
    pub nested: Vec<Nested>,
    pub description: &'static str,
}

fn attr(name: &'static str, ty: Type, usage: Use, description: &'static str) -> Attr {
    Attr {
        name,
        ty,
        usage,
        sensitive: false,
        force_new: false,
        default: None,
        kept: false,
        absent: None,
        description,
    }
}

pub fn required(name: &'static str, ty: Type, description: &'static str) -> Attr {
    attr(name, ty, Use::Required, description)
}
pub fn optional(name: &'static str, ty: Type, description: &'static str) -> Attr {
    attr(name, ty, Use::Optional, description)
}
pub fn computed(name: &'static str, ty: Type, description: &'static str) -> Attr {
    attr(name, ty, Use::Computed, description)
}
impl Attr {
    pub fn force_new(mut self) -> Self {
        self.force_new = true;
        self
    }
    pub fn default(mut self, v: Value) -> Self {
        self.default = Some(v);
        self
    }
    pub fn sensitive(mut self) -> Self {
        self.sensitive = true;
        self
    }
    /// See [`Attr::kept`].
    pub fn kept(mut self) -> Self {
        self.kept = true;
        self
    }
    /// See [`Attr::absent`].
    pub fn absent_as(mut self, v: Value) -> Self {
        self.absent = Some(v);
        self
    }
}

/// The `id` every resource and data source has.
pub fn id(description: &'static str) -> Attr {
    computed("id", Type::String, description)
}

impl Block {
    pub fn new(description: &'static str, attrs: Vec<Attr>) -> Self {
        Self {
            attrs,
            nested: Vec::new(),
            description,
        }
    }

    pub fn with_nested(self, name: &'static str, block: Block, force_new: bool) -> Self {
        self.with_nesting(name, block, force_new, Nesting::List)
    }

    /// A nested block given `nesting` so.
    pub fn with_nesting(
        mut self,
        name: &'static str,
        block: Block,
        force_new: bool,
        nesting: Nesting,
    ) -> Self {
        self.nested.push(Nested {
            name,
            block,
            force_new,
            nesting,
        });
        self
    }

    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.iter().find(|a| a.name == name)
    }

    /// The object type of the block's values; a nested block is a list of its objects.
    pub fn ty(&self) -> Type {
        let mut fields: BTreeMap<String, Type> = self
            .attrs
            .iter()
            .map(|a| (a.name.to_owned(), a.ty.clone()))
            .collect();
        for n in &self.nested {
            let of = n.block.ty();
            fields.insert(
                n.name.to_owned(),
                match n.nesting {
                    Nesting::List => Type::List(Box::new(of)),
                    Nesting::Set => Type::Set(Box::new(of)),
                    Nesting::Single => of,
                },
            );
        }
        Type::Object(fields)
    }

    pub fn to_proto(&self) -> ts::Block {
        ts::Block {
            attributes: self
                .attrs
                .iter()
                .map(|a| ts::Attribute {
                    name: a.name.into(),
                    r#type: a.ty.to_json().to_string().into_bytes(),
                    description: a.description.into(),
                    required: a.usage == Use::Required,
                    optional: a.usage == Use::Optional,
                    computed: a.usage == Use::Computed || a.default.is_some() || a.kept,
                    sensitive: a.sensitive,
                    ..Default::default()
                })
                .collect(),
            block_types: self
                .nested
                .iter()
                .map(|n| ts::NestedBlock {
                    type_name: n.name.into(),
                    block: Some(n.block.to_proto()),
                    nesting: match n.nesting {
                        Nesting::List => ts::nested_block::NestingMode::List,
                        Nesting::Set => ts::nested_block::NestingMode::Set,
                        Nesting::Single => ts::nested_block::NestingMode::Single,
                    } as i32,
                    ..Default::default()
                })
                .collect(),
            description: self.description.into(),
            ..Default::default()
        }
    }

    pub fn schema(&self) -> tf::Schema {
        tf::Schema {
            version: crate::upgrade::STATE_VERSION,
            block: Some(self.to_proto()),
        }
    }

    /// Nested blocks the object lacks as empty lists: Terraform holds a block list as a
    /// list, never null (an import or a refresh knows none); a single block stays null.
    pub fn fill_blocks(&self, o: &mut Obj) {
        for n in self.nested.iter().filter(|n| n.nesting != Nesting::Single) {
            let v = o.entry(n.name.to_owned()).or_insert(Value::Null);
            if *v == Value::Null {
                *v = Value::List(Vec::new());
            }
        }
    }

    /// `proposed` with each defaulted attribute the configuration leaves out at its
    /// default (Terraform proposes the prior value for those: a drifted one would never
    /// show).
    pub fn with_defaults(&self, config: &Obj, mut proposed: Obj) -> Obj {
        for a in &self.attrs {
            if let Some(d) = &a.default {
                if matches!(config.get(a.name), None | Some(Value::Null)) {
                    proposed.insert(a.name.to_owned(), d.clone());
                }
            }
        }
        proposed
    }

    /// The planned object for a new resource: what the user set, the provider's
    /// attributes unknown until the apply.
    pub fn plan_create(&self, proposed: &Obj) -> Obj {
        let mut out = proposed.clone();
        for a in &self.attrs {
            let unset = matches!(out.get(a.name), None | Some(Value::Null));
            if unset && (a.usage == Use::Computed || a.kept) {
                out.insert(a.name.to_owned(), Value::Unknown);
            }
        }
        // And inside each nested block the user gave (a new server's network block: its
        // address is the cloud's to say).
        for n in &self.nested {
            if let Some(Value::List(blocks)) = out.get_mut(n.name) {
                for b in blocks.iter_mut() {
                    if let Value::Map(o) = b {
                        *o = n.block.plan_create(o);
                    }
                }
            }
        }
        out
    }

    /// Every optional attribute of its nested blocks (at any depth) also computed: see
    /// `resource::SdkV2`.
    pub fn keep_nested_optional(&mut self) {
        for n in &mut self.nested {
            for a in &mut n.block.attrs {
                if a.usage == Use::Optional {
                    a.kept = true;
                }
            }
            n.block.keep_nested_optional();
        }
    }

    /// The attributes (and nested blocks) the user changed between `prior` and
    /// `proposed` whose change the cloud cannot make in place.
    pub fn replacing(&self, prior: &Obj, proposed: &Obj) -> Vec<&'static str> {
        let differs = |name: &str| {
            let p = prior.get(name).unwrap_or(&Value::Null);
            let n = proposed.get(name).unwrap_or(&Value::Null);
            // An unknown is a value not yet known: it may differ.
            p != n
        };
        self.attrs
            .iter()
            .filter(|a| a.force_new && a.usage != Use::Computed && differs(a.name))
            .map(|a| a.name)
            .chain(
                self.nested
                    .iter()
                    .filter(|n| n.force_new && differs(n.name))
                    .map(|n| n.name),
            )
            .collect()
    }
}

/// An object's attributes by name.
pub type Obj = BTreeMap<String, Value>;

/// Reads a value's string, number or bool; absent, null and unknown are `None`.
pub fn string<'a>(o: &'a Obj, name: &str) -> Option<&'a str> {
    match o.get(name) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}
pub fn int(o: &Obj, name: &str) -> Option<i64> {
    match o.get(name) {
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        _ => None,
    }
}
pub fn boolean(o: &Obj, name: &str) -> Option<bool> {
    match o.get(name) {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    }
}

pub fn s(v: impl Into<String>) -> Value {
    Value::String(v.into())
}
pub fn n(v: i64) -> Value {
    Value::Number(v.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> Block {
        Block::new(
            "a thing",
            vec![
                id("its id"),
                required("name", Type::String, "its name").force_new(),
                optional("comment", Type::String, "a comment"),
                computed("status", Type::String, "its status"),
            ],
        )
    }

    #[test]
    fn a_new_object_has_its_computed_attributes_unknown() {
        let proposed = Obj::from([
            ("name".into(), s("a")),
            ("comment".into(), Value::Null),
            ("id".into(), Value::Null),
            ("status".into(), Value::Null),
        ]);
        let planned = block().plan_create(&proposed);
        assert_eq!(planned["id"], Value::Unknown);
        assert_eq!(planned["status"], Value::Unknown);
        assert_eq!(planned["comment"], Value::Null);
    }

    #[test]
    fn only_a_force_new_change_replaces() {
        let prior = Obj::from([("name".into(), s("a")), ("comment".into(), s("x"))]);
        let mut proposed = prior.clone();
        proposed.insert("comment".into(), s("y"));
        assert!(block().replacing(&prior, &proposed).is_empty());
        proposed.insert("name".into(), s("b"));
        assert_eq!(block().replacing(&prior, &proposed), ["name"]);
    }

    #[test]
    fn a_default_is_planned_from_the_configuration_so_drift_shows() {
        let b = Block::new(
            "",
            vec![optional("status", Type::String, "")
                .force_new()
                .default(s("up"))],
        );
        // The user wrote nothing; Terraform proposes the drifted prior value.
        let proposed = Obj::from([("status".into(), s("down"))]);
        let planned = b.with_defaults(&Obj::new(), proposed.clone());
        assert_eq!(planned["status"], s("up"));
        let prior = proposed;
        assert_eq!(b.replacing(&prior, &planned), ["status"]);
        // What the user wrote wins.
        let config = Obj::from([("status".into(), s("down"))]);
        assert_eq!(
            b.with_defaults(&config, config.clone())["status"],
            s("down")
        );
        assert!(
            b.to_proto().attributes[0].computed,
            "a defaulted attribute is computed"
        );
    }

    #[test]
    fn a_kept_attribute_is_the_cloud_s_when_new_and_the_state_s_when_left_out() {
        let b = Block::new("", vec![optional("comment", Type::String, "").kept()]);
        let comment = &b.to_proto().attributes[0];
        assert!(
            comment.optional && comment.computed,
            "optional and computed"
        );
        // New and not configured: the cloud says (unknown until applied).
        let planned = b.plan_create(&Obj::from([("comment".into(), Value::Null)]));
        assert_eq!(planned["comment"], Value::Unknown);
        // Left out over a state holding "": Terraform proposes the prior value, kept.
        let prior = Obj::from([("comment".into(), s(""))]);
        assert!(b.replacing(&prior, &prior.clone()).is_empty());
    }

    #[test]
    fn the_proto_says_who_sets_what() {
        let p = block().to_proto();
        let status = p.attributes.iter().find(|a| a.name == "status").unwrap();
        assert!(status.computed && !status.optional && !status.required);
        let name = p.attributes.iter().find(|a| a.name == "name").unwrap();
        assert!(name.required);
        assert_eq!(name.r#type, b"\"string\"");
    }
}
