//! CNS volume snapshots, which vcsim (govmomi 0.24.2) lacks: a [`Part`] that plays
//! `CnsCreateSnapshots`, `CnsDeleteSnapshots` and `CnsQuerySnapshots` and a
//! `CnsCreateVolume` from a snapshot (`volumeSource` of xsi:type `CnsSnapshotVolumeSource`)
//! as the CNS API and vsphere-csi-driver's calls describe them, written before and apart
//! from any provider code. Shapes from govmomi at fd061606 (`cns/types/types.go`,
//! `cns/methods/methods.go`, `cns/cns_util.go`; its newer simulator's choices where the
//! API says nothing) and kubernetes-sigs/vsphere-csi-driver at bf809025 (vanilla
//! `controller.go`, `cns-lib/volume/manager.go`):
//!
//! - every one of the three is a task (`returnval` a Task moref), its `info.result` a
//!   `CnsVolumeOperationBatchResult` of `CnsSnapshotCreateResult` {volumeId, snapshot
//!   {snapshotId, volumeId, description, createTime}} or `CnsSnapshotDeleteResult`
//!   {volumeId, snapshotId}, or — for a query — a `CnsSnapshotQueryResult` {entries
//!   {snapshot, error}, cursor {offset, limit, totalRecords}};
//! - a snapshot's id is a UUID CNS makes (a caller's `snapshotId`, vSphere 9.1's, is not
//!   played); its `description` is what the caller sent (vsphere-csi-driver sends
//!   `<CSI name>-<volume id>`);
//! - a query takes at most one spec {volumeId, snapshotId?} (more is InvalidArgument, as
//!   govmomi's simulator); none lists every snapshot; pages by the cursor (at most 128 an
//!   answer, the limit vsphere-csi-driver's comment names), `offset` answered as the next
//!   offset and `totalRecords` the total; an unknown volume is one entry with
//!   `CnsVolumeNotFoundFault`, an unknown snapshot of a known volume one with
//!   `CnsSnapshotNotFoundFault` (its `SnapshotId` spelled so);
//! - a delete of a snapshot CNS does not have fails its result with `NotFound` (what
//!   vsphere-csi-driver reads as gone); a create of an unknown volume's snapshot with
//!   `CnsVolumeNotFoundFault` (govmomi's simulator answers no result at all there: a real
//!   CNS's answer is not in either source — an assumption, said here);
//! - a volume made from a snapshot reaches vcsim without its `volumeSource` (vcsim makes a
//!   blank one of the size asked; data is not played); from a snapshot CNS does not have,
//!   the create reaches vcsim naming no volume and its task fails with
//!   `CnsSnapshotNotFoundFault`.
//!
//! The front's vCenter says it is 8.0.3 (`about.version`; vcsim says 6.5.0, older than
//! the 7.0 Update 3 that brought CNS snapshots, which vsphere-csi-driver reads it for).
//! The tasks are the front's own (`task-snap-<n>`): a property read of one is answered
//! here, `success` with its result, unless [`CnsSnapshots::hold`] keeps it `running`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use hyper::body::Bytes;
use overcast_cloud_vsphere::cns::{Cns, Filter};
use overcast_cloud_vsphere::session::Vcenter;
use overcast_cloud_vsphere::xml::Element;

use crate::vcsim_front::Part;

/// The release the front's vCenter says it is (`about.version`): one whose CNS has
/// snapshots (7.0 Update 3 or later), which vcsim's 6.5.0 is not.
pub const RELEASE: &str = "8.0.3";

/// `content` (a RetrieveServiceContent answer) with `about.version` said to be `release`.
fn with_release(content: &str, release: &str) -> String {
    let Some(about) = content.find("<about") else {
        return content.to_owned();
    };
    let (Some(start), Some(end)) = (
        content[about..]
            .find("<version>")
            .map(|i| about + i + "<version>".len()),
        content[about..].find("</version>").map(|i| about + i),
    ) else {
        return content.to_owned();
    };
    format!("{}{release}{}", &content[..start], &content[end..])
}

/// The most entries one query answers.
const QUERY_LIMIT: usize = 128;
/// Marks a create from a snapshot CNS does not have, for its answer.
const MISSING: &str = "<!--overcast-missing-snapshot-->";

