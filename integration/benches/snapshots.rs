//! Snapshots on the local cloud through the real `csi` binary's socket: CreateSnapshot of
//! a 256 MiB disk holding 64 MiB of data, CreateVolume from that snapshot (a restore) and
//! from the disk (a clone), DeleteSnapshot — against a baseline doing the same copy with
//! the standard tool in the same run (`cp --sparse=always` of the disk's file, then `rm`).
//! The local cloud calls no API: what a cut costs is the copy of the disk's data extents
//! (or nothing, where the filesystem reflinks), one metadata file, two syncs and a rename.
//!
//! `cargo build --release --bins && cargo bench -p overcast-integration --bench snapshots`

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use overcast_integration::csi_v1 as csi;
use overcast_integration::*;

const SIZE: i64 = 256 * MIB;
const DATA: usize = 64 << 20;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn from_snapshot(name: &str, id: &str) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        volume_content_source: Some(csi::VolumeContentSource {
            r#type: Some(csi::volume_content_source::Type::Snapshot(
                csi::volume_content_source::SnapshotSource {
                    snapshot_id: id.into(),
                },
            )),
        }),
        ..create_request(name, SIZE)
    }
}

fn from_volume(name: &str, id: &str) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        volume_content_source: Some(csi::VolumeContentSource {
            r#type: Some(csi::volume_content_source::Type::Volume(
                csi::volume_content_source::VolumeSource {
                    volume_id: id.into(),
                },
            )),
        }),
        ..create_request(name, SIZE)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = if std::env::args().any(|a| a == "--quick") {
        3
    } else {
        10
    };
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let source = c
        .create_volume(create_request("bench-source", SIZE))
        .await
        .expect("create")
        .into_inner()
        .volume
        .expect("volume")
        .volume_id;
    let file = csi.disks_dir().join(format!("{source}.img"));
    {
        // 64 MiB of data in four runs across the disk, the rest holes.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .expect("open");
        let block = vec![0xa5u8; DATA / 4];
        for i in 0..4u64 {
            use std::io::Seek;
            f.seek(std::io::SeekFrom::Start(i * (SIZE as u64 / 4)))
                .expect("seek");
            f.write_all(&block).expect("write");
        }
        f.sync_all().expect("sync");
    }
    let copy_dir = tempfile::tempdir_in(csi.state_dir.parent().expect("parent")).expect("tempdir");
    let (mut cut, mut restore, mut clone, mut delete, mut cp) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut allocated = 0;
    for i in 0..=runs {
        let t = Instant::now();
        let snap = c
            .create_snapshot(csi::CreateSnapshotRequest {
                name: format!("bench-snap-{i}"),
                source_volume_id: source.clone(),
                ..Default::default()
            })
            .await
            .expect("cut")
            .into_inner()
            .snapshot
            .expect("snapshot");
        let t_cut = t.elapsed();
        let image = csi
            .state_dir
            .join("snapshots")
            .join(format!("{}.img", snap.snapshot_id));
        let snap_bytes = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(&image)
                .expect("the snapshot's image")
                .blocks()
                * 512
        };
        let t = Instant::now();
        let restored = c
            .create_volume(from_snapshot(
                &format!("bench-restored-{i}"),
                &snap.snapshot_id,
            ))
            .await
            .expect("restore")
            .into_inner()
            .volume
            .expect("volume");
        let t_restore = t.elapsed();
        let t = Instant::now();
        let cloned = c
            .create_volume(from_volume(&format!("bench-clone-{i}"), &source))
            .await
            .expect("clone")
            .into_inner()
            .volume
            .expect("volume");
        let t_clone = t.elapsed();
        let t = Instant::now();
        c.delete_snapshot(csi::DeleteSnapshotRequest {
            snapshot_id: snap.snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .expect("delete snapshot");
        let t_delete = t.elapsed();
        for v in [&restored.volume_id, &cloned.volume_id] {
            c.delete_volume(delete_request(v)).await.expect("delete");
        }
        // The baseline: the same copy by the standard tool, synced as ours is.
        let to = copy_dir.path().join(format!("copy-{i}.img"));
        let t = Instant::now();
        let ok = Command::new("cp")
            .arg("--sparse=always")
            .arg(&file)
            .arg(&to)
            .status()
            .expect("cp")
            .success();
        assert!(ok, "cp");
        std::fs::File::open(&to)
            .expect("open")
            .sync_all()
            .expect("sync");
        let t_cp = t.elapsed();
        std::fs::remove_file(&to).expect("rm");
        // The first of each warms the page cache and the connection: not counted.
        if i > 0 {
            cut.push(t_cut);
            restore.push(t_restore);
            clone.push(t_clone);
            delete.push(t_delete);
            cp.push(t_cp);
            allocated = snap_bytes;
        }
    }
    println!("snapshots on the local cloud, {runs} runs, a 256 MiB disk holding 64 MiB, medians:");
    println!("| operation | time |");
    println!("|---|---:|");
    println!(
        "| CreateSnapshot (a cut: the copy, its metadata, two syncs) | {} |",
        ms(median(cut))
    );
    println!(
        "| CreateVolume from the snapshot (a restore) | {} |",
        ms(median(restore))
    );
    println!(
        "| CreateVolume from the volume (a clone) | {} |",
        ms(median(clone))
    );
    println!("| DeleteSnapshot | {} |", ms(median(delete)));
    println!(
        "| baseline: `cp --sparse=always` of the disk's file, synced | {} |",
        ms(median(cp))
    );
    println!(
        "a snapshot's image takes {:.1} MiB on disk (the disk's data, not its 256 MiB size)",
        allocated as f64 / (1 << 20) as f64
    );
    println!("cloud API calls per operation: 0 (the local cloud has no API)");
}
