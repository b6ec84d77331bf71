//! What each vSphere CSI RPC costs the vCenter, through the `csi` binary's socket as the
//! sidecars drive it (not the provider's functions): vcsim with 10, 500 and 2,000 VMs
//! (`-vm` 5, 250, 1,000 in each of its two pools) behind a counting front
//! (`overcast_integration::vsphere_costs`: every call and the bytes of every answer, task
//! polls and logins included), the node known by its guest's host name as a kubelet's
//! is. Per size, median over `OVERCAST_BENCH_VOLUMES` (default 5) volumes: CreateVolume,
//! ControllerPublish, the same again (already attached), ControllerUnpublish,
//! DeleteVolume; ListVolumes with 10 and with 50 volumes (5 of them attached); and the
//! baseline, one bare `CnsQueryVolume` by id through the same front, in the same run. The
//! ESXi host's part of an attach (the VM's virtual disk) is played on the bench's own
//! session, uncounted. Times are the RPC's wall time less what the front spent playing
//! the vCenter's part vcsim lacks (it reads every VM to say which hold a disk or whether a
//! deleted one is held, where a vCenter answers from its own index).
//!
//! After them all, the csi's peak resident set (VmHWM). `OVERCAST_BENCH_VSPHERE_ROUTE=every-vm`
//! measures the route of a vCenter that cannot say which VMs hold a disk (every VM's devices
//! read, in batches).
//!
//! `OVERCAST_TEST_VCSIM=/path/to/vcsim cargo bench -p overcast-integration --bench vsphere_disks`
//! (`OVERCAST_BENCH_VMS=5,250,1000`: VMs per pool, the sizes measured).

use std::sync::Arc;
use std::time::{Duration, Instant};

use overcast_cloud_http::{ApiMetrics, HttpSettings};
use overcast_cloud_vsphere::cns::{Cns, Filter};
use overcast_cloud_vsphere::credentials::Credential;
use overcast_cloud_vsphere::session::{Login, Target, Vcenter};
use overcast_integration::figures::{median, ms};
use overcast_integration::vcsim::{plug_disk, unplug_disk};
use overcast_integration::vcsim_front::{Tally, VmIdSpelling};
use overcast_integration::vsphere_costs::{Costs, NODE};
use overcast_integration::{
    attach_request, create_request, csi_v1 as csi, detach_request, mount_cap,
};

/// One operation's figures at one size.
#[derive(Default, Clone)]
struct Op {
    calls: Vec<u64>,
    bytes: Vec<u64>,
    times: Vec<Duration>,
}

impl Op {
    /// The RPC's time less the front's own (see [`Tally::emulated`]).
    fn add(&mut self, t: &Tally, took: Duration) {
        self.calls.push(t.calls);
        self.bytes.push(t.answer_bytes);
        self.times.push(took.saturating_sub(t.emulated));
    }

    fn mid(v: &[u64]) -> u64 {
        let mut v = v.to_vec();
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }

    fn cell(&self) -> String {
        if self.times.is_empty() {
            return "–".into();
        }
        format!(
            "{} / {:.1} KiB / {}",
            Self::mid(&self.calls),
            Self::mid(&self.bytes) as f64 / 1024.0,
            ms(median(self.times.clone()))
        )
    }
}

const ROWS: [&str; 8] = [
    "CreateVolume",
    "ControllerPublishVolume",
    "ControllerPublishVolume, already attached",
    "ControllerUnpublishVolume",
    "DeleteVolume",
    "ListVolumes, 10 volumes (5 attached)",
    "ListVolumes, 50 volumes (5 attached)",
    "baseline: one bare CnsQueryVolume by id",
];

/// Which route a listing takes: the vCenter's associations (`RetrieveVStorageObjectAssociations`,
/// answered by the front with the VMs' references), or every VM's devices — the route of a
/// vCenter that cannot answer them (`OVERCAST_BENCH_VSPHERE_ROUTE=every-vm`: the front answers
/// with instance UUIDs, which the driver cannot resolve, so it reads every VM).
fn spelling() -> VmIdSpelling {
    match std::env::var("OVERCAST_BENCH_VSPHERE_ROUTE").as_deref() {
        Ok("every-vm") => VmIdSpelling::InstanceUuid,
        _ => VmIdSpelling::Moref,
    }
}

