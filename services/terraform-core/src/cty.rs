//! Terraform's values on the wire: cty's msgpack encoding of a `DynamicValue`, read and
//! written against the schema's type (msgpack carries no types of its own). An unknown
//! value is a msgpack extension (code 0, or 12 for newer Terraform's refined unknowns,
//! read as plain unknowns); a value of dynamic type is the pair `[type JSON, value]`;
//! numbers are integers when whole, else float64 (or a decimal string when too large);
//! objects and maps are maps keyed by name, lists, sets and tuples arrays.

use std::collections::BTreeMap;

use serde_json::json;

/// A cty type, as the schema's type JSON spells it.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    String,
    Number,
    Bool,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(BTreeMap<String, Type>),
    Tuple(Vec<Type>),
    Dynamic,
}

/// A cty value. Objects and maps are both `Map`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Unknown,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    List(Vec<Value>),
    Map(BTreeMap<String, Value>),
}

impl Type {
    /// From the type JSON (`"string"`, `["list","string"]`, `["object",{...}]`).
    pub fn from_json(v: &serde_json::Value) -> Result<Type, String> {
        use serde_json::Value as J;
        Ok(match v {
            J::String(s) => match s.as_str() {
                "string" => Type::String,
                "number" => Type::Number,
                "bool" => Type::Bool,
                "dynamic" => Type::Dynamic,
                other => return Err(format!("unknown primitive type {other:?}")),
            },
            J::Array(a) if a.len() == 2 => {
                let kind = a[0].as_str().unwrap_or_default();
                match kind {
                    "list" => Type::List(Box::new(Type::from_json(&a[1])?)),
                    "set" => Type::Set(Box::new(Type::from_json(&a[1])?)),
                    "map" => Type::Map(Box::new(Type::from_json(&a[1])?)),
                    "object" => Type::Object(
                        a[1].as_object()
                            .ok_or("an object type's attributes are not an object")?
                            .iter()
                            .map(|(k, t)| Ok((k.clone(), Type::from_json(t)?)))
                            .collect::<Result<_, String>>()?,
                    ),
                    "tuple" => Type::Tuple(
                        a[1].as_array()
                            .ok_or("a tuple type's elements are not a list")?
                            .iter()
                            .map(Type::from_json)
                            .collect::<Result<_, _>>()?,
                    ),
                    other => return Err(format!("unknown type kind {other:?}")),
                }
            }
            other => return Err(format!("not a type: {other}")),
        })
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Type::String => json!("string"),
            Type::Number => json!("number"),
            Type::Bool => json!("bool"),
            Type::Dynamic => json!("dynamic"),
            Type::List(t) => json!(["list", t.to_json()]),
            Type::Set(t) => json!(["set", t.to_json()]),
            Type::Map(t) => json!(["map", t.to_json()]),
            Type::Object(a) => json!([
                "object",
                a.iter()
                    .map(|(k, t)| (k.clone(), t.to_json()))
                    .collect::<serde_json::Map<_, _>>()
            ]),
            Type::Tuple(e) => json!(["tuple", e.iter().map(Type::to_json).collect::<Vec<_>>()]),
        }
    }
}

impl Value {
    /// Whether it is, or holds anywhere inside, a value not yet known.
    pub fn has_unknown(&self) -> bool {
        match self {
            Value::Unknown => true,
            Value::List(l) => l.iter().any(Value::has_unknown),
            Value::Map(m) => m.values().any(Value::has_unknown),
            _ => false,
        }
    }

    /// Every value not yet known in it, at any depth, null.
    pub fn forget_unknown(&mut self) {
        match self {
            Value::Unknown => *self = Value::Null,
            Value::List(l) => l.iter_mut().for_each(Value::forget_unknown),
            Value::Map(m) => m.values_mut().for_each(Value::forget_unknown),
            _ => {}
        }
    }
}

