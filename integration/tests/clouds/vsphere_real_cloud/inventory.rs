use super::*;
use overcast_cloud_vsphere::inventory::View;
use overcast_cloud_vsphere::vms::{snapshot, VIEW_TYPES};

#[tokio::test]
async fn one_property_collector_call_reads_every_vm_and_its_ancestors() {
    let Some(sim) = Vcsim::start("inventory", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let vc = vcenter(&sim, &metrics);
    let view = View::new(Arc::clone(&vc), VIEW_TYPES);
    let snap = snapshot(&view).await.unwrap();
    assert_eq!(snap.vms.len(), 4, "vcsim's default inventory has 4 VMs");
    for vm in &snap.vms {
        assert!(vm.uuid.is_some(), "{vm:?}");
        let up = snap.ancestors(vm.host.as_ref().unwrap());
        assert!(up.iter().any(|m| m.kind == "Datacenter"), "{up:?}");
    }
    // Again: the view and the session are kept, one call.
    let before = metrics.total();
    snapshot(&view).await.unwrap();
    assert_eq!(metrics.total() - before, 1);
}

#[tokio::test]
async fn the_search_index_finds_a_vm_by_uuid_host_name_and_ip_in_one_call_each() {
    use overcast_cloud_vsphere::search;
    let Some(sim) = Vcsim::start("search index", &[]) else {
        return;
    };
    let metrics = Arc::new(ApiMetrics::unregistered());
    let vc = vcenter(&sim, &metrics);
    let snap = snapshot(&View::new(Arc::clone(&vc), VIEW_TYPES))
        .await
        .unwrap();
    let (a, b) = (&snap.vms[0], &snap.vms[1]);
    for (vm, host, ip) in [(a, "node-a", "10.0.0.21"), (b, "node-b", "10.0.0.22")] {
        let guest = sim::Guest {
            host_name: host,
            ip,
            guest_id: "ubuntu64Guest",
            cpus: 1,
            memory_mb: 1024,
        };
        sim::reconfigure(&vc, &vm.moref, &guest).await;
    }
    let before = metrics.total();
    let by_uuid = search::vm_by_uuid(&vc, None, a.uuid.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(by_uuid.as_ref(), Some(&a.moref));
    assert_eq!(metrics.total() - before, 1, "one call");
    assert_eq!(
        search::vms_by_dns_name(&vc, None, "node-b").await.unwrap(),
        vec![b.moref.clone()]
    );
    assert_eq!(
        search::vms_by_ip(&vc, None, "10.0.0.21").await.unwrap(),
        vec![a.moref.clone()]
    );
    // Nothing found is an empty answer, not an error.
    assert_eq!(
        search::vm_by_uuid(&vc, None, "00000000-0000-0000-0000-000000000000")
            .await
            .unwrap(),
        None
    );
    assert!(search::vms_by_dns_name(&vc, None, "absent")
        .await
        .unwrap()
        .is_empty());
    // Two guests answering to one name are both returned, not one picked.
    let guest = sim::Guest {
        host_name: "node-b",
        ip: "10.0.0.23",
        guest_id: "ubuntu64Guest",
        cpus: 1,
        memory_mb: 1024,
    };
    sim::reconfigure(&vc, &snap.vms[2].moref, &guest).await;
    assert_eq!(
        search::vms_by_dns_name(&vc, None, "node-b")
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn a_pinned_thumbprint_admits_the_vcenter_s_certificate_and_no_other() {
    use overcast_cloud_vsphere::config::Config;
    let Some(sim) = Vcsim::start("thumbprint", &[]) else {
        return;
    };
    // The thumbprint as an operator takes it: openssl's SHA-1 fingerprint, AB:CD:….
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha1", "-in"])
        .arg(&sim.ca_file)
        .output()
        .expect("openssl");
    let text = String::from_utf8(out.stdout).unwrap();
    let thumbprint = text.trim().rsplit('=').next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let connect = |thumbprint: &str| {
        let path = dir.path().join("vsphere.conf");
        std::fs::write(
            &path,
            format!(
                "[Global]\nport = {}\nthumbprint = \"{thumbprint}\"\n\
                 [VirtualCenter \"127.0.0.1\"]\nuser = u\npassword = p\ndatacenters = DC0\n",
                sim.port
            ),
        )
        .unwrap();
        let config = Config::load_with(Some(&path), &|_| None).unwrap();
        overcast_cloud_vsphere::provider::connect(&config.vcenters[0], None).unwrap()
    };
    // No ca-file: the system's roots do not know vcsim's certificate; the pin admits it.
    let vc = connect(&thumbprint);
    let view = View::new(Arc::clone(&vc), VIEW_TYPES);
    assert_eq!(snapshot(&view).await.unwrap().vms.len(), 4);
    // Another certificate's thumbprint: refused, saying why.
    let vc = connect(&["AB"; 20].join(":"));
    let e = vc.content().await.unwrap_err().to_string();
    assert!(e.contains("thumbprint"), "{e}");
}

/// A vCenter that pages its answers, as a real one does past its own limit (vcsim here
/// answers everything at once, whatever `maxObjects` asks): a front splits each view read
/// into pages of `page` objects with a token, and answers `ContinueRetrievePropertiesEx`
/// from what it kept — or, asked to, loses the second page for good (a proxy's 503 page,
/// answered 200, every time it is asked).
struct Pager {
    page: usize,
    lose_second: bool,
    kept: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
}

impl Pager {
    /// The `<objects>` elements of an answer, and the answer without them.
    fn split(text: &str) -> (Vec<String>, String) {
        let mut objects = Vec::new();
        let mut rest_out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("<objects") {
            let Some(len) = rest[at..].find("</objects>") else {
                break;
            };
            let end = at + len + "</objects>".len();
            rest_out.push_str(&rest[..at]);
            objects.push(rest[at..end].to_owned());
            rest = &rest[end..];
        }
        rest_out.push_str(rest);
        (objects, rest_out)
    }

    /// `objects`' first page, the rest kept under a new token (in `<token>`).
    fn page_of(&self, mut objects: Vec<String>) -> String {
        let rest = objects.split_off(objects.len().min(self.page));
        let mut out = objects.concat();
        if !rest.is_empty() {
            let mut kept = self.kept.lock().unwrap();
            let token = format!("overcast-page-{}", kept.len() + 1);
            kept.insert(token.clone(), rest);
            out.push_str(&format!("<token>{token}</token>"));
        }
        out
    }
}

#[async_trait::async_trait]
impl overcast_integration::vcsim_front::Part for Pager {
    async fn request(&self, _path: &str, body: hyper::body::Bytes) -> hyper::body::Bytes {
        let text = String::from_utf8_lossy(&body);
        // vcsim does not know our tokens: it is asked something harmless, the token
        // riding along in a comment for the answer.
        if text.contains("ContinueRetrievePropertiesEx") {
            let token = text
                .split("<token>")
                .nth(1)
                .and_then(|t| t.split("</token>").next())
                .unwrap_or_default()
                .to_owned();
            return hyper::body::Bytes::from(format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><RetrieveServiceContent xmlns=\"urn:vim25\"><_this type=\"ServiceInstance\">ServiceInstance</_this></RetrieveServiceContent></soapenv:Body></soapenv:Envelope><!--token:{token}-->"
            ));
        }
        body
    }

    async fn answer(
        &self,
        _path: &str,
        request: &[u8],
        _status: u16,
        body: hyper::body::Bytes,
    ) -> hyper::body::Bytes {
        let req = String::from_utf8_lossy(request);
        if let Some(token) = req
            .split("<!--token:")
            .nth(1)
            .and_then(|t| t.split("-->").next())
        {
            // Each time it is asked: a 2xx HTML page is no answer, and the client asks the
            // read again (a page lost once comes back whole on the retry).
            if self.lose_second {
                return hyper::body::Bytes::from_static(
                    b"<html><body><h1>503 Service Unavailable</h1></body></html>",
                );
            }
            let objects = self.kept.lock().unwrap().remove(token).unwrap_or_default();
            let page = self.page_of(objects);
            return hyper::body::Bytes::from(format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"><soapenv:Body><ContinueRetrievePropertiesExResponse xmlns=\"urn:vim25\"><returnval>{page}</returnval></ContinueRetrievePropertiesExResponse></soapenv:Body></soapenv:Envelope>"
            ));
        }
        if req.contains("RetrievePropertiesEx") && req.contains("ContainerView") {
            let text = String::from_utf8_lossy(&body).into_owned();
            let (objects, without) = Self::split(&text);
            if objects.len() <= self.page {
                return body;
            }
            let page = self.page_of(objects);
            return hyper::body::Bytes::from(without.replacen(
                "</returnval>",
                &format!("{page}</returnval>"),
                1,
            ));
        }
        body
    }
}

/// Every VM read across a paged answer, the same as in one; and a continuation that
/// fails fails the whole listing — the ccm sees an error, never a listing short of a
/// page's VMs (whose nodes would look gone).
#[tokio::test]
async fn a_paged_answer_is_read_whole_and_a_lost_page_fails_the_listing() {
    use overcast_cloud::Instances;
    use overcast_cloud_vsphere::instances::{Source, VsphereInstances};
    use overcast_integration::vcsim_front::VcsimFront;
    let Some(sim) = Vcsim::start("paging", &["-vm", "10"]) else {
        return;
    };
    let vc = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let whole = snapshot(&View::new(Arc::clone(&vc), VIEW_TYPES))
        .await
        .unwrap();
    assert!(whole.vms.len() >= 20, "{}", whole.vms.len());
    let names = |s: &overcast_cloud_vsphere::vms::Snapshot| {
        let mut v: Vec<String> = s.vms.iter().map(|vm| vm.moref.to_string()).collect();
        v.sort();
        v
    };
    let pager = |lose_second| {
        Arc::new(Pager {
            page: 7,
            lose_second,
            kept: Default::default(),
        })
    };

    let paging = pager(false);
    let front = VcsimFront::start(&sim, Arc::clone(&paging) as _).await;
    let metrics = Arc::new(ApiMetrics::unregistered());
    let through = vcenter_at(&sim, front.port, &metrics);
    let paged = snapshot(&View::new(Arc::clone(&through), VIEW_TYPES))
        .await
        .unwrap();
    assert!(
        metrics.requests("ContinueRetrievePropertiesEx") >= 3,
        "the front did not page"
    );
    assert_eq!(names(&paged), names(&whole), "a VM lost across the pages");
    drop(front);

    let front = VcsimFront::start(&sim, pager(true) as _).await;
    let through = vcenter_at(&sim, front.port, &Arc::new(ApiMetrics::unregistered()));
    let dir = tempfile::tempdir().unwrap();
    let config =
        overcast_cloud_vsphere::config::Config::load_with(Some(&sim.conf(dir.path(), "")), &|_| {
            None
        })
        .unwrap();
    let instances =
        VsphereInstances::new(vec![Source::new(through, Vec::new(), Vec::new())], &config);
    match instances.list_instances().await {
        Err(e) => assert!(
            matches!(e, overcast_cloud::CloudError::Unavailable(_)),
            "{e}"
        ),
        Ok(list) => panic!(
            "a listing with a page lost answered {} instances",
            list.len()
        ),
    }
}
