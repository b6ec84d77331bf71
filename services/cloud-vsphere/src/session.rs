//! One vCenter's SOAP session: the service content, login with the configured
//! credentials, the session cookie sent with every call (and, for the endpoints beside
//! `/sdk`, in the header), a re-login — once — when a call finds the session gone, and a
//! keep-alive so an idle controller's session does not expire between syncs. The
//! password and the cookie are never in a log or an error.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Uri};
use overcast_cloud::CloudError;
use overcast_cloud_http::{ApiMetrics, HttpClient, HttpSettings, Request};
use tokio::sync::{Mutex, OnceCell};

use crate::credentials::{self, Credential};
use crate::soap::{self, el, envelope, fault_error, Answer, Moref, PBM_NS, VIM_NS, VSAN_NS};
use crate::xml::Element;

/// Where a call goes: the vim25 API, CNS (`/vsanHealth`) or storage policies (`/pbm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Vim,
    Cns,
    Pbm,
}

impl Endpoint {
    fn path(self) -> &'static str {
        match self {
            Self::Vim => "/sdk",
            Self::Cns => "/vsanHealth",
            Self::Pbm => "/pbm",
        }
    }

    fn ns(self) -> &'static str {
        match self {
            Self::Vim => VIM_NS,
            Self::Cns => VSAN_NS,
            Self::Pbm => PBM_NS,
        }
    }

    /// `SOAPAction`: CNS is a vim25 service; PBM's client sends its namespace with no
    /// version (govmomi's service client does the same).
    fn action(self, version: &str) -> String {
        match self {
            Self::Vim | Self::Cns => format!("urn:vim25/{version}"),
            Self::Pbm => "urn:pbm/".to_owned(),
        }
    }
}

/// What `RetrieveServiceContent` names: the managers every call goes through.
#[derive(Debug, Clone)]
pub struct ServiceContent {
    pub root_folder: Moref,
    pub property_collector: Moref,
    pub view_manager: Moref,
    pub search_index: Moref,
    pub session_manager: Moref,
    /// The vCenter's First Class Disk manager (`VcenterVStorageObjectManager`, vSphere
    /// 6.5+; absent on an ESXi host or an older vCenter).
    pub vstorage_object_manager: Option<Moref>,
    /// `about.apiVersion`: the version every later call asks for (`SOAPAction`).
    pub api_version: String,
    /// `about.instanceUuid`: this vCenter's id (CNS records it with each volume).
    pub instance_uuid: String,
    /// `about.version`, the release (`7.0.3`, `8.0.2`): what CNS can do is read from it,
    /// as vsphere-csi-driver reads it.
    pub version: String,
}

impl ServiceContent {
    /// Whether this vCenter has CNS snapshots: vSphere 7.0 Update 3 or later, by
    /// `about.version` (vsphere-csi-driver's `IsvSphereVersion70U3orAbove`, which reads
    /// the first three digits of it; here the numbers, so a 10.x is not taken for 1.0.0).
    pub fn cns_snapshots(&self) -> bool {
        let mut parts = self
            .version
            .split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let release = (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        release >= (7, 0, 3)
    }
}

/// The session cookie and how many logins made it (a call that failed on login `n`
/// asks for login `n + 1`, so concurrent failures log in once).
#[derive(Default)]
struct Session {
    cookie: Option<String>,
    logins: u64,
}

pub struct Vcenter {
    http: HttpClient,
    /// `https://server:port`, and the server alone for messages.
    base: String,
    server: String,
    login: Login,
    content: OnceCell<ServiceContent>,
    session: Mutex<Session>,
    keepalive: Duration,
    me: Weak<Vcenter>,
}

impl std::fmt::Debug for Vcenter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vcenter")
            .field("server", &self.server)
            .field("login", &self.login)
            .finish_non_exhaustive()
    }
}

