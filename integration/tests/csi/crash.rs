//! Crash safety of the local cloud: what a restart repairs, and a kill -9 at random
//! points of a stream of calls that loses nothing acknowledged and leaks nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use overcast_integration::csi_v1 as csi;
use overcast_integration::*;
use rand::{Rng, SeedableRng};
use tonic::Code;

#[tokio::test]
async fn restart_reattaches_detaches_and_removes_what_the_store_does_not_hold() {
    let mut csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let a = c
        .create_volume(create_request("a", 4 * MIB))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    let b = c
        .create_volume(create_request("b", 4 * MIB))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap();
    c.controller_publish_volume(publish_request(&a.volume_id, false))
        .await
        .unwrap();
    csi.kill9();

    // What a reboot does to a's device, what a crash between attach and record leaves
    // for b, and what a crash between file and record leaves in the directory.
    let (a_loop, a_file) = csi.loops()[0].clone();
    assert!(Command::new("losetup")
        .arg("-d")
        .arg(format!("/dev/loop{a_loop}"))
        .status()
        .unwrap()
        .success());
    let b_file = csi.disks_dir().join(format!("{}.img", b.volume_id));
    assert!(Command::new("losetup")
        .arg("-f")
        .arg(&b_file)
        .status()
        .unwrap()
        .success());
    let orphan = csi
        .disks_dir()
        .join("vol-00000000000000000000000000000000.img");
    std::fs::write(&orphan, b"").unwrap();
    let foreign = csi.disks_dir().join("notes.txt");
    std::fs::write(&foreign, b"operator notes").unwrap();

    csi.restart().await;
    let loops = csi.loops();
    assert_eq!(loops.len(), 1, "only a is attached: {loops:?}");
    assert_eq!(loops[0].1, a_file);
    assert!(!orphan.exists(), "the unrecorded file was removed");
    assert!(
        foreign.exists(),
        "a file the cloud did not make is left alone"
    );

    let mut c = csi.controller().await;
    let got = c
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: a.volume_id.clone(),
        })
        .await
        .unwrap();
    let status = got.into_inner().status.unwrap();
    assert_eq!(status.published_node_ids, vec![NODE_ID.to_owned()]);
    assert!(!status.volume_condition.unwrap().abnormal);
    let ctx = c
        .controller_publish_volume(publish_request(&a.volume_id, false))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    assert_eq!(
        ctx["devicePath"],
        format!("/dev/loop{}", loops[0].0),
        "publish answers the new device"
    );
    c.controller_unpublish_volume(unpublish_request(&a.volume_id))
        .await
        .unwrap();
    assert!(csi.loops().is_empty());
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Absent,
    Present {
        id: String,
        size: i64,
        published: bool,
    },
}

#[derive(Debug, Clone)]
enum Op {
    Create { size: i64 },
    Publish,
    Unpublish,
    Expand { size: i64 },
    Delete,
}

struct Worker {
    names: Vec<(String, State)>,
    pending: Option<(usize, Op)>,
}

fn next_op(state: &State, rng: &mut impl Rng) -> Op {
    match state {
        State::Absent => Op::Create {
            size: rng.random_range(1..=4) * MIB,
        },
        State::Present {
            size,
            published: false,
            ..
        } => match rng.random_range(0..3) {
            0 => Op::Publish,
            1 => Op::Expand {
                size: size + rng.random_range(1..=3) * MIB,
            },
            _ => Op::Delete,
        },
        State::Present {
            size,
            published: true,
            ..
        } => match rng.random_range(0..2) {
            0 => Op::Unpublish,
            _ => Op::Expand { size: size + MIB },
        },
    }
}

/// Applies `op` to `name`; `Ok(new state)` once acknowledged, `Err(status)` otherwise.
async fn apply(
    c: &mut ControllerClient,
    name: &str,
    state: &State,
    op: &Op,
) -> Result<State, tonic::Status> {
    let id = match state {
        State::Present { id, .. } => id.clone(),
        State::Absent => String::new(),
    };
    match (op, state) {
        (Op::Create { size }, _) => {
            let v = c
                .create_volume(create_request(name, *size))
                .await?
                .into_inner()
                .volume
                .unwrap();
            Ok(State::Present {
                id: v.volume_id,
                size: v.capacity_bytes,
                published: false,
            })
        }
        (Op::Publish, State::Present { size, .. }) => {
            c.controller_publish_volume(publish_request(&id, false))
                .await?;
            Ok(State::Present {
                id,
                size: *size,
                published: true,
            })
        }
        (Op::Unpublish, State::Present { size, .. }) => {
            c.controller_unpublish_volume(unpublish_request(&id))
                .await?;
            Ok(State::Present {
                id,
                size: *size,
                published: false,
            })
        }
        (Op::Expand { size }, State::Present { published, .. }) => {
            let got = c
                .controller_expand_volume(expand_request(&id, *size))
                .await?
                .into_inner()
                .capacity_bytes;
            Ok(State::Present {
                id,
                size: got,
                published: *published,
            })
        }
        (Op::Delete, State::Present { .. }) => {
            c.delete_volume(delete_request(&id)).await?;
            Ok(State::Absent)
        }
        (op, state) => unreachable!("{op:?} on {state:?}"),
    }
}