async fn at(per_pool: usize, n: usize) -> Option<(usize, Vec<Op>, u64)> {
    let costs = Costs::start(
        "vsphere_disks bench",
        per_pool,
        spelling(),
        "",
        &["--cluster=overcast-bench"],
    )
    .await?;
    let mut ops = vec![Op::default(); ROWS.len()];
    let mut c = costs.driver.controller().await;
    // Warm-up: the login, the service content, the views.
    c.list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap();
    for i in 0..n {
        let (r, t, took) = costs
            .measure(c.create_volume(create_request(&format!("pvc-bench-{i}"), 1 << 30)))
            .await;
        ops[0].add(&t, took);
        let id = r.unwrap().into_inner().volume.unwrap().volume_id;
        let publish = attach_request(&id, NODE, mount_cap("ext4"));
        let (r, t, took) = costs
            .measure(c.controller_publish_volume(publish.clone()))
            .await;
        ops[1].add(&t, took);
        let uuid = r.unwrap().into_inner().publish_context["diskUUID"].clone();
        plug_disk(&costs.admin, &costs.vm, &costs.vm_name, &id, &uuid).await;
        let (r, t, took) = costs.measure(c.controller_publish_volume(publish)).await;
        r.unwrap();
        ops[2].add(&t, took);
        let (r, t, took) = costs
            .measure(c.controller_unpublish_volume(detach_request(&id, NODE)))
            .await;
        r.unwrap();
        ops[3].add(&t, took);
        unplug_disk(&costs.admin, &costs.vm, &id).await;
        let (r, t, took) = costs
            .measure(c.delete_volume(csi::DeleteVolumeRequest {
                volume_id: id,
                ..Default::default()
            }))
            .await;
        r.unwrap();
        ops[4].add(&t, took);
    }
    // Listings: 10 volumes, 5 attached; then 50.
    let mut kept = Vec::new();
    for (row, total) in [(5, 10), (6, 50)] {
        while kept.len() < total {
            let id = c
                .create_volume(create_request(&format!("pvc-list-{}", kept.len()), 1 << 30))
                .await
                .unwrap()
                .into_inner()
                .volume
                .unwrap()
                .volume_id;
            if kept.len() < 5 {
                let ctx = c
                    .controller_publish_volume(attach_request(&id, NODE, mount_cap("ext4")))
                    .await
                    .unwrap()
                    .into_inner()
                    .publish_context;
                plug_disk(
                    &costs.admin,
                    &costs.vm,
                    &costs.vm_name,
                    &id,
                    &ctx["diskUUID"],
                )
                .await;
            }
            kept.push(id);
        }
        for _ in 0..5 {
            let (r, t, took) = costs
                .measure(c.list_volumes(csi::ListVolumesRequest::default()))
                .await;
            let entries = r.unwrap().into_inner().entries;
            assert_eq!(entries.len(), total);
            let attached = entries
                .iter()
                .filter(|e| !e.status.as_ref().unwrap().published_node_ids.is_empty())
                .count();
            assert_eq!(
                attached, 5,
                "the attached volumes are listed with their node"
            );
            ops[row].add(&t, took);
        }
    }
    // The baseline: a bare CnsQueryVolume by id, through the same front.
    let probe = front_client(&costs);
    let cns = Cns::new(Arc::clone(&probe));
    let query = || async {
        cns.query(&Filter {
            ids: vec![kept[0].clone()],
            ..Filter::default()
        })
        .await
    };
    query().await.unwrap();
    for _ in 0..5 {
        let (r, t, took) = costs.measure(query()).await;
        r.unwrap();
        ops[7].add(&t, took);
    }
    for id in &kept[..5] {
        unplug_disk(&costs.admin, &costs.vm, id).await;
    }
    let peak = overcast_integration::peak_rss_kib(costs.driver.pid());
    Some((costs.vms, ops, peak))
}

/// A client of the vCenter through the counting front.
fn front_client(costs: &Costs) -> Arc<Vcenter> {
    let mut settings = HttpSettings::new("vsphere-baseline");
    settings.ca_pem = Some(std::fs::read_to_string(&costs.sim.ca_file).unwrap());
    Vcenter::new(
        Target {
            server: "127.0.0.1".into(),
            port: costs.front_port,
            login: Login::Password(Credential {
                user: "user".into(),
                password: "pass".into(),
            }),
            keepalive: Duration::ZERO,
        },
        settings,
        Some(Arc::new(ApiMetrics::unregistered())),
    )
    .unwrap()
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("OVERCAST_BENCH_VOLUMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let sizes: Vec<usize> = std::env::var("OVERCAST_BENCH_VMS")
        .unwrap_or_else(|_| "5,250,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let started = Instant::now();
    let mut columns = Vec::new();
    for per_pool in sizes {
        let Some(col) = at(per_pool, n).await else {
            return;
        };
        columns.push(col);
    }
    print!("| RPC (median of {n}): calls / answer bytes / time |");
    for (vms, _, _) in &columns {
        print!(" {vms} VMs |");
    }
    println!();
    println!("|---|{}", "---|".repeat(columns.len()));
    for (i, row) in ROWS.iter().enumerate() {
        print!("| {row} |");
        for (_, ops, _) in &columns {
            print!(" {} |", ops[i].cell());
        }
        println!();
    }
    print!("| the csi's peak resident set (VmHWM) after them all |");
    for (_, _, peak) in &columns {
        print!(" {:.1} MiB |", *peak as f64 / 1024.0);
    }
    println!();
    // Flatness: the largest inventory's bytes against the smallest's.
    if let (Some((small_vms, small, _)), Some((large_vms, large, _))) =
        (columns.first(), columns.last())
    {
        println!();
        for (i, row) in ROWS.iter().enumerate().take(7) {
            let (s, l) = (Op::mid(&small[i].bytes), Op::mid(&large[i].bytes));
            println!(
                "{row}: {large_vms} VMs / {small_vms} VMs = {:.2}× the answer bytes",
                l as f64 / s.max(1) as f64
            );
        }
    }
    eprintln!("(the run took {:?})", started.elapsed());
}
