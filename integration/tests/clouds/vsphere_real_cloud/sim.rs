//! Shaping vcsim's inventory as a test needs it, through the same APIs an operator's
//! tools use: ReconfigVM (vcsim's `SET.guest.*` extra config plays VMware Tools),
//! PowerOffVM, tags over the REST API, sessions terminated from another session.

use http::{HeaderValue, Method};
use overcast_cloud_http::{HttpClient, HttpSettings, Request};
use overcast_cloud_vsphere::inventory::properties;
use overcast_cloud_vsphere::session::{Endpoint, Vcenter};
use overcast_cloud_vsphere::soap::{el, Moref};
use overcast_integration::vcsim::run_task;
use overcast_integration::vcsim::Vcsim;
pub use overcast_integration::vcsim::{plug_disk, unplug_disk, vms};
use serde_json::{json, Value};

/// What a guest reports and the VM's shape.
pub struct Guest<'a> {
    pub host_name: &'a str,
    pub ip: &'a str,
    pub guest_id: &'a str,
    pub cpus: u32,
    pub memory_mb: u64,
}

pub async fn reconfigure(vc: &Vcenter, vm: &Moref, g: &Guest<'_>) {
    let extra = |k: &str, v: &str| {
        format!(
            "<extraConfig><key>{k}</key><value xsi:type=\"xsd:string\">{v}</value></extraConfig>"
        )
    };
    let spec = format!(
        "<spec>{}{}{}{}{}</spec>",
        el("guestId", g.guest_id),
        el("numCPUs", &g.cpus.to_string()),
        el("memoryMB", &g.memory_mb.to_string()),
        extra("SET.guest.ipAddress", g.ip),
        extra("SET.guest.hostName", g.host_name),
    );
    run_task(vc, "ReconfigVM_Task", &(vm.xml("_this") + &spec)).await;
}

pub async fn power_off(vc: &Vcenter, vm: &Moref) {
    run_task(vc, "PowerOffVM_Task", &vm.xml("_this")).await;
}

pub async fn destroy(vc: &Vcenter, vm: &Moref) {
    run_task(vc, "Destroy_Task", &vm.xml("_this")).await;
}

/// Ends every session but the caller's own (what an expired session looks like to the
/// others).
pub async fn terminate_other_sessions(vc: &Vcenter) {
    let sm = vc.content().await.unwrap().session_manager.clone();
    let p = properties(vc, &sm, &["sessionList", "currentSession"])
        .await
        .unwrap();
    let mine = p
        .get("currentSession")
        .and_then(|s| s.text_at(&["key"]))
        .unwrap()
        .to_owned();
    let keys: Vec<String> = p
        .get("sessionList")
        .unwrap()
        .all("UserSession")
        .filter_map(|s| s.text_at(&["key"]).map(str::to_owned))
        .filter(|k| *k != mine)
        .collect();
    assert!(!keys.is_empty(), "another session to end");
    let params = sm.xml("_this") + &keys.iter().map(|k| el("sessionId", k)).collect::<String>();
    vc.call(Endpoint::Vim, "TerminateSession", &params, false)
        .await
        .unwrap();
}

/// vcsim's REST API as a test drives it.
pub struct Rest {
    http: HttpClient,
    base: String,
    session: String,
}

impl Rest {
    pub async fn login(sim: &Vcsim) -> Self {
        let mut settings = HttpSettings::new("vcsim-rest");
        settings.ca_pem = Some(std::fs::read_to_string(&sim.ca_file).unwrap());
        let http = HttpClient::new(settings, None).unwrap();
        let base = format!("https://127.0.0.1:{}/rest", sim.port);
        let mut req = Request::new(
            "login",
            Method::POST,
            format!("{base}/com/vmware/cis/session").parse().unwrap(),
        );
        req.headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcjpwYXNz"),
        );
        let r = http.send(req).await.unwrap();
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        Self {
            http,
            base,
            session: v["value"].as_str().unwrap().to_owned(),
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        let mut req = Request::new(
            "post",
            Method::POST,
            format!("{}{path}", self.base).parse().unwrap(),
        );
        req.headers.insert(
            "vmware-api-session-id",
            HeaderValue::from_str(&self.session).unwrap(),
        );
        req.headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        req.body = body.to_string().into();
        let r = self.http.send(req).await.unwrap();
        assert!(r.status.is_success(), "{path}: {}", r.status);
        serde_json::from_slice(&r.body).unwrap_or(Value::Null)
    }

    /// A new tag category, its id.
    pub async fn category(&self, name: &str) -> String {
        let cat = self
            .post(
                "/com/vmware/cis/tagging/category",
                json!({"create_spec": {"name": name, "description": "", "cardinality": "SINGLE", "associable_types": []}}),
            )
            .await;
        cat["value"].as_str().unwrap().to_owned()
    }

    /// A new tag `name` in the category, attached to `obj`.
    pub async fn tag(&self, category_id: &str, name: &str, obj: &Moref) {
        let tag = self
            .post(
                "/com/vmware/cis/tagging/tag",
                json!({"create_spec": {"name": name, "description": "", "category_id": category_id}}),
            )
            .await;
        let tag_id = tag["value"].as_str().unwrap().to_owned();
        self.post(
            &format!("/com/vmware/cis/tagging/tag-association/id:{tag_id}?~action=attach"),
            json!({"object_id": {"type": obj.kind, "id": obj.id}}),
        )
        .await;
    }
}
