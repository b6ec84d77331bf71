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
