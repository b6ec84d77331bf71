//! The services as the tests see them: their admin API (by curl, never the provider's
//! client), a project per test with its holdings and quotas, and the image copies the
//! sim's Cinder leaves.

use std::collections::BTreeMap;
use std::process::Command;

use overcast_integration::faulty_front::FaultyFront;
use serde_json::{json, Value};

/// The services' admin API, by curl (the tests' own calls, never the provider's).
pub(crate) struct Admin {
    pub env: BTreeMap<String, String>,
    token: String,
    admin_project: String,
}

fn curl(method: &str, url: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method])
        .args(["-H", "Content-Type: application/json"]);
    if url.contains(":8774/") {
        // Nova's answers with their tags and the keypairs' shapes of 2.26.
        cmd.args(["-H", "OpenStack-API-Version: compute 2.26"]);
    }
    if let Some(t) = token {
        cmd.arg("-H").arg(format!("X-Auth-Token: {t}"));
    }
    if let Some(b) = body {
        cmd.args(["-d", &b.to_string()]);
    }
    let out = cmd.arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

impl Admin {
    /// The admin of the services the openrc names, or `None` (said skipped) without one.
    pub fn new(what: &str) -> Option<Self> {
        let Ok(path) = std::env::var("OVERCAST_TEST_OPENSTACK_OPENRC") else {
            overcast_integration::say_skipped(&format!(
                "set OVERCAST_TEST_OPENSTACK_OPENRC to the openrc of ../shared/sim/openstack to run {what}"
            ));
            return None;
        };
        let env = overcast_integration::ossim::openrc(&path);
        let project = env["OS_PROJECT_NAME"].clone();
        Some(Self::scoped(env, &project))
    }

    /// The same user working in the project `name` (Nova makes a server in the token's).
    pub fn in_project(&self, name: &str) -> Self {
        Self::scoped(self.env.clone(), name)
    }