/// One snapshot CNS holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub volume_id: String,
    pub snapshot_id: String,
    pub description: String,
    /// xsd:dateTime, UTC.
    pub create_time: String,
}

#[derive(Default)]
struct State {
    /// By (volume id, snapshot id): the order a query answers in.
    snapshots: BTreeMap<(String, String), Snapshot>,
    /// The front's tasks: their result (or fault), and whether they still run.
    tasks: HashMap<String, Task>,
    next_task: u64,
    /// Creates whose task the test keeps `running` (by the volume they snapshot).
    held: Vec<String>,
    /// Of those, the volumes whose new snapshots no query lists while their task runs.
    unlisted: Vec<String>,
    /// The snapshots no query lists yet.
    hidden: std::collections::HashSet<(String, String)>,
}

struct Task {
    /// The `info` element's inside once it is done (`<state>…` on).
    done: String,
    volume: Option<String>,
}

/// The part: CNS snapshots, on the test's own vCenter session (`admin`) for what vcsim
/// holds (whether a volume exists).
pub struct CnsSnapshots {
    admin: Arc<Vcenter>,
    state: Mutex<State>,
}

impl CnsSnapshots {
    pub fn new(admin: Arc<Vcenter>) -> Arc<Self> {
        Arc::new(Self {
            admin,
            state: Mutex::default(),
        })
    }