/// msgpack as read, before the type gives it meaning.
#[derive(Debug, Clone, PartialEq)]
enum Mp {
    Nil,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(Vec<u8>),
    Array(Vec<Mp>),
    Map(Vec<(Mp, Mp)>),
    Ext(i8),
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let end = end.ok_or("msgpack value cut short")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn uint(&mut self, n: usize) -> Result<u64, String> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |a, b| (a << 8) | u64::from(*b)))
    }
    fn len(&mut self, n: usize) -> Result<usize, String> {
        usize::try_from(self.uint(n)?).map_err(|_| "msgpack length too large".to_owned())
    }
    fn items(&mut self, n: usize, depth: usize) -> Result<Vec<Mp>, String> {
        (0..n).map(|_| self.read(depth + 1)).collect()
    }
    fn pairs(&mut self, n: usize, depth: usize) -> Result<Vec<(Mp, Mp)>, String> {
        (0..n)
            .map(|_| Ok((self.read(depth + 1)?, self.read(depth + 1)?)))
            .collect()
    }
    fn read(&mut self, depth: usize) -> Result<Mp, String> {
        if depth > 64 {
            return Err("msgpack nested too deep".into());
        }
        let m = self.take(1)?[0];
        Ok(match m {
            0x00..=0x7f => Mp::Int(i64::from(m)),
            0xe0..=0xff => Mp::Int(i64::from(m as i8)),
            0x80..=0x8f => Mp::Map(self.pairs(usize::from(m & 0x0f), depth)?),
            0x90..=0x9f => Mp::Array(self.items(usize::from(m & 0x0f), depth)?),
            0xa0..=0xbf => Mp::Str(self.take(usize::from(m & 0x1f))?.to_vec()),
            0xc0 => Mp::Nil,
            0xc2 => Mp::Bool(false),
            0xc3 => Mp::Bool(true),
            0xc4 | 0xd9 => {
                let n = self.len(1)?;
                Mp::Str(self.take(n)?.to_vec())
            }
            0xc5 | 0xda => {
                let n = self.len(2)?;
                Mp::Str(self.take(n)?.to_vec())
            }
            0xc6 | 0xdb => {
                let n = self.len(4)?;
                Mp::Str(self.take(n)?.to_vec())
            }
            0xc7..=0xc9 => {
                let n = self.len(1 << (m - 0xc7))?;
                let code = self.take(1)?[0] as i8;
                self.take(n)?;
                Mp::Ext(code)
            }
            0xd4..=0xd8 => {
                let code = self.take(1)?[0] as i8;
                self.take(1 << (m - 0xd4))?;
                Mp::Ext(code)
            }
            0xca => Mp::Float(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => Mp::Float(f64::from_bits(self.uint(8)?)),
            0xcc => Mp::Uint(self.uint(1)?),
            0xcd => Mp::Uint(self.uint(2)?),
            0xce => Mp::Uint(self.uint(4)?),
            0xcf => Mp::Uint(self.uint(8)?),
            0xd0 => Mp::Int(i64::from(self.uint(1)? as u8 as i8)),
            0xd1 => Mp::Int(i64::from(self.uint(2)? as u16 as i16)),
            0xd2 => Mp::Int(i64::from(self.uint(4)? as u32 as i32)),
            0xd3 => Mp::Int(self.uint(8)? as i64),
            0xdc => {
                let n = self.len(2)?;
                Mp::Array(self.items(n, depth)?)
            }
            0xdd => {
                let n = self.len(4)?;
                Mp::Array(self.items(n, depth)?)
            }
            0xde => {
                let n = self.len(2)?;
                Mp::Map(self.pairs(n, depth)?)
            }
            0xdf => {
                let n = self.len(4)?;
                Mp::Map(self.pairs(n, depth)?)
            }
            other => return Err(format!("msgpack marker 0x{other:02x} is not used by cty")),
        })
    }
}

fn text(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "a string that is not UTF-8".to_owned())
}

fn typed(mp: Mp, ty: &Type) -> Result<Value, String> {
    match (mp, ty) {
        (Mp::Nil, _) => Ok(Value::Null),
        (Mp::Ext(_), _) => Ok(Value::Unknown),
        (Mp::Array(pair), Type::Dynamic) if pair.len() == 2 => {
            let mut it = pair.into_iter();
            let (Some(Mp::Str(t)), Some(v)) = (it.next(), it.next()) else {
                return Err("a dynamic value is not [type, value]".into());
            };
            let json: serde_json::Value =
                serde_json::from_slice(&t).map_err(|e| format!("a dynamic value's type: {e}"))?;
            typed(v, &Type::from_json(&json)?)
        }
        (Mp::Bool(b), Type::Bool) => Ok(Value::Bool(b)),
        (Mp::Str(s), Type::String) => Ok(Value::String(text(&s)?)),
        (Mp::Int(i), Type::Number) => Ok(Value::Number(i.into())),
        (Mp::Uint(u), Type::Number) => Ok(Value::Number(u.into())),
        (Mp::Float(f), Type::Number) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| "a number that is not finite".to_owned()),
        (Mp::Str(s), Type::Number) => text(&s)?
            .parse::<serde_json::Number>()
            .map(Value::Number)
            .map_err(|_| "a number string that is not a number".to_owned()),
        (Mp::Array(items), Type::List(t) | Type::Set(t)) => Ok(Value::List(
            items
                .into_iter()
                .map(|i| typed(i, t))
                .collect::<Result<_, _>>()?,
        )),
        (Mp::Array(items), Type::Tuple(ts)) if items.len() == ts.len() => Ok(Value::List(
            items
                .into_iter()
                .zip(ts)
                .map(|(i, t)| typed(i, t))
                .collect::<Result<_, _>>()?,
        )),
        (Mp::Map(pairs), Type::Map(t)) => Ok(Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| match k {
                    Mp::Str(k) => Ok((text(&k)?, typed(v, t)?)),
                    _ => Err("a map key that is not a string".to_owned()),
                })
                .collect::<Result<_, String>>()?,
        )),
        (Mp::Map(pairs), Type::Object(attrs)) => {
            let mut out = BTreeMap::new();
            for (k, v) in pairs {
                let Mp::Str(k) = k else {
                    return Err("an object key that is not a string".into());
                };
                let k = text(&k)?;
                let t = attrs
                    .get(&k)
                    .ok_or_else(|| format!("an attribute {k:?} the schema does not have"))?;
                out.insert(k, typed(v, t)?);
            }
            for k in attrs.keys() {
                out.entry(k.clone()).or_insert(Value::Null);
            }
            Ok(Value::Map(out))
        }
        (mp, ty) => Err(format!("a {mp:?} where the schema says {}", ty.to_json())),
    }
}