    fn scoped(env: BTreeMap<String, String>, project: &str) -> Self {
        let auth = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": env["OS_USERNAME"], "domain": {"id": env["OS_USER_DOMAIN_ID"]},
                "password": env["OS_PASSWORD"]}}},
            "scope": {"project": {"name": project, "domain": {"id": env["OS_PROJECT_DOMAIN_ID"]}}}}});
        let out = Command::new("curl")
            .args(["-sS", "-i", "-H", "Content-Type: application/json", "-d"])
            .arg(auth.to_string())
            .arg(format!(
                "{}/auth/tokens",
                env["OS_AUTH_URL"].trim_end_matches('/')
            ))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let token = text
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("x-subject-token")
                    .then(|| v.trim().to_owned())
            })
            .expect("Keystone issued a token");
        let body: Value = serde_json::from_str(text.rsplit("\r\n\r\n").next().unwrap_or("{}"))
            .unwrap_or(Value::Null);
        let admin_project = body["token"]["project"]["id"]
            .as_str()
            .expect("a project-scoped token")
            .to_owned();
        Self {
            env,
            token,
            admin_project,
        }
    }

    /// `method` on a service's URL (`keystone:/projects`, `nova:/servers`, `neutron:/ports`,
    /// `cinder:/volumes`, `glance:/images`): (status, JSON).
    pub fn call(&self, method: &str, at: &str, body: Option<Value>) -> (u16, Value) {
        let (service, path) = at.split_once(':').expect("service:path");
        let base = match service {
            "keystone" => self.env["OS_AUTH_URL"].trim_end_matches('/').to_owned(),
            "nova" => "http://127.0.0.1:8774/v2.1".to_owned(),
            "neutron" => "http://127.0.0.1:9696/v2.0".to_owned(),
            "cinder" => format!("http://127.0.0.1:8776/v3/{}", self.admin_project),
            "glance" => "http://127.0.0.1:9292/v2".to_owned(),
            other => panic!("no service {other}"),
        };
        curl(
            method,
            &format!("{base}{path}"),
            Some(&self.token),
            body.as_ref(),
        )
    }

    /// A POST that must make what it asks for (200, 201 or 202).
    pub fn post(&self, at: &str, body: Value) -> Value {
        let (code, v) = self.call("POST", at, Some(body));
        assert!((200..=202).contains(&code), "POST {at}: {code} {v}");
        v
    }

    pub fn get(&self, at: &str) -> Value {
        let (code, v) = self.call("GET", at, None);
        // A cleanup runs while a failed test unwinds: it says what it could not read
        // instead of panicking again.
        if std::thread::panicking() {
            return if code == 200 { v } else { Value::Null };
        }
        assert_eq!(code, 200, "GET {at}: {v}");
        v
    }

    fn id_of(&self, at: &str, key: &str) -> String {
        self.get(at)[key][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{at}: none"))
            .to_owned()
    }

    /// A project of the test's own (`name`), the admin user its admin: its quotas and its
    /// objects are the test's alone. An earlier run's of that name is emptied and removed
    /// first.
    pub fn project(&self, name: &str) -> Project<'_> {
        if let Some(old) =
            self.get(&format!("keystone:/projects?name={name}"))["projects"][0]["id"].as_str()
        {
            Project {
                admin: self,
                id: old.to_owned(),
                name: name.to_owned(),
            }
            .remove();
        }
        let (code, made) = self.call(
            "POST",
            "keystone:/projects",
            Some(json!({"project": {"name": name, "domain_id": "default"}})),
        );
        assert_eq!(code, 201, "project {name}: {made}");
        let id = made["project"]["id"]
            .as_str()
            .expect("project id")
            .to_owned();
        let user = self.id_of(
            &format!("keystone:/users?name={}", self.env["OS_USERNAME"]),
            "users",
        );
        let role = self.id_of("keystone:/roles?name=admin", "roles");
        let (code, _) = self.call(
            "PUT",
            &format!("keystone:/projects/{id}/users/{user}/roles/{role}"),
            None,
        );
        assert!(code == 204 || code == 201, "role assignment: {code}");
        Project {
            admin: self,
            id,
            name: name.to_owned(),
        }
    }
}

/// A Keystone region of one test: every service of the openrc's region, Nova through a
/// front (`overcast_integration::faulty_front`) — where the provider, set to this region,
/// meets what the front plays. Removed (its endpoints and itself) when dropped.
pub(crate) struct Region<'a> {
    admin: &'a Admin,
    pub name: String,
    pub nova: FaultyFront,
}

impl Admin {
    pub async fn region(&self, name: &str) -> Region<'_> {
        let nova = FaultyFront::start("127.0.0.1:8774".parse().unwrap()).await;
        let region = Region {
            admin: self,
            name: name.to_owned(),
            nova,
        };
        region.remove();
        self.post("keystone:/regions", json!({"region": {"id": name}}));
        let home = &self.env["OS_REGION_NAME"];
        let endpoints = self.get(&format!(
            "keystone:/endpoints?interface=public&region_id={home}"
        ));
        let services = self.get("keystone:/services");
        for e in endpoints["endpoints"].as_array().into_iter().flatten() {
            let kind = services["services"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["id"] == e["service_id"])
                .map(|s| s["type"].clone())
                .unwrap_or_default();
            let mut url = e["url"].as_str().unwrap_or_default().to_owned();
            if kind == "compute" {
                url = url.replace("127.0.0.1:8774", &region.nova.addr.to_string());
            }
            self.post(
                "keystone:/endpoints",
                json!({"endpoint": {"service_id": e["service_id"], "interface": "public",
                                    "region_id": name, "url": url}}),
            );
        }
        // A token carries the catalog of its login: none issued before is given again.
        overcast_integration::keystone_front::forget_logins();
        region
    }
}

