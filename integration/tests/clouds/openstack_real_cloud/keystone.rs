//! Keystone's admin API as the tests drive it: a region of the services' own catalog whose
//! endpoint of one service is a [`FaultyFront`] before the real one, so the provider meets
//! a fault where it would in production.

use std::process::Command;

use overcast_integration::faulty_front::FaultyFront;
use serde_json::{json, Value};

use super::cloud::Cloud;

/// The region whose one endpoint goes through a front.
pub const FAULTY_REGION: &str = "overcast-it-faulty";

/// Keystone's admin API, by curl (the tests' own calls, not the provider's).
pub struct Keystone {
    url: String,
    token: String,
}

impl Keystone {
    pub async fn new(cloud: &Cloud) -> Self {
        let session = cloud.os.session().await.expect("token");
        Self {
            url: cloud.env["OS_AUTH_URL"].trim_end_matches('/').to_owned(),
            token: session.token().to_str().unwrap().to_owned(),
        }
    }

    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "-X", method, "-H"])
            .arg(format!("X-Auth-Token: {}", self.token))
            .args(["-H", "Content-Type: application/json"])
            .arg(format!("{}{path}", self.url));
        if let Some(b) = body {
            cmd.args(["-d", &b.to_string()]);
        }
        let out = cmd.output().expect("curl");
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    /// The public URL of `kind` in the simulator's own region.
    pub fn endpoint(&self, kind: &str, region: &str) -> (String, String) {
        let svc = self.call("GET", &format!("/services?type={kind}"), None);
        let id = svc["services"][0]["id"].as_str().expect(kind).to_owned();
        let eps = self.call(
            "GET",
            &format!("/endpoints?service_id={id}&interface=public&region_id={region}"),
            None,
        );
        let url = eps["endpoints"][0]["url"].as_str().expect("url").to_owned();
        (id, url)
    }

    /// Removes the test region and its endpoints (an earlier run's too).
    pub fn drop_region(&self) {
        let eps = self.call(
            "GET",
            &format!("/endpoints?region_id={FAULTY_REGION}"),
            None,
        );
        for e in eps["endpoints"].as_array().into_iter().flatten() {
            if let Some(id) = e["id"].as_str() {
                self.call("DELETE", &format!("/endpoints/{id}"), None);
            }
        }
        self.call("DELETE", &format!("/regions/{FAULTY_REGION}"), None);
        // A token carries its login's catalog: none issued before is given again.
        overcast_integration::keystone_front::forget_logins();
    }

    /// A region whose `through` endpoint (a service type: `compute`, `volumev3`) is
    /// `front`, in front of the real service, and whose other endpoints the provider uses
    /// (Nova, Neutron, Cinder) are the real services'.
    pub fn faulty_region(&self, home: &str, front: &FaultyFront, through: &str) {
        self.drop_region();
        self.call(
            "POST",
            "/regions",
            Some(json!({"region": {"id": FAULTY_REGION}})),
        );
        for kind in ["compute", "network", "volumev3"] {
            let (service, url) = self.endpoint(kind, home);
            let url = if kind == through {
                format!("http://{}{}", front.addr, split(&url).1)
            } else {
                url
            };
            self.call(
                "POST",
                "/endpoints",
                Some(json!({"endpoint": {"service_id": service, "interface": "public", "region_id": FAULTY_REGION, "url": url}})),
            );
        }
        overcast_integration::keystone_front::forget_logins();
    }
}

/// A catalog URL's `host:port` and path, as the catalog holds them: Cinder's keeps
/// `%(project_id)s`, which no URI parser takes.
pub fn split(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    }
}