/// Reads a DynamicValue's msgpack against `ty`.
pub fn decode(bytes: &[u8], ty: &Type) -> Result<Value, String> {
    let mut r = Reader { b: bytes, at: 0 };
    let mp = r.read(0)?;
    if r.at != bytes.len() {
        return Err("bytes after the msgpack value".into());
    }
    typed(mp, ty)
}

fn put_len(out: &mut Vec<u8>, n: usize, fix: u8, fix_max: usize, m16: u8, m32: u8) {
    if n <= fix_max {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(m16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(m32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 31 {
        out.push(0xa0 | s.len() as u8);
    } else if s.len() <= 0xff {
        out.push(0xd9);
        out.push(s.len() as u8);
    } else {
        put_len(out, s.len(), 0, 0, 0xda, 0xdb);
    }
    out.extend_from_slice(s);
}

fn put(out: &mut Vec<u8>, v: &Value, ty: &Type) {
    match (v, ty) {
        (Value::Null, _) => out.push(0xc0),
        // fixext1, code 0: cty's unknown.
        (Value::Unknown, _) => out.extend_from_slice(&[0xd4, 0, 0]),
        (v, Type::Dynamic) => {
            // The value's own type is not kept: dynamic attributes carry strings here.
            out.push(0x92);
            put_str(out, b"\"string\"");
            put(out, v, &Type::String);
        }
        (Value::Bool(b), _) => out.push(if *b { 0xc3 } else { 0xc2 }),
        (Value::String(s), _) => put_str(out, s.as_bytes()),
        (Value::Number(n), _) => {
            if let Some(i) = n.as_i64() {
                out.push(0xd3);
                out.extend_from_slice(&i.to_be_bytes());
            } else if let Some(u) = n.as_u64() {
                out.push(0xcf);
                out.extend_from_slice(&u.to_be_bytes());
            } else {
                out.push(0xcb);
                out.extend_from_slice(&n.as_f64().unwrap_or_default().to_bits().to_be_bytes());
            }
        }
        (Value::List(items), t) => {
            put_len(out, items.len(), 0x90, 15, 0xdc, 0xdd);
            for (i, item) in items.iter().enumerate() {
                let et = match t {
                    Type::List(e) | Type::Set(e) => e.as_ref(),
                    Type::Tuple(ts) => ts.get(i).unwrap_or(&Type::Dynamic),
                    _ => &Type::Dynamic,
                };
                put(out, item, et);
            }
        }
        // An object is written with exactly its type's attributes: one the value lacks
        // is null (Terraform refuses an object missing any).
        (Value::Map(m), Type::Object(attrs)) => {
            put_len(out, attrs.len(), 0x80, 15, 0xde, 0xdf);
            for (k, at) in attrs {
                put_str(out, k.as_bytes());
                put(out, m.get(k).unwrap_or(&Value::Null), at);
            }
        }
        (Value::Map(m), t) => {
            put_len(out, m.len(), 0x80, 15, 0xde, 0xdf);
            for (k, item) in m {
                put_str(out, k.as_bytes());
                let et = match t {
                    Type::Map(e) => e.as_ref(),
                    Type::Object(a) => a.get(k).unwrap_or(&Type::Dynamic),
                    _ => &Type::Dynamic,
                };
                put(out, item, et);
            }
        }
    }
}

/// A value from its JSON (a state Terraform kept as JSON: `UpgradeResourceState`'s raw
/// state), read against `ty`.
pub fn from_json(j: &serde_json::Value, ty: &Type) -> Result<Value, String> {
    use serde_json::Value as J;
    Ok(match (j, ty) {
        (J::Null, _) => Value::Null,
        (J::Bool(b), Type::Bool | Type::Dynamic) => Value::Bool(*b),
        (J::Number(n), Type::Number | Type::Dynamic) => Value::Number(n.clone()),
        (J::String(s), Type::String | Type::Dynamic) => Value::String(s.clone()),
        (J::String(s), Type::Number) => Value::Number(
            s.parse()
                .map_err(|_| format!("{s:?} where a number belongs"))?,
        ),
        (J::Array(a), Type::List(e) | Type::Set(e)) => Value::List(
            a.iter()
                .map(|v| from_json(v, e))
                .collect::<Result<_, _>>()?,
        ),
        (J::Array(a), Type::Tuple(ts)) if a.len() == ts.len() => Value::List(
            a.iter()
                .zip(ts)
                .map(|(v, t)| from_json(v, t))
                .collect::<Result<_, _>>()?,
        ),
        (J::Object(o), Type::Map(e)) => Value::Map(
            o.iter()
                .map(|(k, v)| Ok((k.clone(), from_json(v, e)?)))
                .collect::<Result<_, String>>()?,
        ),
        (J::Object(o), Type::Object(attrs)) => Value::Map(
            attrs
                .iter()
                .map(|(k, t)| Ok((k.clone(), from_json(o.get(k).unwrap_or(&J::Null), t)?)))
                .collect::<Result<_, String>>()?,
        ),
        (j, ty) => return Err(format!("{j} where the schema says {}", ty.to_json())),
    })
}

/// Writes `v` of type `ty` as a DynamicValue's msgpack.
pub fn encode(v: &Value, ty: &Type) -> Vec<u8> {
    let mut out = Vec::new();
    put(&mut out, v, ty);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object() -> Type {
        Type::from_json(&json!(["object", {
            "name": "string", "memory": "number", "clone": "bool",
            "nics": ["list", "string"], "labels": ["map", "string"], "id": "string",
        }]))
        .unwrap()
    }

    #[test]
    fn a_value_round_trips_with_its_type_and_unknowns_stay_unknown() {
        let ty = object();
        let mut m = BTreeMap::new();
        m.insert("name".to_owned(), Value::String("k8s-master-0".into()));
        m.insert("memory".to_owned(), Value::Number(8_589_934_592_i64.into()));
        m.insert("clone".to_owned(), Value::Bool(true));
        m.insert(
            "nics".to_owned(),
            Value::List(vec![Value::String("nic1".into())]),
        );
        m.insert("labels".to_owned(), Value::Null);
        m.insert("id".to_owned(), Value::Unknown);
        let v = Value::Map(m);
        assert_eq!(decode(&encode(&v, &ty), &ty).unwrap(), v);
        assert_eq!(Type::from_json(&ty.to_json()).unwrap(), ty);
    }

    #[test]
    fn what_terraform_writes_is_read() {
        // {"a": 1, "b": fixext1 code 12 (a refined unknown), "c": 1.5 as float64}
        let mut bytes = vec![
            0x83, 0xa1, b'a', 0x01, 0xa1, b'b', 0xd4, 12, 0, 0xa1, b'c', 0xcb,
        ];
        bytes.extend_from_slice(&1.5f64.to_bits().to_be_bytes());
        let ty = Type::from_json(&json!(["object", {"a": "number", "b": "string", "c": "number"}]))
            .unwrap();
        let Value::Map(m) = decode(&bytes, &ty).unwrap() else {
            panic!()
        };
        assert_eq!(m["a"], Value::Number(1.into()));
        assert_eq!(m["b"], Value::Unknown);
        assert_eq!(
            m["c"],
            Value::Number(serde_json::Number::from_f64(1.5).unwrap())
        );
    }

    #[test]
    fn malformed_msgpack_is_an_error_not_a_panic() {
        let ty = object();
        for bad in [
            &[][..],
            &[0xdd, 0xff, 0xff, 0xff, 0xff][..],
            &[0xc1][..],
            &[0x81, 0xa1, b'x', 0x01][..],
        ] {
            assert!(decode(bad, &ty).is_err(), "{bad:?}");
        }
        assert!(decode(&[0xa1, b'x'], &Type::Number).is_err());
    }
}
