//! A create retried while its CNS task still runs — after the provisioner's deadline
//! cancelled the first call, or after the controller restarted — waits for that task and
//! makes no second volume. A real vCenter answers CnsCreateVolume with a task at once and
//! shows the volume only when the task has succeeded, seconds later; vcsim finishes its
//! tasks at once, so the front before it plays a real vCenter's timing: for a while after
//! a create, the task reads `running` and no query answers the volume.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use hyper::body::Bytes;
use overcast_cloud::{DiskSpec, Disks, Zone};
use overcast_cloud_vsphere::cns::{Cns, Filter};
use overcast_cloud_vsphere::disks::VsphereDisks;
use overcast_cloud_vsphere::soap::Moref;
use overcast_cloud_vsphere::xml::Element;
use overcast_integration::vcsim_front::{Part, VcsimFront};

use super::*;

/// A vCenter whose creates take `hold`.
struct SlowCreates {
    hold: Duration,
    /// (task id, volume name, until when it runs)
    running: Mutex<Vec<(String, String, Instant)>>,
}

impl SlowCreates {
    fn running(&self) -> Vec<(String, String)> {
        let now = Instant::now();
        self.running
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, until)| *until > now)
            .map(|(t, n, _)| (t.clone(), n.clone()))
            .collect()
    }
}