impl Region<'_> {
    fn remove(&self) {
        let eps = self
            .admin
            .get(&format!("keystone:/endpoints?region_id={}", self.name));
        for e in eps["endpoints"].as_array().into_iter().flatten() {
            if let Some(id) = e["id"].as_str() {
                self.admin
                    .call("DELETE", &format!("keystone:/endpoints/{id}"), None);
            }
        }
        self.admin
            .call("DELETE", &format!("keystone:/regions/{}", self.name), None);
        overcast_integration::keystone_front::forget_logins();
    }
}

impl Drop for Region<'_> {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A project of one test, removed (with everything in it) when dropped.
pub(crate) struct Project<'a> {
    pub admin: &'a Admin,
    pub id: String,
    pub name: String,
}

/// What a project holds, by kind (the counts a destroy must bring to zero).
pub(crate) type Holdings = BTreeMap<&'static str, Vec<String>>;

impl Project<'_> {
    /// Everything the project holds in Nova, Cinder and Neutron, and the key pair named
    /// as it is (a layout names its key pair by the prefix, the project's name here; Nova's
    /// key pairs are the user's, not the project's, so another test's are listed too).
    pub fn holdings(&self) -> Holdings {
        let a = self.admin;
        let p = &self.id;
        let names = |v: &Value, key: &str, field: &str| -> Vec<String> {
            v[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| o[field].as_str().unwrap_or("?").to_owned())
                .collect()
        };
        let mut out = Holdings::new();
        out.insert(
            "servers",
            names(
                &a.get(&format!("nova:/servers?all_tenants=1&project_id={p}")),
                "servers",
                "id",
            ),
        );
        // Cinder filters no list by project: the admin's list, each volume's project read.
        let volumes = a.get("cinder:/volumes/detail?all_tenants=1");
        out.insert(
            "volumes",
            volumes["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["os-vol-tenant-attr:tenant_id"] == p.as_str())
                .map(|v| v["id"].as_str().unwrap_or("?").to_owned())
                .collect(),
        );
        out.insert(
            "ports",
            names(
                &a.get(&format!("neutron:/ports?project_id={p}")),
                "ports",
                "id",
            ),
        );
        out.insert(
            "floating IPs",
            names(
                &a.get(&format!("neutron:/floatingips?project_id={p}")),
                "floatingips",
                "floating_ip_address",
            ),
        );
        out.insert(
            "routers",
            names(
                &a.get(&format!("neutron:/routers?project_id={p}")),
                "routers",
                "id",
            ),
        );
        out.insert(
            "networks",
            names(
                &a.get(&format!("neutron:/networks?project_id={p}")),
                "networks",
                "id",
            ),
        );
        // Neutron makes a project's `default` group itself.
        let groups = a.get(&format!("neutron:/security-groups?project_id={p}"));
        out.insert(
            "security groups",
            groups["security_groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| g["name"] != "default")
                .map(|g| g["id"].as_str().unwrap_or("?").to_owned())
                .collect(),
        );
        let groups = a.get("nova:/os-server-groups?all_projects=True");
        out.insert(
            "server groups",
            groups["server_groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| g["project_id"] == p.as_str())
                .map(|g| g["id"].as_str().unwrap_or("?").to_owned())
                .collect(),
        );
        let keys = a.get("nova:/os-keypairs");
        out.insert(
            "key pairs",
            keys["keypairs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k["keypair"]["name"].as_str())
                .filter(|n| *n == self.name)
                .map(str::to_owned)
                .collect(),
        );
        out
    }

    /// Nothing left but what Neutron makes of itself. A destroy ends, as upstream's
    /// does, once Nova reads a server as `DELETED`; Nova's listing holds it until the
    /// compute host has removed its record (CI16 of issue 72, under load): servers that
    /// Nova reads as deleted or deleting are waited for (a minute), anything else is left.
    pub fn assert_empty(&self, after: &str) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left: Holdings = self
                .holdings()
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .collect();
            let only_going = !left.is_empty()
                && left.keys().all(|k| *k == "servers")
                && left["servers"].iter().all(|id| self.server_is_going(id));
            if !only_going || std::time::Instant::now() >= until {
                assert!(left.is_empty(), "{after}, the project still holds {left:?}");
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }

    /// Whether Nova reads server `id` as deleted, or being deleted (gone counts too).
    fn server_is_going(&self, id: &str) -> bool {
        let (code, v) = self.admin.call("GET", &format!("nova:/servers/{id}"), None);
        let s = &v["server"];
        code == 404
            || matches!(s["status"].as_str(), Some("DELETED" | "SOFT_DELETED"))
            || s["OS-EXT-STS:task_state"] == "deleting"
    }

    /// Its quota of `what` in Nova (`instances`, `cores`) or Neutron (`port`).
    pub fn quota(&self, service: &str, what: &str, n: i64) {
        let (code, v) = match service {
            "nova" => self.admin.call(
                "PUT",
                &format!("nova:/os-quota-sets/{}", self.id),
                Some(json!({"quota_set": {what: n}})),
            ),
            _ => self.admin.call(
                "PUT",
                &format!("neutron:/quotas/{}", self.id),
                Some(json!({"quota": {what: n}})),
            ),
        };
        assert_eq!(code, 200, "quota {what}: {v}");
    }

    /// Everything in it deleted (servers first, then what they held), and the project.
    fn remove(&self) {
        let a = self.admin;
        let h = self.holdings();
        for s in &h["servers"] {
            a.call("DELETE", &format!("nova:/servers/{s}"), None);
        }
        for _ in 0..60 {
            if self.holdings()["servers"].is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        for f in &h["floating IPs"] {
            let found = a.get(&format!("neutron:/floatingips?floating_ip_address={f}"));
            if let Some(id) = found["floatingips"][0]["id"].as_str() {
                a.call("DELETE", &format!("neutron:/floatingips/{id}"), None);
            }
        }
        for v in &h["volumes"] {
            a.call("DELETE", &format!("cinder:/volumes/{v}"), None);
        }
        for r in &h["routers"] {
            let ports = a.get(&format!("neutron:/ports?device_id={r}"));
            for p in ports["ports"].as_array().into_iter().flatten() {
                if p["device_owner"] == "network:router_interface" {
                    a.call(
                        "PUT",
                        &format!("neutron:/routers/{r}/remove_router_interface"),
                        Some(json!({"port_id": p["id"]})),
                    );
                }
            }
            a.call("DELETE", &format!("neutron:/routers/{r}"), None);
        }
        for p in &h["ports"] {
            a.call("DELETE", &format!("neutron:/ports/{p}"), None);
        }
        for n in &h["networks"] {
            a.call("DELETE", &format!("neutron:/networks/{n}"), None);
        }
        for g in &h["security groups"] {
            a.call("DELETE", &format!("neutron:/security-groups/{g}"), None);
        }
        for g in &h["server groups"] {
            a.call("DELETE", &format!("nova:/os-server-groups/{g}"), None);
        }
        for k in &h["key pairs"] {
            a.call("DELETE", &format!("nova:/os-keypairs/{k}"), None);
        }
        a.call("DELETE", &format!("keystone:/projects/{}", self.id), None);
    }
}

impl Drop for Project<'_> {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The sim's Cinder (its fake driver) copies an image into a volume at the LVM path of
/// its local driver, `/dev/mapper/cinder--volumes-volume--<id>`: the directory is made
/// where the machine has none, and the copies a test left are removed when it ends.
pub(crate) struct ImageCopies;

impl ImageCopies {
    pub fn new() -> Self {
        let _ = std::fs::create_dir_all("/dev/mapper");
        Self
    }
}

impl Drop for ImageCopies {
    fn drop(&mut self) {
        for e in std::fs::read_dir("/dev/mapper")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let regular = e.file_type().is_ok_and(|t| t.is_file());
            if regular && name.starts_with("cinder--volumes-volume--") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
