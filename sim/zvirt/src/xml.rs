//! The engine's XML, from and to the JSON form the simulator keeps: an object is an
//! element, its `id`, `href` and `rel` attributes; an array is its elements repeated under
//! the array's name (`{"disk": [..]}` in `<disks>` is `<disks><disk/>…</disks>`); a scalar
//! is text. The SDKs and Go clients upstream speak this form.

use serde_json::{Map, Value};

const ATTRIBUTES: &[&str] = &["href", "id", "rel"];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn write(out: &mut String, name: &str, v: &Value) {
    match v {
        Value::Null => {}
        Value::Array(items) => {
            for item in items {
                write(out, name, item);
            }
        }
        Value::Object(map) => {
            out.push('<');
            out.push_str(name);
            for key in ATTRIBUTES {
                if let Some(t) = map.get(*key).and_then(text) {
                    out.push_str(&format!(" {key}=\"{}\"", escape(&t)));
                }
            }
            let children: Vec<(&String, &Value)> = map
                .iter()
                .filter(|(k, _)| !ATTRIBUTES.contains(&k.as_str()))
                .collect();
            if children.is_empty() {
                out.push_str("/>");
                return;
            }
            out.push('>');
            for (k, v) in children {
                write(out, k, v);
            }
            out.push_str(&format!("</{name}>"));
        }
        scalar => {
            let t = text(scalar).unwrap_or_default();
            out.push_str(&format!("<{name}>{}</{name}>", escape(&t)));
        }
    }
}

/// `value` as the element `root`.
pub fn to_xml(root: &str, value: &Value) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n");
    match value {
        // An empty collection, or an answer with nothing in it.
        Value::Object(m) if m.is_empty() => out.push_str(&format!("<{root}/>")),
        _ => write(&mut out, root, value),
    }
    out
}

struct Node {
    name: String,
    attributes: Map<String, Value>,
    children: Vec<Node>,
    text: String,
}

fn to_value(node: Node) -> Value {
    if node.children.is_empty() && node.attributes.is_empty() {
        return Value::String(node.text.trim().to_owned());
    }
    let mut map = node.attributes;
    let plural_of = |child: &str| node.name == format!("{child}s");
    for child in node.children {
        let name = child.name.clone();
        let list = plural_of(&name);
        let v = to_value(child);
        match map.get_mut(&name) {
            Some(Value::Array(items)) => items.push(v),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, v]);
            }
            None if list => {
                map.insert(name, Value::Array(vec![v]));
            }
            None => {
                map.insert(name, v);
            }
        }
    }
    Value::Object(map)
}

/// The root element's name and its content, or why the text is not XML.
pub fn from_xml(text: &str) -> Result<(String, Value), String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(text);
    let mut stack: Vec<Node> = Vec::new();
    let open = |e: &quick_xml::events::BytesStart| -> Result<Node, String> {
        let mut attributes = Map::new();
        for a in e.attributes() {
            let a = a.map_err(|e| e.to_string())?;
            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            let value = a.unescape_value().map_err(|e| e.to_string())?;
            attributes.insert(key, Value::String(value.into_owned()));
        }
        Ok(Node {
            name: String::from_utf8_lossy(e.name().as_ref()).into_owned(),
            attributes,
            children: Vec::new(),
            text: String::new(),
        })
    };
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(e) => stack.push(open(&e)?),
            Event::Empty(e) => {
                let node = open(&e)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(node),
                    None => return Ok((node.name.clone(), to_value(node))),
                }
            }
            Event::Text(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&t.decode().map_err(|e| e.to_string())?);
                }
            }
            // `&lt;` and its kind come apart from the text around them.
            Event::GeneralRef(r) => {
                if let Some(top) = stack.last_mut() {
                    let c = match r.resolve_char_ref().map_err(|e| e.to_string())? {
                        Some(c) => c,
                        None => match r.decode().map_err(|e| e.to_string())?.as_ref() {
                            "lt" => '<',
                            "gt" => '>',
                            "amp" => '&',
                            "quot" => '"',
                            "apos" => '\'',
                            other => return Err(format!("unknown entity &{other};")),
                        },
                    };
                    top.text.push(c);
                }
            }
            Event::End(_) => {
                let node = stack.pop().ok_or("an end without a start")?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(node),
                    None => return Ok((node.name.clone(), to_value(node))),
                }
            }
            Event::Eof => return Err("no root element".into()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_engine_s_xml_reads_back_as_its_json() {
        let disk = json!({"href": "/ovirt-engine/api/disks/1", "id": "1", "alias": "a<b",
            "provisioned_size": "1073741824",
            "storage_domains": {"storage_domain": [{"id": "sd1", "href": "/sd/sd1"}]},
            "vms": {"vm": [{"id": "v1"}, {"id": "v2"}]}});
        let text = to_xml("disk", &disk);
        assert!(
            text.contains("<disk href=\"/ovirt-engine/api/disks/1\" id=\"1\">"),
            "{text}"
        );
        assert!(text.contains("<alias>a&lt;b</alias>"), "{text}");
        let (root, back) = from_xml(&text).unwrap();
        assert_eq!(root, "disk");
        assert_eq!(back, disk);
        let (root, empty) = from_xml(&to_xml("disks", &json!({}))).unwrap();
        assert!(super::super::search_matches("PVC*", "pvc-1 = x", false));
        assert!(super::super::search_matches("p*c*x", "pvc-1 = x", false));
        assert!(!super::super::search_matches("pvc", "pvc-1", false));
        assert!(!super::super::search_matches("a*b", "ab-", false));
        assert_eq!((root.as_str(), empty), ("disks", json!("")));
        assert!(from_xml("{\"not\": \"xml\"}").is_err());
    }
}
