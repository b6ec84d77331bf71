//! SOAP as vCenter speaks it: the envelope around a method's body, the answer's body or
//! its fault, and a fault's typed error. Faults are told apart by their detail's type
//! (`NotAuthenticated`, `ManagedObjectNotFound`, …), never by their message.

use overcast_cloud::CloudError;

use crate::xml::{esc, Element};

pub const VIM_NS: &str = "urn:vim25";
/// CNS's types and methods (`/vsanHealth`).
pub const VSAN_NS: &str = "urn:vsan";
/// Storage policies' (`/pbm`).
pub const PBM_NS: &str = "urn:pbm";

/// A managed object: its type and id (`VirtualMachine` `vm-42`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Moref {
    pub kind: String,
    pub id: String,
}

impl Moref {
    pub fn new(kind: &str, id: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            id: id.to_owned(),
        }
    }

    /// An element holding a reference (`<obj type="VirtualMachine">vm-42</obj>`).
    pub fn of(e: &Element) -> Option<Self> {
        let kind = e.attr("type")?;
        (!e.text.is_empty()).then(|| Self::new(kind, e.text.trim()))
    }

    /// This reference as the element `name`.
    pub fn xml(&self, name: &str) -> String {
        format!(
            "<{name} type=\"{}\">{}</{name}>",
            esc(&self.kind),
            esc(&self.id)
        )
    }
}

impl std::fmt::Display for Moref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.id)
    }
}

/// A simple element with escaped text.
pub fn el(name: &str, text: &str) -> String {
    format!("<{name}>{}</{name}>", esc(text))
}

/// The request document: `method` in namespace `ns` with its (already written)
/// parameters; `session` goes in the header as `vcSessionCookie`, which the endpoints
/// beside `/sdk` (CNS, PBM) read the session from.
pub fn envelope(ns: &str, method: &str, params: &str, session: Option<&str>) -> String {
    let header = match session {
        Some(cookie) => format!(
            "<soapenv:Header><vcSessionCookie>{}</vcSessionCookie></soapenv:Header>",
            esc(cookie)
        ),
        None => String::new(),
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\" \
xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">\
{header}<soapenv:Body><{method} xmlns=\"{ns}\">{params}</{method}></soapenv:Body></soapenv:Envelope>"
    )
}

/// A SOAP fault: its detail's type (`NotAuthenticated`; empty when the fault has no
/// typed detail) and its `faultstring`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: String,
    pub message: String,
    /// The object a `ManagedObjectNotFound` names.
    pub object: Option<Moref>,
}

/// What an answer held: the method's response element, or a fault.
#[derive(Debug)]
pub enum Answer {
    Ok(Element),
    Fault(Fault),
}

/// Reads an answer to `method`. Anything that is not a SOAP envelope (an HTML page from
/// a proxy, a cut-off body) is `Unavailable`: it says nothing about the objects.
pub fn read(
    cloud_host: &str,
    method: &str,
    status: u16,
    body: &[u8],
) -> Result<Answer, CloudError> {
    let not_soap = |why: String| {
        CloudError::Unavailable(format!(
            "vsphere: {method} at {cloud_host}: HTTP {status}, not a SOAP answer ({why})"
        ))
    };
    let root = Element::parse(body).map_err(not_soap)?;
    if root.name != "Envelope" {
        return Err(not_soap(format!("a <{}> document", root.name)));
    }
    let Some(body) = root.child("Body") else {
        return Err(not_soap("no Body".into()));
    };
    if let Some(fault) = body.child("Fault") {
        let detail = fault.child("detail").and_then(|d| d.children.first());
        let kind = detail
            .map(|d| {
                d.xsi_type
                    .clone()
                    .unwrap_or_else(|| d.name.trim_end_matches("Fault").to_owned())
            })
            .unwrap_or_default();
        return Ok(Answer::Fault(Fault {
            kind,
            message: fault
                .text_at(&["faultstring"])
                .unwrap_or_default()
                .to_owned(),
            object: detail.and_then(|d| d.child("obj")).and_then(Moref::of),
        }));
    }
    match body.children.first() {
        Some(resp) if status == 200 => Ok(Answer::Ok(resp.clone())),
        _ => Err(not_soap("no response element".into())),
    }
}

/// The typed error of a fault: what a retry would do decides (see
/// `overcast_cloud::CloudError`). Only `ManagedObjectNotFound` and `NotFound` are
/// "not found"; a fault this table does not know is `Unavailable`, so nothing is ever
/// judged gone on it.
pub fn fault_error(host: &str, method: &str, f: &Fault) -> CloudError {
    let msg = format!(
        "vsphere: {method} at {host}: {}{}",
        if f.kind.is_empty() { "fault" } else { &f.kind },
        if f.message.is_empty() {
            String::new()
        } else {
            format!(": {}", f.message.chars().take(300).collect::<String>())
        }
    );
    match f.kind.as_str() {
        "ManagedObjectNotFound" | "NotFound" => CloudError::NotFound {
            kind: "object",
            id: f
                .object
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_else(|| msg.clone()),
        },
        "NotAuthenticated" | "InvalidLogin" => CloudError::Unauthenticated(msg),
        "NoPermission" => CloudError::PermissionDenied(msg),
        "InvalidArgument" | "InvalidProperty" | "InvalidRequest" | "InvalidType"
        | "MethodNotFound" | "NotSupported" | "InvalidName" => CloudError::InvalidArgument(msg),
        "DuplicateName" | "AlreadyExists" => CloudError::Conflict(msg),
        "ResourceInUse" | "InvalidState" | "InvalidPowerState" | "TaskInProgress"
        | "ConcurrentAccess" => CloudError::Busy(msg),
        "InsufficientResourcesFault" | "OutOfBounds" | "NoDiskSpace" => {
            CloudError::ResourceExhausted(msg)
        }
        // CNS says most of what went wrong in one fault type, its message telling which:
        // a datastore without the space is the provisioner's RESOURCE_EXHAUSTED (its
        // backoff, and an event saying so), not a retry that will fail the same way.
        // (vsphere-csi-driver answers INTERNAL for every CNS fault.)
        "CnsFault" if no_space(&f.message) => CloudError::ResourceExhausted(msg),
        // A datastore the hosts cannot reach now: transient, retried.
        "InaccessibleDatastore" | "DatastoreNotWritableOnHost" => CloudError::Unavailable(msg),
        "RequestCanceled" | "HostCommunication" | "HostNotConnected" | "SystemError"
        | "RuntimeFault" => CloudError::Unavailable(msg),
        _ => CloudError::Unavailable(msg),
    }
}