/// Where a login's user and password come from.
#[derive(Clone)]
pub enum Login {
    Password(Credential),
    /// A mounted Secret in upstream's key format, read at each login (so a rotated
    /// Secret is used from the next login on).
    Directory(PathBuf),
    /// The Secret itself, read through the Kubernetes API at each login.
    Secret(Arc<credentials::SecretSource>),
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Password(c) => write!(f, "{c:?}"),
            Self::Directory(d) => write!(f, "Directory({})", d.display()),
            Self::Secret(s) => write!(f, "{s:?}"),
        }
    }
}

/// How a [`Vcenter`] is reached.
#[derive(Debug, Clone)]
pub struct Target {
    pub server: String,
    pub port: u16,
    pub login: Login,
    /// Between keep-alive calls on an idle session (vCenter's idle timeout is 30
    /// minutes by default).
    pub keepalive: Duration,
}

impl Vcenter {
    pub fn new(
        target: Target,
        settings: HttpSettings,
        metrics: Option<Arc<ApiMetrics>>,
    ) -> Result<Arc<Self>, CloudError> {
        let http = HttpClient::new(settings, metrics)?;
        let host = if target.server.contains(':') && !target.server.starts_with('[') {
            format!("[{}]", target.server)
        } else {
            target.server.clone()
        };
        Ok(Arc::new_cyclic(|me| Self {
            http,
            base: format!("https://{host}:{}", target.port),
            server: target.server,
            login: target.login,
            content: OnceCell::new(),
            session: Mutex::new(Session::default()),
            keepalive: target.keepalive,
            me: me.clone(),
        }))
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    pub fn metrics(&self) -> &Arc<ApiMetrics> {
        self.http.metrics()
    }

    /// The HTTP client and base URL, for the REST API's own session.
    pub(crate) fn rest_parts(&self) -> (&HttpClient, &str) {
        (&self.http, &self.base)
    }

    /// The user and password a login uses now.
    pub(crate) async fn credential(&self) -> Result<Credential, CloudError> {
        match &self.login {
            Login::Password(c) => Ok(c.clone()),
            Login::Directory(dir) => credentials::from_directory(dir, &self.server)
                .map_err(|e| CloudError::Unauthenticated(format!("vsphere: {e}"))),
            Login::Secret(source) => source.credential(&self.server).await,
        }
    }

    /// The service content, asked once (no session needed).
    pub async fn content(&self) -> Result<&ServiceContent, CloudError> {
        self.content
            .get_or_try_init(|| async {
                let this = Moref::new("ServiceInstance", "ServiceInstance");
                let params = this.xml("_this");
                let answer = self
                    .post(
                        Endpoint::Vim,
                        "RetrieveServiceContent",
                        &params,
                        None,
                        "6.5",
                        true,
                    )
                    .await?
                    .0;
                let r = match answer {
                    Answer::Ok(r) => r,
                    Answer::Fault(f) => {
                        return Err(fault_error(&self.server, "RetrieveServiceContent", &f))
                    }
                };
                let rv = r.child("returnval").ok_or_else(|| {
                    CloudError::Unavailable(format!(
                        "vsphere: {}: RetrieveServiceContent answered no content",
                        self.server
                    ))
                })?;
                let moref = |name: &str| {
                    rv.child(name).and_then(Moref::of).ok_or_else(|| {
                        CloudError::Unavailable(format!(
                            "vsphere: {}: the service content lacks {name}",
                            self.server
                        ))
                    })
                };
                Ok(ServiceContent {
                    root_folder: moref("rootFolder")?,
                    property_collector: moref("propertyCollector")?,
                    view_manager: moref("viewManager")?,
                    search_index: moref("searchIndex")?,
                    session_manager: moref("sessionManager")?,
                    vstorage_object_manager: rv.child("vStorageObjectManager").and_then(Moref::of),
                    api_version: rv
                        .text_at(&["about", "apiVersion"])
                        .unwrap_or("6.5")
                        .to_owned(),
                    instance_uuid: rv
                        .text_at(&["about", "instanceUuid"])
                        .unwrap_or_default()
                        .to_owned(),
                    version: rv
                        .text_at(&["about", "version"])
                        .unwrap_or_default()
                        .to_owned(),
                })
            })
            .await
    }

    /// Calls `method` with its parameters (the `_this` included), logged in; a session
    /// the vCenter no longer knows is logged into again once and the call repeated.
    /// `reads_only`: the method changes nothing, so a failed attempt may be sent again.
    pub async fn call(
        &self,
        endpoint: Endpoint,
        method: &'static str,
        params: &str,
        reads_only: bool,
    ) -> Result<Element, CloudError> {
        let version = self.content().await?.api_version.clone();
        let attempt = async |cookie: &str| {
            self.post(endpoint, method, params, Some(cookie), &version, reads_only)
                .await
                .map(|(answer, _)| answer)
        };
        let (cookie, login) = self.logged_in(None).await?;
        let answer = match attempt(&cookie).await? {
            Answer::Fault(f) if f.kind == "NotAuthenticated" => {
                tracing::info!(vcenter = %self.server, method, "the vCenter session expired; logging in again");
                let (cookie, _) = self.logged_in(Some(login)).await?;
                attempt(&cookie).await?
            }
            other => other,
        };
        match answer {
            Answer::Ok(e) => Ok(e),
            Answer::Fault(f) => Err(fault_error(&self.server, method, &f)),
        }
    }

    /// The session cookie, logging in when there is none or when the one login
    /// `failed` made is the current one.
    async fn logged_in(&self, failed: Option<u64>) -> Result<(String, u64), CloudError> {
        let mut s = self.session.lock().await;
        if let Some(cookie) = &s.cookie {
            if failed != Some(s.logins) {
                return Ok((cookie.clone(), s.logins));
            }
        }
        let content = self.content().await?.clone();
        let credential = self.credential().await?;
        let params = format!(
            "{}{}{}",
            content.session_manager.xml("_this"),
            el("userName", &credential.user),
            el("password", &credential.password)
        );
        let (answer, cookie) = self
            .post(
                Endpoint::Vim,
                "Login",
                &params,
                None,
                &content.api_version,
                false,
            )
            .await?;
        match answer {
            Answer::Ok(_) => {}
            Answer::Fault(f) if f.kind == "InvalidLogin" => {
                return Err(CloudError::Unauthenticated(format!(
                    "vsphere: {}: login as {:?} refused (InvalidLogin): check the user and password",
                    self.server, credential.user
                )))
            }
            Answer::Fault(f) => return Err(fault_error(&self.server, "Login", &f)),
        }
        let cookie = cookie.ok_or_else(|| {
            CloudError::Unavailable(format!(
                "vsphere: {}: Login answered without a session cookie",
                self.server
            ))
        })?;
        let first = s.cookie.is_none() && s.logins == 0;
        s.cookie = Some(cookie.clone());
        s.logins += 1;
        if first {
            self.start_keepalive();
        }
        Ok((cookie, s.logins))
    }

    /// A call now and then on an idle session keeps it (and the views made in it)
    /// alive; it stops when the client is dropped.
    fn start_keepalive(&self) {
        let me = self.me.clone();
        let period = self.keepalive;
        if period.is_zero() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(vc) = me.upgrade() else { return };
                let this = Moref::new("ServiceInstance", "ServiceInstance");
                if let Err(e) = vc
                    .call(Endpoint::Vim, "CurrentTime", &this.xml("_this"), true)
                    .await
                {
                    tracing::debug!(vcenter = %vc.server, error = %e, "keep-alive call failed");
                }
            }
        });
    }

    /// One POST; the answer and the session cookie it set, if any.
    async fn post(
        &self,
        endpoint: Endpoint,
        method: &'static str,
        params: &str,
        cookie: Option<&str>,
        version: &str,
        reads_only: bool,
    ) -> Result<(Answer, Option<String>), CloudError> {
        let header_cookie = match endpoint {
            Endpoint::Vim => None,
            Endpoint::Cns | Endpoint::Pbm => cookie.map(|c| c.trim_matches('"')),
        };
        let doc = envelope(endpoint.ns(), method, params, header_cookie);
        let uri: Uri = format!("{}{}", self.base, endpoint.path())
            .parse()
            .map_err(|e| CloudError::InvalidArgument(format!("vsphere: {}: {e}", self.base)))?;
        let mut req = Request::new(method, Method::POST, uri);
        req.reads_only = reads_only;
        req.body = Bytes::from(doc);
        let h = &mut req.headers;
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/xml; charset=\"utf-8\""),
        );
        let action = endpoint.action(version);
        h.insert(
            "SOAPAction",
            HeaderValue::from_str(&action)
                .map_err(|e| CloudError::InvalidArgument(e.to_string()))?,
        );
        if let Some(c) = cookie {
            let mut v = HeaderValue::from_str(&format!("{SESSION_COOKIE}={c}")).map_err(|_| {
                CloudError::Internal("vsphere: an unprintable session cookie".into())
            })?;
            v.set_sensitive(true);
            h.insert(http::header::COOKIE, v);
        }
        let resp = self.http.send(req).await?;
        let set = resp
            .headers
            .get_all(http::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(session_cookie);
        let answer = soap::read(&self.server, method, resp.status.as_u16(), &resp.body)?;
        if matches!(answer, Answer::Fault(_)) {
            // The request failed at the vCenter (InvalidLogin, NotAuthenticated, …) though
            // HTTP carried it: counted in `vsphere_api_request_errors_total` too.
            self.http.metrics().answered_with_error(method);
        }
        Ok((answer, set))
    }
}