#[async_trait::async_trait]
impl Part for SlowCreates {
    async fn answer(&self, path: &str, request: &[u8], _status: u16, body: Bytes) -> Bytes {
        let req = String::from_utf8_lossy(request);
        if path.starts_with("/vsanHealth") && req.contains("CnsCreateVolume") {
            let name = Element::parse(request)
                .ok()
                .and_then(|e| {
                    e.text_at(&["Body", "CnsCreateVolume", "createSpecs", "name"])
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            let task = Element::parse(&body).ok().and_then(|e| {
                e.at(&["Body"])
                    .and_then(|b| b.children.first())
                    .and_then(|r| r.child("returnval"))
                    .and_then(Moref::of)
            });
            if let Some(task) = task {
                self.running
                    .lock()
                    .unwrap()
                    .push((task.id, name, Instant::now() + self.hold));
            }
            return body;
        }
        // A query does not find a volume still being made.
        if path.starts_with("/vsanHealth") && req.contains("CnsQueryVolume") {
            let mut text = String::from_utf8_lossy(&body).into_owned();
            for (_, name) in self.running() {
                text = without_volume(&text, &name);
            }
            return Bytes::from(text);
        }
        // The task's info while it runs.
        if path.starts_with("/sdk") && req.contains("type=\"Task\"") {
            for (task, _) in self.running() {
                if req.contains(&format!(">{task}<")) {
                    let text = String::from_utf8_lossy(&body)
                        .replace("<state>success</state>", "<state>running</state>");
                    return Bytes::from(text);
                }
            }
        }
        body
    }
}

/// `text` without the `<volumes>` elements of the volume named `name`.
fn without_volume(text: &str, name: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("<volumes") {
        let Some(len) = rest[at..].find("</volumes>") else {
            break;
        };
        let end = at + len + "</volumes>".len();
        out.push_str(&rest[..at]);
        if !rest[at..end].contains(&format!("<name>{name}</name>")) {
            out.push_str(&rest[at..end]);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

pub(super) fn spec(name: &str) -> DiskSpec {
    DiskSpec {
        name: name.into(),
        size_bytes: 1 << 30,
        zone: Zone::default(),
        parameters: BTreeMap::new(),
        metadata: BTreeMap::new(),
        source: None,
    }
}

/// The volumes CNS holds under `name`, asked of vcsim itself.
pub(super) async fn named(admin: &Arc<Vcenter>, name: &str) -> Vec<String> {
    Cns::new(Arc::clone(admin))
        .query(&Filter {
            names: vec![name.into()],
            ..Filter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.id)
        .collect()
}

/// The provisioner's deadline: the call dropped while its task runs.
async fn cut_short(disks: &VsphereDisks, name: &str) {
    let first = tokio::time::timeout(Duration::from_millis(700), disks.create_disk(spec(name)));
    assert!(
        first.await.is_err(),
        "the create of {name} was not cut short"
    );
}

#[tokio::test]
async fn a_create_retried_while_its_task_runs_waits_for_it_and_makes_one_volume() {
    let Some(sim) = Vcsim::start("creates in flight", &[]) else {
        return;
    };
    let slow = Arc::new(SlowCreates {
        hold: Duration::from_secs(3),
        running: Mutex::new(Vec::new()),
    });
    let front = VcsimFront::start(&sim, Arc::clone(&slow) as Arc<dyn Part>).await;
    let metrics = Arc::new(ApiMetrics::unregistered());
    let vc = vcenter_at(&sim, front.port, &metrics);
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let state = tempfile::tempdir().unwrap();
    let provider = || {
        VsphereDisks::new(Cns::new(Arc::clone(&vc)), "overcast-it".into(), 59)
            .with_state_dir(state.path().to_owned())
    };
    let creates = || metrics.requests("CnsCreateVolume");

    // Cut short, then retried by the same process: the retry waits for the first task.
    let disks = provider();
    cut_short(&disks, "pvc-slow-1").await;
    let made = disks.create_disk(spec("pvc-slow-1")).await.unwrap();
    assert_eq!(creates(), 1, "the retry started a second create");
    assert_eq!(named(&admin, "pvc-slow-1").await, vec![made.id.clone()]);

    // Cut short, then the process restarts: the new one reads the record and waits.
    cut_short(&disks, "pvc-slow-2").await;
    drop(disks);
    let made = provider().create_disk(spec("pvc-slow-2")).await.unwrap();
    assert_eq!(
        creates(),
        2,
        "the restarted process started a second create"
    );
    assert_eq!(named(&admin, "pvc-slow-2").await, vec![made.id.clone()]);
    assert_eq!(
        std::fs::read_dir(state.path().join("vsphere-creates"))
            .unwrap()
            .count(),
        0,
        "a record outlived its create"
    );

    // The same restart without a state directory cannot know the first task: a second
    // volume is made (what the record prevents; this also shows the front's timing
    // really hides a running create).
    let memory_only = || VsphereDisks::new(Cns::new(Arc::clone(&vc)), "overcast-it".into(), 59);
    let disks = memory_only();
    cut_short(&disks, "pvc-slow-3").await;
    drop(disks);
    memory_only().create_disk(spec("pvc-slow-3")).await.unwrap();
    assert_eq!(creates(), 4);
    assert_eq!(named(&admin, "pvc-slow-3").await.len(), 2);
}

/// A vCenter restarted between a crash and the retry reuses task ids: the record then names
/// another task. A record naming the task that made another volume is not taken for this
/// create's: the volume of this name is made, the other one is not answered.
#[tokio::test]
async fn a_record_naming_another_create_s_task_is_not_taken_for_this_one() {
    let Some(sim) = Vcsim::start("a reused task id", &[]) else {
        return;
    };
    let vc = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let state = tempfile::tempdir().unwrap();
    let other = VsphereDisks::new(Cns::new(Arc::clone(&vc)), "overcast-it".into(), 59)
        .create_disk(spec("pvc-other"))
        .await
        .unwrap();
    // The other create's task, found among the vCenter's recent tasks.
    let tm = overcast_cloud_vsphere::soap::Moref::new("TaskManager", "TaskManager");
    let recent = overcast_cloud_vsphere::inventory::properties(&vc, &tm, &["recentTask"])
        .await
        .unwrap();
    let tasks: Vec<Moref> = recent
        .get("recentTask")
        .map(|r| r.children.iter().filter_map(Moref::of).collect())
        .unwrap_or_default();
    let mut theirs = None;
    for t in tasks {
        let info = overcast_cloud_vsphere::inventory::properties(&vc, &t, &["info"])
            .await
            .unwrap();
        let info = info.get("info").cloned().unwrap_or_default();
        if info.text_at(&["name"]) == Some("CnsCreateVolume") {
            theirs = Some(t);
        }
    }
    let theirs = theirs.expect("the other create's task");
    overcast_cloud_vsphere::creates::InFlight::new(Some(state.path().join("vsphere-creates")))
        .record("pvc-mine", &theirs);
    let mine = VsphereDisks::new(Cns::new(Arc::clone(&vc)), "overcast-it".into(), 59)
        .with_state_dir(state.path().to_owned())
        .create_disk(spec("pvc-mine"))
        .await
        .unwrap();
    assert_ne!(
        mine.id, other.id,
        "another volume was answered for this create"
    );
    assert_eq!(mine.name, "pvc-mine");
    assert_eq!(named(&vc, "pvc-mine").await, vec![mine.id]);
}