    /// Every snapshot CNS holds.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.state
            .lock()
            .unwrap()
            .snapshots
            .values()
            .cloned()
            .collect()
    }

    /// Adds a snapshot as another client (vsphere-csi-driver) made it, bypassing the API.
    pub fn add(&self, snapshot: Snapshot) {
        self.state.lock().unwrap().snapshots.insert(
            (snapshot.volume_id.clone(), snapshot.snapshot_id.clone()),
            snapshot,
        );
    }

    /// Keeps the tasks of snapshots of `volume` `running` until [`CnsSnapshots::release`]
    /// (the snapshot exists meanwhile, as on a vCenter that has cut it and not yet
    /// answered).
    pub fn hold(&self, volume: &str) {
        self.state.lock().unwrap().held.push(volume.to_owned());
    }

    /// [`CnsSnapshots::hold`], and the snapshots cut meanwhile are not listed by a query
    /// until [`CnsSnapshots::release`] — a CNS that records a snapshot only when its task
    /// ends, which vsphere-csi-driver allows for: it waits for the task it recorded and
    /// looks a snapshot up by description only once the task is gone.
    pub fn hold_unlisted(&self, volume: &str) {
        let mut s = self.state.lock().unwrap();
        s.held.push(volume.to_owned());
        s.unlisted.push(volume.to_owned());
    }

    pub fn release(&self) {
        let mut s = self.state.lock().unwrap();
        s.held.clear();
        s.unlisted.clear();
        s.hidden.clear();
    }

    /// The snapshots a query lists.
    fn listed(&self) -> Vec<Snapshot> {
        let s = self.state.lock().unwrap();
        s.snapshots
            .iter()
            .filter(|(k, _)| !s.hidden.contains(*k))
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn task(&self, done: String, volume: Option<String>) -> String {
        let mut s = self.state.lock().unwrap();
        s.next_task += 1;
        let id = format!("task-snap-{}", s.next_task);
        s.tasks.insert(id.clone(), Task { done, volume });
        id
    }

    async fn volume_exists(&self, id: &str) -> bool {
        let cns = Cns::new(Arc::clone(&self.admin));
        cns.query(&Filter {
            ids: vec![id.to_owned()],
            ..Filter::default()
        })
        .await
        .map(|v| !v.is_empty())
        .unwrap_or(false)
    }

    async fn create(&self, request: &Element) -> String {
        let mut results = String::new();
        let mut volume = None;
        for spec in request.all("snapshotSpecs") {
            let vol = spec
                .text_at(&["volumeId", "id"])
                .unwrap_or_default()
                .to_owned();
            let description = spec
                .text_at(&["description"])
                .unwrap_or_default()
                .to_owned();
            if !self.volume_exists(&vol).await {
                results.push_str(&format!(
                    "<volumeResults xsi:type=\"CnsSnapshotCreateResult\">{}{}</volumeResults>",
                    volume_id(&vol),
                    fault(
                        "CnsVolumeNotFoundFault",
                        &format!("<volumeId><id>{}</id></volumeId>", esc(&vol)),
                        &format!("Volume with ID {vol} not found.")
                    )
                ));
                continue;
            }
            let snapshot = Snapshot {
                volume_id: vol.clone(),
                snapshot_id: new_uuid(),
                description,
                create_time: jiff::Timestamp::now().to_string(),
            };
            results.push_str(&format!(
                "<volumeResults xsi:type=\"CnsSnapshotCreateResult\">{}{}</volumeResults>",
                volume_id(&vol),
                snapshot_xml(&snapshot)
            ));
            {
                let mut s = self.state.lock().unwrap();
                if s.unlisted.contains(&vol) {
                    let key = (vol.clone(), snapshot.snapshot_id.clone());
                    s.hidden.insert(key);
                }
            }
            self.add(snapshot);
            volume = Some(vol);
        }
        self.task(
            success(&format!(
                "<result xsi:type=\"CnsVolumeOperationBatchResult\">{results}</result>"
            )),
            volume,
        )
    }

    fn delete(&self, request: &Element) -> String {
        let mut results = String::new();
        for spec in request.all("snapshotDeleteSpecs") {
            let vol = spec
                .text_at(&["volumeId", "id"])
                .unwrap_or_default()
                .to_owned();
            let snap = spec
                .text_at(&["snapshotId", "id"])
                .unwrap_or_default()
                .to_owned();
            let gone = self
                .state
                .lock()
                .unwrap()
                .snapshots
                .remove(&(vol.clone(), snap.clone()));
            let inner = match gone {
                Some(_) => format!("<snapshotId><id>{}</id></snapshotId>", esc(&snap)),
                None => fault(
                    "NotFound",
                    "",
                    "The object or item referred to could not be found.",
                ),
            };
            results.push_str(&format!(
                "<volumeResults xsi:type=\"CnsSnapshotDeleteResult\">{}{inner}</volumeResults>",
                volume_id(&vol)
            ));
        }
        self.task(
            success(&format!(
                "<result xsi:type=\"CnsVolumeOperationBatchResult\">{results}</result>"
            )),
            None,
        )
    }

    async fn query(&self, request: &Element) -> String {
        let filter = request.child("snapshotQueryFilter");
        let specs: Vec<&Element> = filter
            .map(|f| f.all("snapshotQuerySpecs").collect())
            .unwrap_or_default();
        if specs.len() > 1 {
            return self.task(
                failure(
                    "InvalidArgument",
                    "<invalidProperty>CnsSnapshotQuerySpec</invalidProperty>",
                    "A specified parameter was not correct: CnsSnapshotQuerySpec",
                ),
                None,
            );
        }
        let num = |p: &[&str]| {
            filter
                .and_then(|f| f.text_at(p))
                .and_then(|t| t.parse::<usize>().ok())
        };
        let offset = num(&["cursor", "offset"]).unwrap_or(0);
        let limit = num(&["cursor", "limit"])
            .filter(|l| *l > 0)
            .unwrap_or(QUERY_LIMIT)
            .min(QUERY_LIMIT);
        let mut entries: Vec<String> = Vec::new();
        match specs.first() {
            None => {
                let all = self.listed();
                entries.extend(
                    all.iter()
                        .map(|s| format!("<entries>{}</entries>", snapshot_xml(s))),
                );
            }
            Some(spec) => {
                let vol = spec
                    .text_at(&["volumeId", "id"])
                    .unwrap_or_default()
                    .to_owned();
                let snap = spec.text_at(&["snapshotId", "id"]).map(str::to_owned);
                if !self.volume_exists(&vol).await {
                    entries.push(format!(
                        "<entries><snapshot><snapshotId><id></id></snapshotId>{}<createTime>1970-01-01T00:00:00Z</createTime></snapshot><error>{}</error></entries>",
                        volume_id(&vol),
                        fault_body("CnsVolumeNotFoundFault", &format!("<volumeId><id>{}</id></volumeId>", esc(&vol)),
                            &format!("Volume with ID {vol} not found."))
                    ));
                } else {
                    let found: Vec<Snapshot> = self
                        .listed()
                        .into_iter()
                        .filter(|s| {
                            s.volume_id == vol
                                && snap.as_ref().is_none_or(|id| *id == s.snapshot_id)
                        })
                        .collect();
                    match (&snap, found.is_empty()) {
                        (Some(id), true) => entries.push(format!(
                            "<entries><snapshot><snapshotId><id>{}</id></snapshotId>{}<createTime>1970-01-01T00:00:00Z</createTime></snapshot><error>{}</error></entries>",
                            esc(id),
                            volume_id(&vol),
                            fault_body("CnsSnapshotNotFoundFault",
                                &format!("<volumeId><id>{}</id></volumeId><SnapshotId><id>{}</id></SnapshotId>", esc(&vol), esc(id)),
                                &format!("Snapshot with ID {id} of volume {vol} not found."))
                        )),
                        _ => entries.extend(found.iter().map(|s| format!("<entries>{}</entries>", snapshot_xml(s)))),
                    }
                }
            }
        }
        let total = entries.len();
        let page: String = entries.into_iter().skip(offset).take(limit).collect();
        let next = (offset + limit).min(total);
        self.task(
            success(&format!(
                "<result xsi:type=\"CnsSnapshotQueryResult\">{page}<cursor><offset>{next}</offset><limit>{limit}</limit><totalRecords>{total}</totalRecords></cursor></result>"
            )),
            None,
        )
    }

    /// The info of the front's task `id` as a property read answers it.
    fn task_info(&self, id: &str) -> Option<String> {
        let s = self.state.lock().unwrap();
        let t = s.tasks.get(id)?;
        let running = t.volume.as_ref().is_some_and(|v| s.held.contains(v));
        let inner = if running {
            "<state>running</state>".to_owned()
        } else {
            t.done.clone()
        };
        Some(format!(
            "<returnval><objects><obj type=\"Task\">{id}</obj><propSet><name>info</name><val xsi:type=\"TaskInfo\"><key>{id}</key><task type=\"Task\">{id}</task>{inner}</val></propSet></objects></returnval>"
        ))
    }
}