/// vim25's session cookie.
const SESSION_COOKIE: &str = "vmware_soap_session";

/// The session cookie's value in a `Set-Cookie` header, as sent back.
fn session_cookie(header: &str) -> Option<String> {
    let first = header.split(';').next()?.trim();
    let (name, value) = first.split_once('=')?;
    (name.trim() == SESSION_COOKIE && !value.is_empty()).then(|| value.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cns_snapshots_come_with_vsphere_7_0_update_3() {
        let content = |version: &str| ServiceContent {
            root_folder: Moref::new("Folder", "f"),
            property_collector: Moref::new("PropertyCollector", "p"),
            view_manager: Moref::new("ViewManager", "v"),
            search_index: Moref::new("SearchIndex", "s"),
            session_manager: Moref::new("SessionManager", "m"),
            vstorage_object_manager: None,
            api_version: "8.0.3.0".into(),
            instance_uuid: String::new(),
            version: version.into(),
        };
        for (version, has) in [
            ("6.5.0", false),
            ("6.7.0", false),
            ("7.0.2", false),
            ("7.0.3", true),
            ("7.0.3.1", true),
            ("8.0.0", true),
            ("8.0.3", true),
            ("10.0.0", true),
            ("", false),
        ] {
            assert_eq!(content(version).cns_snapshots(), has, "{version:?}");
        }
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        assert_eq!(
            session_cookie("vmware_soap_session=\"52ab\"; Path=/; HttpOnly; Secure;").as_deref(),
            Some("\"52ab\"")
        );
        assert_eq!(
            session_cookie("vmware_soap_session=abc").as_deref(),
            Some("abc")
        );
        assert_eq!(session_cookie("other=1; Path=/"), None);
        assert_eq!(session_cookie("vmware_soap_session=; Path=/"), None);
    }

    #[test]
    fn the_password_is_not_in_debug() {
        let vc = Vcenter::new(
            Target {
                server: "vc".into(),
                port: 443,
                login: Login::Password(Credential {
                    user: "u".into(),
                    password: "hunter2".into(),
                }),
                keepalive: Duration::ZERO,
            },
            HttpSettings::new("vsphere"),
            None,
        )
        .unwrap();
        assert!(!format!("{vc:?}").contains("hunter2"));
    }
}
