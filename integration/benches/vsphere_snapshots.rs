//! CNS snapshots through the real `csi` binary's socket, on vcsim with the CNS snapshot
//! front (`overcast_integration::cns_snapshots`, vcsim having none) behind a counting
//! front: what CreateSnapshot, CreateVolume from a snapshot (a restore, grown to twice the
//! snapshot's size), DeleteSnapshot and then the source's DeleteVolume (which asks for the
//! volume's snapshots first) cost the vCenter — calls (task polls and logins
//! included) and the bytes of the answers — beside CreateVolume of a blank volume and one
//! bare `CnsQueryVolume` by id through the same front, in the same run. Times are the
//! RPC's wall time less what the front spent playing the CNS part vcsim lacks.
//!
//! `OVERCAST_TEST_VCSIM=/path/to/vcsim cargo bench -p overcast-integration --bench vsphere_snapshots`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_cloud_http::ApiMetrics;
use overcast_cloud_vsphere::cns::{Cns, Filter};
use overcast_integration::cns_snapshots::CnsSnapshots;
use overcast_integration::figures::{median, ms};
use overcast_integration::vcsim::Vcsim;
use overcast_integration::vcsim_front::{Counting, Part, Tally, VcsimFront};
use overcast_integration::{csi_v1 as csi, Csi};

const ROUNDS: usize = 10;
const SIZE: i64 = 64 << 20;

#[derive(Default)]
struct Op {
    calls: Vec<u64>,
    bytes: Vec<u64>,
    times: Vec<Duration>,
}

fn range(v: &[u64]) -> String {
    let (lo, hi) = (
        v.iter().min().copied().unwrap_or(0),
        v.iter().max().copied().unwrap_or(0),
    );
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}–{hi}")
    }
}

#[tokio::main]
async fn main() {
    let Some(sim) = Vcsim::start("the vSphere snapshot benchmark", &[]) else {
        return;
    };
    let admin = sim.admin(sim.port, Some(Arc::new(ApiMetrics::unregistered())));
    let counting = Counting::new(CnsSnapshots::new(Arc::clone(&admin)) as Arc<dyn Part>);
    let front = VcsimFront::start(&sim, Arc::clone(&counting) as Arc<dyn Part>).await;
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("vsphere.conf");
    std::fs::write(
        &conf,
        format!(
            "[Global]\nport = {}\nca-file = {}\n[VirtualCenter \"127.0.0.1\"]\nuser = k8s\npassword = bench-password\ndatacenters = DC0\n[Snapshot]\nglobal-max-snapshots-per-block-volume = 32\n",
            front.port,
            sim.ca_file.display()
        ),
    )
    .unwrap();
    let driver = Csi::start(&[
        "--cloud=vsphere",
        &format!("--cloud-config={}", conf.display()),
        "--cluster=overcast-bench",
        &format!(
            "--controller-state-dir={}",
            dir.path().join("state").display()
        ),
    ])
    .await;
    let mut c = driver.controller().await;
    let floor_client = sim.admin(front.port, Some(Arc::new(ApiMetrics::unregistered())));
    let ops = [
        "CreateVolume (blank, baseline)",
        "CreateSnapshot",
        "CreateVolume from the snapshot (restore, grown)",
        "DeleteSnapshot",
        "DeleteVolume (its snapshots asked for first)",
    ];
    let mut figures: BTreeMap<&str, Op> = BTreeMap::new();
    let mut floor = Op::default();
    let mut record = |op: &'static str, t: Tally, took: Duration| {
        let e = figures.entry(op).or_default();
        e.calls.push(t.calls);
        e.bytes.push(t.answer_bytes);
        e.times.push(took.saturating_sub(t.emulated));
    };
    for i in 0..ROUNDS {
        counting.take();
        let started = Instant::now();
        let source = c
            .create_volume(overcast_integration::create_request(
                &format!("pvc-src-{i}"),
                SIZE,
            ))
            .await
            .expect("create")
            .into_inner()
            .volume
            .unwrap()
            .volume_id;
        record(ops[0], counting.take(), started.elapsed());
        let started = Instant::now();
        Cns::new(Arc::clone(&floor_client))
            .query(&Filter {
                ids: vec![source.clone()],
                ..Filter::default()
            })
            .await
            .expect("bare query");
        let t = counting.take();
        floor.calls.push(t.calls);
        floor.bytes.push(t.answer_bytes);
        floor
            .times
            .push(started.elapsed().saturating_sub(t.emulated));
        let started = Instant::now();
        let snapshot = c
            .create_snapshot(csi::CreateSnapshotRequest {
                name: format!("snapshot-{i}"),
                source_volume_id: source.clone(),
                ..Default::default()
            })
            .await
            .expect("cut")
            .into_inner()
            .snapshot
            .unwrap()
            .snapshot_id;
        record(ops[1], counting.take(), started.elapsed());
        let mut restore =
            overcast_integration::create_request(&format!("pvc-restored-{i}"), 2 * SIZE);
        restore.volume_content_source = Some(csi::VolumeContentSource {
            r#type: Some(csi::volume_content_source::Type::Snapshot(
                csi::volume_content_source::SnapshotSource {
                    snapshot_id: snapshot.clone(),
                },
            )),
        });
        let started = Instant::now();
        let restored = c
            .create_volume(restore)
            .await
            .expect("restore")
            .into_inner()
            .volume
            .unwrap()
            .volume_id;
        record(ops[2], counting.take(), started.elapsed());
        let started = Instant::now();
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: snapshot,
            ..Default::default()
        })
        .await
        .expect("delete snapshot");
        record(ops[3], counting.take(), started.elapsed());
        let started = Instant::now();
        c.delete_volume(overcast_integration::delete_request(&source))
            .await
            .expect("delete");
        record(ops[4], counting.take(), started.elapsed());
        c.delete_volume(overcast_integration::delete_request(&restored))
            .await
            .expect("delete");
    }
    println!(
        "vSphere CNS snapshots through the csi binary's socket on vcsim (with the CNS snapshot front), {SIZE} bytes, {ROUNDS} rounds, medians (calls and bytes: min–max)"
    );
    println!("| operation | vCenter calls | bytes answered | time |");
    println!("|---|---|---|---|");
    for op in ops {
        let e = figures.remove(op).unwrap_or_default();
        println!(
            "| {op} | {} | {} | {} |",
            range(&e.calls),
            range(&e.bytes),
            ms(median(e.times))
        );
    }
    println!(
        "| baseline: one bare CnsQueryVolume by id | {} | {} | {} |",
        range(&floor.calls),
        range(&floor.bytes),
        ms(median(floor.times))
    );
    drop(driver);
}