#[async_trait::async_trait]
impl Part for CnsSnapshots {
    async fn request(&self, path: &str, body: Bytes) -> Bytes {
        if !path.starts_with("/vsanHealth") {
            return body;
        }
        let text = String::from_utf8_lossy(&body);
        if !text.contains("CnsCreateVolume") || !text.contains("<volumeSource") {
            return body;
        }
        let Ok(e) = Element::parse(&body) else {
            return body;
        };
        let source = e.at(&["Body", "CnsCreateVolume", "createSpecs", "volumeSource"]);
        let vol = source
            .and_then(|s| s.text_at(&["volumeId", "id"]))
            .unwrap_or_default()
            .to_owned();
        let snap = source
            .and_then(|s| s.text_at(&["snapshotId", "id"]))
            .unwrap_or_default()
            .to_owned();
        let (Some(start), Some(end)) = (text.find("<volumeSource"), text.find("</volumeSource>"))
        else {
            return body;
        };
        let stripped = format!(
            "{}{}",
            &text[..start],
            &text[end + "</volumeSource>".len()..]
        );
        let known = self
            .state
            .lock()
            .unwrap()
            .snapshots
            .contains_key(&(vol, snap));
        if known {
            return Bytes::from(stripped);
        }
        // Naming no volume: vcsim's task makes nothing; its answer is marked.
        let (Some(s), Some(e)) = (
            stripped.find("<createSpecs"),
            stripped.find("</createSpecs>"),
        ) else {
            return Bytes::from(stripped);
        };
        Bytes::from(format!(
            "{}{}{MISSING}",
            &stripped[..s],
            &stripped[e + "</createSpecs>".len()..]
        ))
    }

