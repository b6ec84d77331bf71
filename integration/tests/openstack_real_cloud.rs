//! The OpenStack provider against real OpenStack services: Keystone, Nova (fake virt
//! driver), Cinder (fake volume driver), Neutron, Glance, as `../shared/sim/openstack/
//! ossim-up.sh` starts them on this machine. Runs when `OVERCAST_TEST_OPENSTACK_OPENRC`
//! names the `openrc` that script writes (`.ci/run` sets it); says it was skipped
//! otherwise.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use overcast_cloud::conformance::{self, DiskHarness};
use overcast_cloud::{Disks, Zone};
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_openstack::client::Microversion;
use overcast_cloud_openstack::{CinderDisks, Config, OpenStack, Service, Waits};
use serde_json::{json, Value};

const ENV: &str = "OVERCAST_TEST_OPENSTACK_OPENRC";

/// The `export K=V …` lines of the sim's openrc.
fn openrc() -> Option<BTreeMap<String, String>> {
    let Ok(path) = std::env::var(ENV) else {
        overcast_integration::say_skipped(&format!(
            "set {ENV} (the openrc of ../shared/sim/openstack/ossim-up.sh) to run the OpenStack provider against real services"
        ));
        return None;
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Some(
        text.lines()
            .filter_map(|l| l.strip_prefix("export "))
            .flat_map(|l| l.split_whitespace())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
            .collect(),
    )
}

/// A cloud.conf as an operator writes it for this cloud (OCCM's format).
fn cloud_conf(env: &BTreeMap<String, String>, dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("cloud.conf");
    std::fs::write(
        &path,
        format!(
            "[Global]\nauth-url = {}\nusername = {}\npassword = {}\nuser-domain-id = {}\n\
             project-name = {}\nproject-domain-id = {}\nregion = {}\n\
             [BlockStorage]\nnode-volume-attach-limit = 60\n",
            env["OS_AUTH_URL"],
            env["OS_USERNAME"],
            env["OS_PASSWORD"],
            env["OS_USER_DOMAIN_ID"],
            env["OS_PROJECT_NAME"],
            env["OS_PROJECT_DOMAIN_ID"],
            env["OS_REGION_NAME"],
        ),
    )
    .unwrap();
    path
}

struct Cloud {
    os: Arc<OpenStack>,
    env: BTreeMap<String, String>,
    metrics: Arc<ApiMetrics>,
    _dir: tempfile::TempDir,
}

impl Cloud {
    fn new() -> Option<Self> {
        let env = openrc()?;
        let dir = tempfile::tempdir().unwrap();
        let config = Config::load(Some(&cloud_conf(&env, dir.path()))).expect("cloud.conf");
        let metrics = Arc::new(ApiMetrics::unregistered());
        let os =
            overcast_cloud_openstack::connect(&config, Some(Arc::clone(&metrics))).expect("client");
        Some(Self {
            os,
            env,
            metrics,
            _dir: dir,
        })
    }

    /// Removes what an earlier run's failed test left: its servers and volumes.
    async fn sweep(&self) {
        let (_, servers) = self
            .compute(
                "server_list",
                Method::GET,
                "/servers?name=^overcast-it-",
                None,
            )
            .await;
        for s in servers["servers"].as_array().into_iter().flatten() {
            if let Some(id) = s["id"].as_str() {
                self.delete_server(id).await;
            }
        }
        let disks = self.disks();
        for d in disks.list_disks().await.expect("list") {
            if d.name.starts_with("overcast-it-") {
                let _ = disks.delete_disk(&d.id).await;
            }
        }
    }

    fn disks(&self) -> CinderDisks {
        CinderDisks::new(
            Arc::clone(&self.os),
            "overcast-it".into(),
            self.env["OS_REGION_NAME"].clone(),
            Vec::new(),
            60,
            false,
            Waits {
                available: Duration::from_secs(60),
                attached: Duration::from_secs(60),
                detached: Duration::from_secs(60),
                extended: Duration::from_secs(60),
                deleted: Duration::from_secs(60),
            },
        )
    }

    async fn compute(
        &self,
        name: &'static str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let resp = self
            .os
            .call(
                Service::Compute,
                name,
                method,
                path,
                body,
                Some(Microversion(2, 79)),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let doc = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
        (resp.status.as_u16(), doc)
    }

    /// Boots a server (m1.small, the seeded image and network) and waits until ACTIVE.
    async fn boot(&self, name: &str) -> String {
        let (_, flavors) = self
            .compute("flavor_list", Method::GET, "/flavors", None)
            .await;
        let flavor = flavors["flavors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "m1.small")
            .expect("m1.small")["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let body = json!({"server": {
            "name": name, "imageRef": self.env["OSSIM_IMAGE_ID"], "flavorRef": flavor,
            "networks": [{"uuid": self.env["OSSIM_NET_ID"]}],
        }});
        let (status, made) = self
            .compute("server_create", Method::POST, "/servers", Some(&body))
            .await;
        assert_eq!(status, 202, "{made}");
        let id = made["server"]["id"].as_str().unwrap().to_owned();
        for _ in 0..120 {
            let (_, s) = self
                .compute("server_get", Method::GET, &format!("/servers/{id}"), None)
                .await;
            match s["server"]["status"].as_str() {
                Some("ACTIVE") => return id,
                Some("ERROR") => panic!("server {id} went to ERROR: {s}"),
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
        panic!("server {id} not ACTIVE in 60 s");
    }

    async fn delete_server(&self, id: &str) {
        let _ = self
            .compute(
                "server_delete",
                Method::DELETE,
                &format!("/servers/{id}"),
                None,
            )
            .await;
        for _ in 0..120 {
            let (status, _) = self
                .compute("server_get", Method::GET, &format!("/servers/{id}"), None)
                .await;
            if status == 404 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("server {id} not deleted in 60 s");
    }
}

/// The provider conformance suite on Cinder + Nova: idempotent create (16 concurrent
/// creates of one name make one volume), attach and detach (twice, and from a server
/// that does not exist), refusing to delete an attached volume, expansion in use,
/// listing, deletion.
#[tokio::test]
async fn the_openstack_provider_passes_the_conformance_suite_on_real_services() {
    let Some(cloud) = Cloud::new() else {
        return;
    };
    cloud.sweep().await;
    let server = cloud
        .boot(&format!("overcast-it-{}", std::process::id()))
        .await;
    let disks: Arc<dyn Disks> = Arc::new(cloud.disks());
    conformance::disks(&DiskHarness {
        disks: Arc::clone(&disks),
        node: server.clone(),
        gone_node: "00000000-0000-4000-8000-000000000000".into(),
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        prefix: format!("overcast-it-{}-", std::process::id()),
    })
    .await;
    cloud.delete_server(&server).await;
    // Counted by request name, with OCCM's names under the `openstack` prefix.
    assert!(cloud.metrics.requests("identity_token_create") >= 1);
    assert!(cloud.metrics.requests("volume_create") >= 1);
    assert!(cloud.metrics.requests("server_volume_attach") >= 1);
}
