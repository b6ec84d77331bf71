//! A create whose CNS task ended in a fault is not replayed: the record of the task goes,
//! the error says what happened (no space → RESOURCE_EXHAUSTED), and the next call —
//! in this process or after a restart — decides afresh (by name first) and, once the
//! space is there, makes exactly one volume. vcsim has no full datastore, so the front
//! before it plays one for the names it is told: the create reaches vcsim without a
//! datastore (vcsim then makes nothing), its task runs for `hold` as a real one does, and
//! its result carries the per-volume `CnsFault` a real CNS answers.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Instant;

use hyper::body::Bytes;
use overcast_cloud::{CloudError, Disks};
use overcast_cloud_vsphere::cns::Cns;
use overcast_cloud_vsphere::disks::VsphereDisks;
use overcast_cloud_vsphere::soap::Moref;
use overcast_cloud_vsphere::xml::Element;
use overcast_integration::vcsim_front::{Part, VcsimFront};

use super::creates::{named, spec};
use super::*;

const NO_SPACE: &str =
    "CnsFault error: Failed to create disk: Insufficient disk space on datastore &apos;LocalDS_0&apos;.";

/// A vCenter whose datastore is full for the names in `full`.
struct FullDatastore {
    full: Mutex<HashSet<String>>,
    hold: Duration,
    /// The tasks of refused creates: (task id, until when it runs).
    refused: Mutex<Vec<(String, Instant)>>,
}