    async fn answer(&self, path: &str, request: &[u8], _status: u16, body: Bytes) -> Bytes {
        let req = String::from_utf8_lossy(request);
        if path.starts_with("/sdk") && req.contains("RetrieveServiceContent") {
            return Bytes::from(with_release(&String::from_utf8_lossy(&body), RELEASE));
        }
        if path.starts_with("/sdk") && req.contains("type=\"Task\"") && req.contains(">task-snap-")
        {
            let id = req
                .split(">task-snap-")
                .nth(1)
                .and_then(|r| r.split('<').next())
                .map(|n| format!("task-snap-{n}"))
                .unwrap_or_default();
            return match self.task_info(&id) {
                Some(info) => envelope(&format!(
                    "<RetrievePropertiesExResponse xmlns=\"urn:vim25\">{info}</RetrievePropertiesExResponse>"
                )),
                None => body,
            };
        }
        if !path.starts_with("/vsanHealth") {
            return body;
        }
        if req.contains(MISSING) {
            // vcsim's task for the create naming no volume: answered as a task of the
            // front's own, failed.
            if let Some(task) = returned_task(&body) {
                let failed = failure(
                    "CnsSnapshotNotFoundFault",
                    "",
                    "The snapshot the volume is to be made from was not found.",
                );
                let ours = self.task(failed, None);
                return Bytes::from(
                    String::from_utf8_lossy(&body)
                        .replace(&format!(">{task}<"), &format!(">{ours}<")),
                );
            }
            return body;
        }
        let Ok(e) = Element::parse(request) else {
            return body;
        };
        let Some(call) = e.at(&["Body"]).and_then(|b| b.children.first()) else {
            return body;
        };
        let task = match call.name.as_str() {
            "CnsCreateSnapshots" => self.create(call).await,
            "CnsDeleteSnapshots" => self.delete(call),
            "CnsQuerySnapshots" => self.query(call).await,
            _ => return body,
        };
        envelope(&format!(
            "<{m}Response xmlns=\"urn:vsan\"><returnval type=\"Task\">{task}</returnval></{m}Response>",
            m = call.name
        ))
    }

    fn status(&self, path: &str, request: &[u8], status: u16) -> u16 {
        let req = String::from_utf8_lossy(request);
        let ours = (path.starts_with("/vsanHealth")
            && [
                "CnsCreateSnapshots",
                "CnsDeleteSnapshots",
                "CnsQuerySnapshots",
            ]
            .iter()
            .any(|m| req.contains(m)))
            || (path.starts_with("/sdk") && req.contains(">task-snap-"));
        if ours {
            200
        } else {
            status
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn volume_id(id: &str) -> String {
    format!("<volumeId><id>{}</id></volumeId>", esc(id))
}

fn snapshot_xml(s: &Snapshot) -> String {
    format!(
        "<snapshot><snapshotId><id>{}</id></snapshotId>{}<description>{}</description><createTime>{}</createTime></snapshot>",
        esc(&s.snapshot_id),
        volume_id(&s.volume_id),
        esc(&s.description),
        esc(&s.create_time)
    )
}

/// A `LocalizedMethodFault` as a batch result's `fault`.
fn fault(kind: &str, fields: &str, message: &str) -> String {
    format!("<fault>{}</fault>", fault_body(kind, fields, message))
}

fn fault_body(kind: &str, fields: &str, message: &str) -> String {
    format!(
        "<fault xsi:type=\"{kind}\">{fields}</fault><localizedMessage>{}</localizedMessage>",
        esc(message)
    )
}

fn success(result: &str) -> String {
    format!(
        "<state>success</state>{result}<completeTime>{}</completeTime>",
        jiff::Timestamp::now()
    )
}

fn failure(kind: &str, fields: &str, message: &str) -> String {
    format!(
        "<state>error</state><error>{}</error><completeTime>{}</completeTime>",
        fault_body(kind, fields, message),
        jiff::Timestamp::now()
    )
}

fn envelope(body: &str) -> Bytes {
    Bytes::from(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><soapenv:Envelope xmlns:soapenc=\"http://schemas.xmlsoap.org/soap/encoding/\" xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"><soapenv:Body>{body}</soapenv:Body></soapenv:Envelope>"
    ))
}

fn returned_task(body: &[u8]) -> Option<String> {
    Element::parse(body).ok().and_then(|e| {
        e.at(&["Body"])
            .and_then(|b| b.children.first())
            .and_then(|r| r.child("returnval"))
            .and_then(overcast_cloud_vsphere::soap::Moref::of)
            .map(|m| m.id)
    })
}

/// A random UUID, as CNS gives a snapshot (the kernel's generator).
fn new_uuid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| {
            let n = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            format!("00000000-0000-4000-8000-{:012x}", n & 0xffff_ffff_ffff)
        })
}