async fn run_worker(mut worker: Worker, mut c: ControllerClient) -> Worker {
    let mut rng = rand::rngs::StdRng::from_os_rng();
    loop {
        let i = rng.random_range(0..worker.names.len());
        let (name, state) = worker.names[i].clone();
        let op = next_op(&state, &mut rng);
        match apply(&mut c, &name, &state, &op).await {
            Ok(next) => worker.names[i].1 = next,
            Err(status) => {
                // Only the crash may fail a call: anything else is a driver bug.
                assert!(
                    matches!(
                        status.code(),
                        Code::Unavailable | Code::Unknown | Code::Cancelled
                    ),
                    "{op:?} on {name}: {status:?}"
                );
                worker.pending = Some((i, op));
                return worker;
            }
        }
    }
}

/// Volumes as the driver lists them: id -> (capacity, published).
async fn listed(c: &mut ControllerClient) -> BTreeMap<String, (i64, bool)> {
    let entries = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    entries
        .into_iter()
        .map(|e| {
            let v = e.volume.unwrap();
            let published = !e.status.unwrap().published_node_ids.is_empty();
            (v.volume_id, (v.capacity_bytes, published))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_loses_nothing_acknowledged_and_leaks_nothing() {
    let mut csi = Csi::start(&[]).await;
    let mut workers: Vec<Worker> = (0..4)
        .map(|w| Worker {
            names: (0..3)
                .map(|n| (format!("crash-{w}-{n}"), State::Absent))
                .collect(),
            pending: None,
        })
        .collect();
    let mut rng = rand::rng();
    let mut interrupted = 0;
    for round in 0..12 {
        let channel = csi.channel().await;
        let handles: Vec<_> = workers
            .drain(..)
            .map(|w| {
                tokio::spawn(run_worker(
                    w,
                    csi::controller_client::ControllerClient::new(channel.clone()),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..80))).await;
        csi.kill9();
        for h in handles {
            workers.push(h.await.unwrap());
        }
        csi.restart().await;
        let mut c = csi.controller().await;

        // Every acknowledged state is there; an interrupted call left its volume either
        // as it was or as the call would make it.
        let before = listed(&mut c).await;
        for w in &workers {
            for (i, (name, state)) in w.names.iter().enumerate() {
                let pending = w
                    .pending
                    .as_ref()
                    .filter(|(p, _)| *p == i)
                    .map(|(_, op)| op);
                match (state, pending) {
                    (
                        State::Present {
                            id,
                            size,
                            published,
                        },
                        None,
                    ) => {
                        assert_eq!(
                            before.get(id),
                            Some(&(*size, *published)),
                            "round {round}: {name} {id}"
                        );
                    }
                    (
                        State::Present {
                            id,
                            size,
                            published,
                        },
                        Some(op),
                    ) => {
                        let got = before.get(id);
                        let ok = match op {
                            Op::Expand { size: to } => {
                                got == Some(&(*size, *published))
                                    || got.is_some_and(|g| g.0 == *to && g.1 == *published)
                            }
                            Op::Publish | Op::Unpublish => got.is_some_and(|g| g.0 == *size),
                            Op::Delete => got.is_none() || got == Some(&(*size, false)),
                            Op::Create { .. } => unreachable!(),
                        };
                        assert!(
                            ok,
                            "round {round}: {name} {id} after interrupted {op:?}: {got:?}"
                        );
                    }
                    (State::Absent, _) => {}
                }
            }
        }

        // Replaying the interrupted calls succeeds.
        for w in &mut workers {
            if let Some((i, op)) = w.pending.take() {
                interrupted += 1;
                let (name, state) = w.names[i].clone();
                let next = apply(&mut c, &name, &state, &op)
                    .await
                    .unwrap_or_else(|s| panic!("replay {op:?} on {name}: {s:?}"));
                w.names[i].1 = next;
            }
        }

        // Now the driver holds exactly the model: no extra volume, file or device.
        let after = listed(&mut c).await;
        let mut want = BTreeMap::new();
        for w in &workers {
            for (_, state) in &w.names {
                if let State::Present {
                    id,
                    size,
                    published,
                } = state
                {
                    want.insert(id.clone(), (*size, *published));
                }
            }
        }
        assert_eq!(
            after, want,
            "round {round}: the driver's volumes are the acknowledged ones"
        );
        let files: BTreeSet<String> = csi.disk_files().into_iter().collect();
        let want_files: BTreeSet<String> = want.keys().map(|id| format!("{id}.img")).collect();
        assert_eq!(
            files, want_files,
            "round {round}: no leaked or missing files"
        );
        let metas: BTreeSet<String> = csi.meta_files().into_iter().collect();
        let want_metas: BTreeSet<String> = want.keys().map(|id| format!("{id}.json")).collect();
        assert_eq!(
            metas, want_metas,
            "round {round}: one metadata file a disk, none left of a deleted one"
        );
        for id in want.keys() {
            assert_eq!(
                csi.disk_meta(id).map(|m| m["id"].clone()),
                Some(serde_json::json!(id)),
                "round {round}: disk {id} carries its metadata"
            );
        }
        let loops: BTreeSet<String> = csi
            .loops()
            .into_iter()
            .map(|(_, f)| {
                f.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .trim_end_matches(".img")
                    .to_owned()
            })
            .collect();
        let want_loops: BTreeSet<String> = want
            .iter()
            .filter(|(_, (_, p))| *p)
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(
            loops, want_loops,
            "round {round}: one loop device per published volume"
        );
        for (index, file) in csi.loops() {
            let id = file
                .file_name()
                .unwrap()
                .to_string_lossy()
                .trim_end_matches(".img")
                .to_owned();
            assert_eq!(
                block_size_bytes(index) as i64,
                want[&id].0,
                "round {round}: device size follows the disk"
            );
        }
    }
    assert!(interrupted > 0, "the kills interrupted calls");
    eprintln!("{interrupted} calls were interrupted by kill -9 and replayed");
}
