//! The OpenStack provider against the real services of `../shared/sim/openstack`
//! (Keystone, Nova with its fake driver, Cinder with its fake driver): cloud API calls
//! and wall time per CSI operation (snapshots, Cinder backups, restores and their deletes
//! among them; the backups with cinder-backup up, `integration/scripts/cinder-backup/up.sh`), and
//! how long attach answers after Cinder reports the volume `in-use` (what the poll
//! schedule costs). Baseline in the same run: one bare
//! GET of a volume.
//!
//! `../shared/sim/openstack/ossim-up.sh && OVERCAST_TEST_OPENSTACK_OPENRC=/tmp/ossim/openrc \
//!  cargo bench -p overcast-integration --bench openstack`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use overcast_cloud::{DiskSource, DiskSpec, Disks, SnapshotSpec, Zone};
use overcast_cloud_http::ApiMetrics;
use overcast_cloud_openstack::client::Microversion;
use overcast_cloud_openstack::{CinderDisks, Config, Service, Waits};
use serde_json::{json, Value};

use overcast_integration::figures::{median, ms};

const ROUNDS: usize = 10;

#[tokio::main]
async fn main() {
    let Ok(openrc) = std::env::var("OVERCAST_TEST_OPENSTACK_OPENRC") else {
        println!("SKIPPED: set OVERCAST_TEST_OPENSTACK_OPENRC to run the OpenStack benchmark");
        return;
    };
    let env = overcast_integration::ossim::openrc(&openrc);
    let dir = tempfile::tempdir().unwrap();
    let conf = overcast_integration::ossim::cloud_conf(&env, dir.path());
    let config = Config::load(Some(&conf)).unwrap();
    let metrics = Arc::new(ApiMetrics::unregistered());
    let os = overcast_cloud_openstack::connect(&config, Some(Arc::clone(&metrics))).unwrap();
    let disks = Arc::new(CinderDisks::new(
        Arc::clone(&os),
        "overcast-bench".into(),
        String::new(),
        vec!["nova".into()],
        60,
        false,
        Waits::default(),
    ));
    // The watcher's own client: its calls are not counted with the provider's.
    let watch = Arc::new(CinderDisks::new(
        overcast_cloud_openstack::connect(&config, None).unwrap(),
        "overcast-bench".into(),
        String::new(),
        vec!["nova".into()],
        60,
        false,
        Waits::default(),
    ));
    let compute = |name: &'static str, method: Method, path: String, body: Option<Value>| {
        let os = Arc::clone(&os);
        async move {
            let r = os
                .call(
                    Service::Compute,
                    name,
                    method,
                    &path,
                    body.as_ref(),
                    Some(Microversion(2, 79)),
                )
                .await
                .unwrap();
            serde_json::from_slice::<Value>(&r.body).unwrap_or(Value::Null)
        }
    };
    let flavors = compute("flavor_list", Method::GET, "/flavors".into(), None).await;
    let flavor = flavors["flavors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "m1.small")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let made = compute(
        "server_create",
        Method::POST,
        "/servers".into(),
        Some(
            json!({"server": {"name": "overcast-bench", "imageRef": env["OSSIM_IMAGE_ID"],
            "flavorRef": flavor, "networks": [{"uuid": env["OSSIM_NET_ID"]}]}}),
        ),
    )
    .await;
    let server = made["server"]["id"].as_str().unwrap().to_owned();
    loop {
        let s = compute(
            "server_get",
            Method::GET,
            format!("/servers/{server}"),
            None,
        )
        .await;
        if s["server"]["status"] == "ACTIVE" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The token is fetched once, before the measured calls.
    disks.probe().await.unwrap();

    let ops = [
        "create",
        "publish",
        "expand (in use)",
        "unpublish",
        "snapshot (until ready)",
        "restore (volume from the snapshot)",
        "delete the restored volume",
        "delete snapshot",
        "backup (until ready)",
        "restore (volume from the backup)",
        "delete the volume restored from the backup",
        "delete backup",
        "delete",
    ];
    // Cinder backups need cinder-backup beside the services
    // (integration/scripts/cinder-backup/up.sh, which exports this).
    let backups = std::env::var_os("OVERCAST_TEST_CINDER_BACKUP_DATA").is_some();
    let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut calls: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut after_in_use = Vec::new();
    let mut floor = Vec::new();
    for i in 0..ROUNDS {
        let name = format!("overcast-bench-{i}");
        let before = metrics.total();
        let started = Instant::now();
        let disk = disks
            .create_disk(DiskSpec {
                name: name.clone(),
                size_bytes: 1 << 30,
                zone: Zone {
                    zone: "nova".into(),
                    region: String::new(),
                },
                parameters: BTreeMap::new(),
                metadata: BTreeMap::new(),
                source: None,
            })
            .await
            .unwrap();
        times.entry("create").or_default().push(started.elapsed());
        calls
            .entry("create")
            .or_default()
            .push(metrics.total() - before);
        let id = disk.id.clone();
        let started = Instant::now();
        let _ = disks.disk(&id).await.unwrap();
        floor.push(started.elapsed());

        // A watcher outside the provider polls Cinder every 20 ms for `in-use`.
        let watcher = {
            let disks = Arc::clone(&watch);
            let id = id.clone();
            tokio::spawn(async move {
                loop {
                    if disks
                        .disk(&id)
                        .await
                        .is_ok_and(|d| !d.attachments.is_empty())
                    {
                        return Instant::now();
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let before = metrics.total();
        let started = Instant::now();
        disks.attach_disk(&id, &server, false).await.unwrap();
        let answered = Instant::now();
        times.entry("publish").or_default().push(started.elapsed());
        let seen = watcher.await.unwrap();
        after_in_use.push(answered.saturating_duration_since(seen));
        calls
            .entry("publish")
            .or_default()
            .push(metrics.total() - before);
        let mut snapshot = String::new();
        let mut restored = String::new();
        let mut backup = String::new();
        for op in [
            "expand (in use)",
            "unpublish",
            "snapshot (until ready)",
            "restore (volume from the snapshot)",
            "delete the restored volume",
            "delete snapshot",
            "backup (until ready)",
            "restore (volume from the backup)",
            "delete the volume restored from the backup",
            "delete backup",
            "delete",
        ] {
            if !backups && op.contains("backup") {
                continue;
            }
            let before = metrics.total();
            let started = Instant::now();
            match op {
                "expand (in use)" => {
                    disks.expand_disk(&id, 2 << 30).await.unwrap();
                }
                "unpublish" => disks.detach_disk(&id, &server).await.unwrap(),
                "snapshot (until ready)" => {
                    // As csi-snapshotter does: CreateSnapshot asked again until it is ready.
                    let spec = SnapshotSpec {
                        name: format!("{name}-snap"),
                        source: id.clone(),
                        parameters: BTreeMap::new(),
                        metadata: BTreeMap::new(),
                    };
                    loop {
                        let s = disks.create_snapshot(spec.clone()).await.unwrap();
                        if s.ready {
                            snapshot = s.id;
                            break;
                        }
                    }
                }
                "restore (volume from the snapshot)" => {
                    restored = disks
                        .create_disk(DiskSpec {
                            name: format!("{name}-restored"),
                            size_bytes: 2 << 30,
                            zone: Zone::default(),
                            parameters: BTreeMap::new(),
                            metadata: BTreeMap::new(),
                            source: Some(DiskSource::Snapshot(snapshot.clone())),
                        })
                        .await
                        .unwrap()
                        .id;
                }
                "delete the restored volume" => disks.delete_disk(&restored).await.unwrap(),
                "delete snapshot" => disks.delete_snapshot(&snapshot).await.unwrap(),
                "backup (until ready)" => {
                    // A class of cinder-csi-plugin's `type: backup`, asked again until
                    // ready as csi-snapshotter asks.
                    let spec = SnapshotSpec {
                        name: format!("{name}-backup"),
                        source: id.clone(),
                        parameters: BTreeMap::from([("type".to_owned(), "backup".to_owned())]),
                        metadata: BTreeMap::new(),
                    };
                    loop {
                        let s = disks.create_snapshot(spec.clone()).await.unwrap();
                        if s.ready {
                            backup = s.id;
                            break;
                        }
                    }
                }
                "restore (volume from the backup)" => {
                    restored = disks
                        .create_disk(DiskSpec {
                            name: format!("{name}-restored-backup"),
                            size_bytes: 2 << 30,
                            zone: Zone::default(),
                            parameters: BTreeMap::new(),
                            metadata: BTreeMap::new(),
                            source: Some(DiskSource::Snapshot(backup.clone())),
                        })
                        .await
                        .unwrap()
                        .id;
                }
                "delete the volume restored from the backup" => {
                    disks.delete_disk(&restored).await.unwrap()
                }
                "delete backup" => disks.delete_snapshot(&backup).await.unwrap(),
                _ => disks.delete_disk(&id).await.unwrap(),
            }
            times.entry(op).or_default().push(started.elapsed());
            calls.entry(op).or_default().push(metrics.total() - before);
        }
    }
    println!("OpenStack provider on the real services (../shared/sim/openstack), {ROUNDS} rounds, medians");
    println!("| operation | cloud API calls | time |");
    println!("|---|---|---|");
    for op in ops {
        let c = calls.remove(op).unwrap_or_default();
        if c.is_empty() {
            println!("| {op} | skipped: no cinder-backup (OVERCAST_TEST_CINDER_BACKUP_DATA) | |");
            continue;
        }
        let (lo, hi) = (
            c.iter().min().copied().unwrap_or(0),
            c.iter().max().copied().unwrap_or(0),
        );
        let range = if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}–{hi}")
        };
        println!(
            "| {op} | {range} | {} |",
            ms(median(times.remove(op).unwrap_or_default()))
        );
    }
    println!(
        "| baseline: one bare GET of a volume | 1 | {} |",
        ms(median(floor))
    );
    println!(
        "publish answered after Cinder first showed the attachment (a 20 ms watcher): median {}",
        ms(median(after_in_use))
    );
    compute(
        "server_delete",
        Method::DELETE,
        format!("/servers/{server}"),
        None,
    )
    .await;
}