impl FullDatastore {
    fn name_of(request: &[u8]) -> String {
        Element::parse(request)
            .ok()
            .and_then(|e| {
                e.text_at(&["Body", "CnsCreateVolume", "createSpecs", "name"])
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    }

    fn refusing(&self, request: &[u8]) -> bool {
        self.full.lock().unwrap().contains(&Self::name_of(request))
    }
}

/// `text` without its `<datastores>` elements.
fn without_datastores(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("<datastores") {
        let Some(len) = rest[at..].find("</datastores>") else {
            break;
        };
        out.push_str(&rest[..at]);
        rest = &rest[at + len + "</datastores>".len()..];
    }
    out.push_str(rest);
    out
}

#[async_trait::async_trait]
impl Part for FullDatastore {
    async fn request(&self, path: &str, body: Bytes) -> Bytes {
        if path.starts_with("/vsanHealth")
            && String::from_utf8_lossy(&body).contains("CnsCreateVolume")
            && self.refusing(&body)
        {
            return Bytes::from(without_datastores(&String::from_utf8_lossy(&body)));
        }
        body
    }

    async fn answer(&self, path: &str, request: &[u8], _status: u16, body: Bytes) -> Bytes {
        let req = String::from_utf8_lossy(request);
        if path.starts_with("/vsanHealth")
            && req.contains("CnsCreateVolume")
            && self.refusing(request)
        {
            let task = Element::parse(&body).ok().and_then(|e| {
                e.at(&["Body"])
                    .and_then(|b| b.children.first())
                    .and_then(|r| r.child("returnval"))
                    .and_then(Moref::of)
            });
            if let Some(task) = task {
                self.refused
                    .lock()
                    .unwrap()
                    .push((task.id, Instant::now() + self.hold));
            }
            return body;
        }
        if path.starts_with("/sdk") && req.contains("type=\"Task\"") {
            let refused = self.refused.lock().unwrap().clone();
            for (task, until) in refused {
                if !req.contains(&format!(">{task}<")) {
                    continue;
                }
                let text = String::from_utf8_lossy(&body).into_owned();
                if Instant::now() < until {
                    return Bytes::from(
                        text.replace("<state>success</state>", "<state>running</state>"),
                    );
                }
                return Bytes::from(with_fault(&text));
            }
        }
        body
    }
}

/// A task info whose result (vcsim's: no volume made) is replaced by a batch holding the
/// one volume's CnsFault, as a real CNS answers a create it could not place.
fn with_fault(text: &str) -> String {
    let fault = format!(
        "<result xsi:type=\"CnsVolumeOperationBatchResult\"><volumeResults xsi:type=\"CnsVolumeCreateResult\">\
         <fault><fault xsi:type=\"CnsFault\"><reason>{NO_SPACE}</reason></fault>\
         <localizedMessage>{NO_SPACE}</localizedMessage></fault></volumeResults></result>"
    );
    let Some(start) = text.find("<result") else {
        // No result element: put it after the state.
        return text.replacen(
            "<state>success</state>",
            &format!("<state>success</state>{fault}"),
            1,
        );
    };
    let head = &text[..start];
    let rest = &text[start..];
    let open_end = rest.find('>').unwrap_or(rest.len() - 1);
    let end = if rest[..open_end].ends_with('/') {
        open_end + 1
    } else {
        rest.find("</result>")
            .map_or(rest.len(), |close| close + "</result>".len())
    };
    format!("{head}{fault}{}", &rest[end..])
}

fn records(state: &std::path::Path) -> usize {
    std::fs::read_dir(state.join("vsphere-creates"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_create_that_failed_is_not_replayed_and_one_volume_is_made_once_there_is_space() {
    let Some(sim) = Vcsim::start("creates that fail", &[]) else {
        return;
    };
    let full = Arc::new(FullDatastore {
        full: Mutex::new(HashSet::from([
            "pvc-full-1".to_owned(),
            "pvc-full-2".to_owned(),
        ])),
        hold: Duration::from_secs(2),
        refused: Mutex::new(Vec::new()),
    });
    let front = VcsimFront::start(&sim, Arc::clone(&full) as Arc<dyn Part>).await;
    let metrics = Arc::new(ApiMetrics::unregistered());
    let vc = vcenter_at(&sim, front.port, &metrics);
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let state = tempfile::tempdir().unwrap();
    let provider = || {
        VsphereDisks::new(Cns::new(Arc::clone(&vc)), "overcast-it".into(), 59)
            .with_state_dir(state.path().to_owned())
    };
    let creates = || metrics.requests("CnsCreateVolume");

    // The datastore is full: the create says so, as RESOURCE_EXHAUSTED, and keeps no record.
    let disks = provider();
    match disks.create_disk(spec("pvc-full-1")).await {
        Err(CloudError::ResourceExhausted(m)) => {
            assert!(m.contains("Insufficient disk space"), "{m}")
        }
        other => panic!("a full datastore: {other:?}"),
    }
    assert_eq!(
        records(state.path()),
        0,
        "the failed create's record was kept"
    );
    // Still full: the retry asks vCenter again (a new create), it does not replay the old
    // fault.
    assert!(matches!(
        disks.create_disk(spec("pvc-full-1")).await,
        Err(CloudError::ResourceExhausted(_))
    ));
    assert_eq!(
        creates(),
        2,
        "the retry replayed the old fault instead of creating"
    );
    // Space freed: the next call makes the volume, once.
    full.full.lock().unwrap().remove("pvc-full-1");
    let made = disks.create_disk(spec("pvc-full-1")).await.unwrap();
    assert_eq!(creates(), 3);
    assert_eq!(named(&admin, "pvc-full-1").await, vec![made.id.clone()]);

    // The process goes while the refused create's task runs: its record is on disk. The
    // task then ends in the fault, the space is freed, and the restarted process's retry
    // reads the failed task, drops its record and makes the volume, once.
    let first = tokio::time::timeout(
        Duration::from_millis(700),
        disks.create_disk(spec("pvc-full-2")),
    );
    assert!(first.await.is_err(), "the create was not cut short");
    drop(disks);
    assert_eq!(
        records(state.path()),
        1,
        "the create in flight was not recorded"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    full.full.lock().unwrap().remove("pvc-full-2");
    let made = provider().create_disk(spec("pvc-full-2")).await.unwrap();
    assert_eq!(creates(), 5, "the restarted process did not create afresh");
    assert_eq!(named(&admin, "pvc-full-2").await, vec![made.id.clone()]);
    assert_eq!(records(state.path()), 0, "a record outlived its create");
}

/// The same through the real `csi` binary, as the provisioner meets it: CreateVolume
/// answers RESOURCE_EXHAUSTED while the datastore is full and, once there is space, makes
/// one volume; the binary killed while a refused create's task runs and started again
/// with the same `--controller-state-dir` makes the volume, once, when the task has ended
/// in its fault and the space is there.
#[tokio::test]
async fn the_csi_binary_says_resource_exhausted_then_makes_one_volume_across_a_restart() {
    use overcast_integration::Csi;
    let Some(sim) = Vcsim::start("csi creates that fail", &[]) else {
        return;
    };
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let (node, _) = super::sim::vms(&admin).await[0].clone();
    let hold = Duration::from_secs(2);
    let full = Arc::new(FullDatastore {
        full: Mutex::new(HashSet::from([
            "pvc-csi-full-1".to_owned(),
            "pvc-csi-full-2".to_owned(),
        ])),
        hold,
        refused: Mutex::new(Vec::new()),
    });
    let front = VcsimFront::start(&sim, Arc::clone(&full) as Arc<dyn Part>).await;
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("vsphere.conf");
    std::fs::write(
        &conf,
        format!(
            "[Global]\nport = {}\nca-file = {}\n[VirtualCenter \"127.0.0.1\"]\nuser = k8s\n\
             password = pw\ndatacenters = DC0\n",
            front.port,
            sim.ca_file.display()
        ),
    )
    .unwrap();
    let state = dir.path().join("controller");
    let mut driver = Csi::start(&[
        "--cloud=vsphere",
        &format!("--cloud-config={}", conf.display()),
        &format!("--node-id={node}"),
        "--cluster=overcast-it",
        &format!("--controller-state-dir={}", state.display()),
    ])
    .await;
    const GIB: i64 = 1 << 30;

    let create = overcast_integration::create_request("pvc-csi-full-1", GIB);
    let mut c = driver.controller().await;
    let refused = c.create_volume(create.clone()).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("Insufficient disk space"),
        "{refused:?}"
    );
    full.full.lock().unwrap().remove("pvc-csi-full-1");
    let made = c
        .create_volume(create)
        .await
        .expect("the create once there is space")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(named(&admin, "pvc-csi-full-1").await, vec![made.volume_id]);

    // Killed while the refused create's task runs: its record is on disk.
    let mut c2 = driver.controller().await;
    let pending = tokio::spawn(async move {
        c2.create_volume(overcast_integration::create_request("pvc-csi-full-2", GIB))
            .await
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    driver.kill9();
    let _ = pending.await;
    assert_eq!(records(&state), 1, "the create in flight was not recorded");
    tokio::time::sleep(hold).await;
    full.full.lock().unwrap().remove("pvc-csi-full-2");
    driver.resume().await;
    let made = driver
        .controller()
        .await
        .create_volume(overcast_integration::create_request("pvc-csi-full-2", GIB))
        .await
        .expect("the restarted driver's create")
        .into_inner()
        .volume
        .unwrap();
    assert_eq!(named(&admin, "pvc-csi-full-2").await, vec![made.volume_id]);
    assert_eq!(records(&state), 0, "a record outlived its create");
}
