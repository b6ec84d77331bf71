//! A class's parameters through the real `csi` binary's socket on vcsim: CNS keeps no
//! class parameters, so a repeated CreateVolume of a class with `storagepolicyname`,
//! `datastoreurl` and `fstype` (external-provisioner repeats a create whose answer it
//! did not get) is answered with the same volume, as vsphere-csi-driver answers it, and a
//! repeat naming another policy is ALREADY_EXISTS; ValidateVolumeCapabilities confirms
//! the class the volume was made with and not another.

use hyper::body::Bytes;
use overcast_cloud_vsphere::cns::{Cns, Filter};
use overcast_cloud_vsphere::pbm::Pbm;
use overcast_integration::{csi_v1 as csi, mount_cap};
use tonic::Code;

use super::*;

const GIB: i64 = 1 << 30;

fn create(name: &str, parameters: &[(&str, &str)]) -> csi::CreateVolumeRequest {
    let mut r = overcast_integration::create_request(name, GIB);
    r.parameters = parameters
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    r
}

#[tokio::test]
async fn a_repeated_create_of_a_class_with_parameters_answers_the_same_volume() {
    let Some(sim) = Vcsim::start("class parameters through the socket", &[]) else {
        return;
    };
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let policies = Pbm::new(Arc::clone(&admin)).policies().await.unwrap();
    assert!(policies.len() >= 2, "vcsim's policies: {policies:?}");
    let (policy, other) = (&policies[0].name, &policies[1].name);
    let dir = tempfile::tempdir().unwrap();
    let driver = super::csi::vsphere_driver(dir.path(), sim.port, &sim.ca_file, "", false).await;
    let mut c = driver.controller().await;

    // Where vcsim puts a volume: the datastore the class then names.
    let plain = c
        .create_volume(create("pvc-plain", &[]))
        .await
        .expect("a volume without parameters")
        .into_inner()
        .volume
        .unwrap();
    let url = Cns::new(Arc::clone(&admin))
        .query(&Filter {
            ids: vec![plain.volume_id.clone()],
            ..Filter::default()
        })
        .await
        .unwrap()
        .remove(0)
        .datastore_url;
    let again = c
        .create_volume(create("pvc-plain", &[]))
        .await
        .expect("the same volume without parameters again")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(again.volume_id, plain.volume_id);

    let class = [
        ("storagepolicyname", policy.as_str()),
        ("datastoreurl", url.as_str()),
        ("fstype", "ext4"),
    ];
    let made = c
        .create_volume(create("pvc-classed", &class))
        .await
        .expect("create")
        .into_inner()
        .volume
        .unwrap();
    let repeated = c
        .create_volume(create("pvc-classed", &class))
        .await
        .expect("the same create again: the same volume")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(repeated.volume_id, made.volume_id);
    assert_eq!(repeated.capacity_bytes, made.capacity_bytes);
    // The keys as a StorageClass may spell them (upstream lower-cases them).
    let spelled = [("StoragePolicyName", policy.as_str())];
    let id = c
        .create_volume(create("pvc-classed", &spelled))
        .await
        .expect("its policy under another spelling")
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    assert_eq!(id, made.volume_id);

    let elsewhere = [("storagepolicyname", other.as_str())];
    let e = c
        .create_volume(create("pvc-classed", &elsewhere))
        .await
        .expect_err("the name with another policy");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");

    let validate = |parameters: &[(&str, &str)]| csi::ValidateVolumeCapabilitiesRequest {
        volume_id: made.volume_id.clone(),
        volume_capabilities: vec![mount_cap("ext4")],
        parameters: parameters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    };
    let confirmed = c
        .validate_volume_capabilities(validate(&class))
        .await
        .expect("validate")
        .into_inner();
    assert!(confirmed.confirmed.is_some(), "{confirmed:?}");
    let refused = c
        .validate_volume_capabilities(validate(&elsewhere))
        .await
        .expect("validate another class")
        .into_inner();
    assert!(refused.confirmed.is_none(), "{refused:?}");
    assert!(
        refused.message.contains("not made with") && refused.message.contains(other.as_str()),
        "{refused:?}"
    );

    for v in [&plain.volume_id, &made.volume_id] {
        c.delete_volume(overcast_integration::delete_request(v))
            .await
            .expect("delete");
    }
}

/// The CnsQueryVolume by id that follows a volume's lookup by name, answered as if the
/// volume had been deleted in between (its id in the filter swapped for one CNS does not
/// know), once when armed.
#[derive(Default)]
struct GoneById {
    armed: std::sync::atomic::AtomicBool,
    fired: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl overcast_integration::vcsim_front::Part for GoneById {
    async fn request(&self, _path: &str, body: Bytes) -> Bytes {
        let text = String::from_utf8_lossy(&body);
        if !text.contains("CnsQueryVolume") || !text.contains("<volumeIds>") {
            return body;
        }
        if !self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return body;
        }
        self.fired.store(true, std::sync::atomic::Ordering::SeqCst);
        let Some(start) = text.find("<volumeIds><id>") else {
            return body;
        };
        let from = start + "<volumeIds><id>".len();
        let Some(len) = text[from..].find("</id>") else {
            return body;
        };
        let swapped = format!(
            "{}00000000-0000-4000-8000-00000000dead{}",
            &text[..from],
            &text[from + len..]
        );
        Bytes::from(swapped)
    }

    async fn answer(&self, _path: &str, _request: &[u8], _status: u16, body: Bytes) -> Bytes {
        body
    }
}

/// A repeated create whose volume CNS finds by name and then no longer by id (deleted
/// between the two answers) is made anew: OK with the volume the create then finds or
/// makes, not NOT_FOUND (the spec's code for a missing source; the provisioner would
/// give up on a claim it could still provision).
#[tokio::test]
async fn a_volume_gone_between_its_two_lookups_is_made_anew_not_not_found() {
    let Some(sim) = Vcsim::start("a volume gone between its lookups", &[]) else {
        return;
    };
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let policies = Pbm::new(Arc::clone(&admin)).policies().await.unwrap();
    let class = [("storagepolicyname", policies[0].name.as_str())];
    let part = Arc::new(GoneById::default());
    let front = overcast_integration::vcsim_front::VcsimFront::start(
        &sim,
        Arc::clone(&part) as Arc<dyn overcast_integration::vcsim_front::Part>,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let driver = super::csi::vsphere_driver(dir.path(), front.port, &sim.ca_file, "", false).await;
    let mut c = driver.controller().await;
    let made = c
        .create_volume(create("pvc-gone-between", &class))
        .await
        .expect("made")
        .into_inner()
        .volume
        .unwrap();
    part.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let again = c
        .create_volume(create("pvc-gone-between", &class))
        .await
        .expect("made anew, not NOT_FOUND")
        .into_inner()
        .volume
        .unwrap();
    assert!(
        part.fired.load(std::sync::atomic::Ordering::SeqCst),
        "the lookup by id was answered gone"
    );
    // vcsim still has it (only the answer said otherwise): the create found it by name.
    assert_eq!(again.volume_id, made.volume_id);
    c.delete_volume(overcast_integration::delete_request(&made.volume_id))
        .await
        .expect("delete");
}