/// Whether a CNS fault's message says the datastore lacks the space.
fn no_space(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "insufficient disk space",
        "insufficient space",
        "no space",
        "not enough space",
        "nodiskspace",
    ]
    .iter()
    .any(|s| m.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_AUTH: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/encoding/" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<soapenv:Body><soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>The session is not authenticated.</faultstring>
<detail><NotAuthenticatedFault xmlns="urn:vim25" xsi:type="NotAuthenticated"><object type="Folder">group-d1</object><privilegeId>System.View</privilegeId></NotAuthenticatedFault></detail>
</soapenv:Fault></soapenv:Body></soapenv:Envelope>"#;

    #[test]
    fn faults_are_typed_by_their_detail() {
        let Answer::Fault(f) = read("vc", "FindByUuid", 500, NOT_AUTH.as_bytes()).unwrap() else {
            panic!("a fault")
        };
        assert_eq!(f.kind, "NotAuthenticated");
        assert!(matches!(
            fault_error("vc", "FindByUuid", &f),
            CloudError::Unauthenticated(_)
        ));
        let gone = r#"<Envelope><Body><Fault><faultstring>managed object not found: VirtualMachine:vm-9</faultstring>
<detail><ManagedObjectNotFoundFault><obj type="VirtualMachine">vm-9</obj></ManagedObjectNotFoundFault></detail></Fault></Body></Envelope>"#;
        let Answer::Fault(f) = read("vc", "RetrievePropertiesEx", 500, gone.as_bytes()).unwrap()
        else {
            panic!("a fault")
        };
        assert_eq!(f.object, Some(Moref::new("VirtualMachine", "vm-9")));
        assert!(matches!(
            fault_error("vc", "x", &f),
            CloudError::NotFound { id, .. } if id == "VirtualMachine:vm-9"
        ));
        for kind in ["NoPermission", "SystemError", "SomethingNew", ""] {
            let f = Fault {
                kind: kind.into(),
                message: String::new(),
                object: None,
            };
            assert!(
                !matches!(fault_error("vc", "x", &f), CloudError::NotFound { .. }),
                "{kind} must not read as gone"
            );
        }
    }

    #[test]
    fn a_cns_fault_saying_no_space_is_resource_exhausted_others_stay_retryable() {
        let fault = |kind: &str, message: &str| Fault {
            kind: kind.into(),
            message: message.into(),
            object: None,
        };
        let space = fault(
            "CnsFault",
            "CnsFault error: Failed to create disk: Insufficient disk space on datastore 'ds-1'.",
        );
        assert!(matches!(
            fault_error("vc", "CnsCreateVolume", &space),
            CloudError::ResourceExhausted(m) if m.contains("Insufficient disk space")
        ));
        assert!(matches!(
            fault_error("vc", "CnsCreateVolume", &fault("NoDiskSpace", "")),
            CloudError::ResourceExhausted(_)
        ));
        for other in [
            fault("CnsFault", "failed to add task to list view"),
            fault("InaccessibleDatastore", "datastore ds-1 is not accessible"),
        ] {
            assert!(
                matches!(
                    fault_error("vc", "CnsCreateVolume", &other),
                    CloudError::Unavailable(_)
                ),
                "{other:?}"
            );
        }
    }

    #[test]
    fn answers_that_are_not_soap_are_unavailable() {
        for (status, body) in [
            (502, "<html><body><h1>502 Bad Gateway</h1></body></html>"),
            (200, "<html><body>login</body></html>"),
            (200, "<soapenv:Envelope><soapenv:Body>"),
            (503, ""),
        ] {
            let e = read("vc", "RetrievePropertiesEx", status, body.as_bytes()).unwrap_err();
            assert!(
                matches!(e, CloudError::Unavailable(_)),
                "{status} {body}: {e:?}"
            );
        }
        let ok = r#"<Envelope><Body><CurrentTimeResponse><returnval>2026-01-01T00:00:00Z</returnval></CurrentTimeResponse></Body></Envelope>"#;
        let Answer::Ok(e) = read("vc", "CurrentTime", 200, ok.as_bytes()).unwrap() else {
            panic!("an answer")
        };
        assert_eq!(e.text_at(&["returnval"]), Some("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn envelopes_escape_what_they_carry() {
        let doc = envelope(VIM_NS, "Login", &el("password", "<&>\""), Some("a\"b"));
        assert!(
            doc.contains("<password>&lt;&amp;&gt;&quot;</password>"),
            "{doc}"
        );
        assert!(
            doc.contains("<vcSessionCookie>a&quot;b</vcSessionCookie>"),
            "{doc}"
        );
        let parsed = Element::parse(doc.as_bytes()).unwrap();
        assert_eq!(
            parsed.text_at(&["Body", "Login", "password"]),
            Some("<&>\"")
        );
    }
}
