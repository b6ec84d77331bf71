//! The little XML the provider reads and writes: SOAP answers parsed (with quick-xml's
//! reader) into a tree of elements by local name, and request bodies written with every
//! value escaped. vSphere's answers are small and read once, so a tree is simpler than a
//! typed decoder and costs nothing that matters.

use std::borrow::Cow;

use quick_xml::events::Event;
use quick_xml::Reader;

/// One element: its local name (no namespace prefix), its `xsi:type` (which names the
/// concrete type of a polymorphic value: a fault, a property's value), its text and its
/// children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub xsi_type: Option<String>,
    /// Other attributes by local name (a managed object reference's `type`).
    pub attrs: Vec<(String, String)>,
    pub text: String,
    pub children: Vec<Element>,
}

impl Element {
    /// The document's root element. Anything that is not XML (an HTML error page from a
    /// proxy, a cut-off answer) is an error naming why.
    pub fn parse(bytes: &[u8]) -> Result<Element, String> {
        let mut reader = Reader::from_reader(bytes);
        reader.config_mut().trim_text(false);
        let mut stack: Vec<Element> = Vec::new();
        let mut root: Option<Element> = None;
        loop {
            let event = reader
                .read_event()
                .map_err(|e| format!("not XML at byte {}: {e}", reader.buffer_position()))?;
            match event {
                Event::Start(start) => stack.push(open(&start)?),
                Event::Empty(start) => {
                    let e = open(&start)?;
                    close(&mut stack, &mut root, e)?;
                }
                Event::End(_) => {
                    let e = stack.pop().ok_or("an end tag without its start")?;
                    close(&mut stack, &mut root, e)?;
                }
                Event::Text(t) => {
                    if let Some(top) = stack.last_mut() {
                        top.text
                            .push_str(&t.decode().map_err(|e| format!("text: {e}"))?);
                    }
                }
                Event::CData(t) => {
                    if let Some(top) = stack.last_mut() {
                        top.text
                            .push_str(&t.decode().map_err(|e| format!("CDATA: {e}"))?);
                    }
                }
                Event::GeneralRef(r) => {
                    let name = r.decode().map_err(|e| format!("reference: {e}"))?;
                    let entity = format!("&{name};");
                    let text = quick_xml::escape::unescape(&entity)
                        .map_err(|e| format!("reference {entity}: {e}"))?;
                    if let Some(top) = stack.last_mut() {
                        top.text.push_str(&text);
                    }
                }
                Event::Eof => break,
                Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
            }
        }
        if !stack.is_empty() {
            return Err(format!("the document ends inside <{}>", stack[0].name));
        }
        root.ok_or_else(|| "no element in the answer".to_owned())
    }

    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The element at `path` (child names, in order) below this one.
    pub fn at(&self, path: &[&str]) -> Option<&Element> {
        path.iter().try_fold(self, |e, name| e.child(name))
    }

    /// The text of the child at `path`, when it is there.
    pub fn text_at(&self, path: &[&str]) -> Option<&str> {
        self.at(path).map(|e| e.text.as_str())
    }

    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn open(start: &quick_xml::events::BytesStart<'_>) -> Result<Element, String> {
    let name = String::from_utf8_lossy(start.local_name().as_ref()).into_owned();
    let mut e = Element {
        name,
        ..Element::default()
    };
    for a in start.attributes() {
        let a = a.map_err(|err| format!("attribute: {err}"))?;
        let key = String::from_utf8_lossy(a.key.local_name().as_ref()).into_owned();
        let value = a
            .unescape_value()
            .map_err(|err| format!("attribute {key}: {err}"))?
            .into_owned();
        let prefix = a.key.prefix().map(|p| p.as_ref().to_vec());
        match prefix.as_deref() {
            // `xsi:type="vim25:ArrayOfString"`: the type's local name. Go's encoder
            // (vcsim) binds the schema-instance namespace to another prefix
            // (`XMLSchema-instance:type`): a prefixed `type` is that attribute, the only
            // one SOAP puts in a namespace.
            Some(p) if key == "type" && p != b"xmlns" => {
                let local = value.rsplit(':').next().unwrap_or(&value).to_owned();
                e.xsi_type = Some(local);
            }
            Some(b"xmlns") => {}
            _ if key == "xmlns" => {}
            _ => e.attrs.push((key, value)),
        }
    }
    Ok(e)
}

fn close(stack: &mut [Element], root: &mut Option<Element>, e: Element) -> Result<(), String> {
    match stack.last_mut() {
        Some(parent) => parent.children.push(e),
        None if root.is_none() => *root = Some(e),
        None => return Err("more than one root element".into()),
    }
    Ok(())
}

/// `s` escaped for an element's text or an attribute's value.
pub fn esc(s: &str) -> Cow<'_, str> {
    quick_xml::escape::escape(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_types_text_and_references() {
        let doc = br#"<?xml version="1.0"?>
<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
 <soapenv:Body><RetrievePropertiesExResponse xmlns="urn:vim25"><returnval><objects>
  <obj xmlns:XMLSchema-instance="http://www.w3.org/2001/XMLSchema-instance" XMLSchema-instance:type="ManagedObjectReference" type="VirtualMachine">vm-42</obj>
  <propSet><name>name</name><val xsi:type="xsd:string">a &amp; b &#x3c;c&gt;</val></propSet>
  <propSet><name>config.template</name><val xsi:type="xsd:boolean">false</val></propSet>
 </objects></returnval></RetrievePropertiesExResponse></soapenv:Body></soapenv:Envelope>"#;
        let root = Element::parse(doc).unwrap();
        assert_eq!(root.name, "Envelope");
        let objects = root
            .at(&[
                "Body",
                "RetrievePropertiesExResponse",
                "returnval",
                "objects",
            ])
            .unwrap();
        let obj = objects.child("obj").unwrap();
        assert_eq!(
            (obj.attr("type"), obj.text.as_str()),
            (Some("VirtualMachine"), "vm-42")
        );
        let props: Vec<_> = objects.all("propSet").collect();
        assert_eq!(props.len(), 2);
        let val = props[0].child("val").unwrap();
        assert_eq!(val.xsi_type.as_deref(), Some("string"));
        assert_eq!(val.text, "a & b <c>");
    }

    #[test]
    fn what_is_not_xml_is_said() {
        for bad in [
            &b"<html><body>502 Bad Gateway</body>"[..],
            b"",
            b"plain words",
            b"<a></b>",
        ] {
            assert!(
                Element::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(esc("<x & \"y\">"), "&lt;x &amp; &quot;y&quot;&gt;");
    }
}
