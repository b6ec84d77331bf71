use std::time::Duration;

use super::*;

fn record(id: &str) -> DiskRecord {
    DiskRecord {
        id: id.into(),
        name: format!("name-{id}"),
        size_bytes: 1 << 20,
        zone: Zone {
            region: "r".into(),
            zone: "z".into(),
        },
        thick: false,
        parameters: BTreeMap::new(),
        metadata: BTreeMap::new(),
        created_unix: 1,
        attachments: vec![],
        source: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_are_all_durable_and_reopen_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    {
        let store = Store::open(path).unwrap();
        let mut tasks = Vec::new();
        for i in 0..200 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .commit(Mutation::Put(record(&format!("{i:03}"))))
                    .await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        store.commit(Mutation::Delete("007".into())).await.unwrap();
    }
    // The writer thread of the first handle may still hold the file: reopen by
    // waiting for it to let go.
    let store = loop {
        match Store::open(path) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    };
    let all = store.load().unwrap();
    assert_eq!(all.len(), 199);
    assert!(all.iter().all(|r| r.id != "007"));
    assert!(
        all.windows(2).all(|w| w[0].id < w[1].id),
        "records come back sorted by id"
    );
    assert_eq!(all[0], record("000"));
}

/// Opens the store once its previous handle's writer has let go of the lock.
fn reopen(dir: &Path) -> Store {
    for _ in 0..500 {
        if let Ok(s) = Store::open(dir) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Store::open(dir).unwrap()
}

fn ids(store: &Store) -> Vec<String> {
    store.load().unwrap().into_iter().map(|r| r.id).collect()
}

#[tokio::test]
async fn a_second_process_is_kept_out() {
    let dir = tempfile::tempdir().unwrap();
    let _store = Store::open(dir.path()).unwrap();
    let err = Store::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("held by another process"), "{err}");
}

#[tokio::test]
async fn a_torn_last_record_is_cut_off_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        for id in ["a", "b"] {
            store.commit(Mutation::Put(record(id))).await.unwrap();
        }
    }
    let log = dir.path().join(LOG);
    let whole = std::fs::metadata(&log).unwrap().len();
    // A crash in the middle of the next write: half a record, then one that
    // extended the file but whose bytes never reached the disk.
    let next = frame(&serde_json::to_vec(&[Mutation::Put(record("c"))]).unwrap()).unwrap();
    for torn in [&next[..next.len() / 2], &vec![0u8; 100][..], &next[..5]] {
        let f = OpenOptions::new().write(true).open(&log).unwrap();
        f.write_all_at(torn, whole).unwrap();
        drop(f);
        let store = reopen(dir.path());
        assert_eq!(ids(&store), ["a", "b"]);
        assert_eq!(std::fs::metadata(&log).unwrap().len(), whole, "cut back");
        drop(store);
    }
    // A whole record whose last byte flipped, at the end: torn as well.
    let mut flipped = next.clone();
    *flipped.last_mut().unwrap() ^= 1;
    let f = OpenOptions::new().write(true).open(&log).unwrap();
    f.write_all_at(&flipped, whole).unwrap();
    drop(f);
    let store = reopen(dir.path());
    assert_eq!(ids(&store), ["a", "b"]);
    store.commit(Mutation::Put(record("c"))).await.unwrap();
    drop(store);
    assert_eq!(ids(&reopen(dir.path())), ["a", "b", "c"]);
}

#[tokio::test]
async fn a_damaged_record_with_records_after_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        for id in ["a", "b", "c"] {
            store.commit(Mutation::Put(record(id))).await.unwrap();
        }
    }
    let log = dir.path().join(LOG);
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[HEADER + 3] ^= 0xff; // inside the first record's payload
    std::fs::write(&log, &bytes).unwrap();
    let mut last = None;
    for _ in 0..500 {
        match Store::open(dir.path()) {
            Err(e) if e.to_string().contains("held by another") => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => {
                last = Some(other);
                break;
            }
        }
    }
    let err = last.unwrap().err().expect("refused");
    assert!(err.to_string().contains("damaged at byte 0"), "{err}");
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "nothing was cut");

    // A damaged length in the first record points past the end of the file: without
    // the header's checksum that read as a torn tail, and the two acknowledged records
    // after it were cut off.
    let mut bytes = bytes.clone();
    bytes[HEADER + 3] ^= 0xff; // the payload as it was
    bytes[6] ^= 0x7f; // the length's third byte: ~8 MiB more
    std::fs::write(&log, &bytes).unwrap();
    let err = Store::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("damaged at byte 0"), "{err}");
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "nothing was cut");
}

#[tokio::test]
async fn the_log_folds_into_a_snapshot_and_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let want = {
        let store = Store::open(dir.path()).unwrap();
        // Enough puts of a fat record to pass the fold threshold more than once.
        let mut fat = record("x");
        fat.metadata.insert("pad".into(), "p".repeat(8 << 10));
        for i in 0..1200 {
            let mut r = fat.clone();
            r.id = format!("{:04}", i % 300);
            store.commit(Mutation::Put(r)).await.unwrap();
        }
        for i in (0..300).step_by(3) {
            store
                .commit(Mutation::Delete(format!("{i:04}")))
                .await
                .unwrap();
        }
        let want = ids(&store);
        assert_eq!(want.len(), 200);
        want
    };
    assert!(dir.path().join(SNAPSHOT).exists());
    let log_len = std::fs::metadata(dir.path().join(LOG)).unwrap().len();
    assert!(
        log_len < FOLD_AT,
        "the log was emptied by a fold ({log_len} bytes)"
    );
    let store = reopen(dir.path());
    assert_eq!(ids(&store), want);
    drop(store);
    // A crash after a fold wrote its snapshot but before it emptied the log: the old
    // log replays over the new snapshot to the same state.
    let snapshot_state = {
        let store = reopen(dir.path());
        store.commit(Mutation::Delete("0001".into())).await.unwrap();
        let log = std::fs::read(dir.path().join(LOG)).unwrap();
        let state = ids(&store);
        let mut guard = store.shared().log();
        guard.fold().unwrap();
        drop(guard);
        drop(store);
        std::fs::write(dir.path().join(LOG), log).unwrap();
        state
    };
    assert_eq!(ids(&reopen(dir.path())), snapshot_state);
}

#[tokio::test]
async fn a_store_of_the_earlier_format_is_converted_once() {
    use redb::TableDefinition;
    const DISKS: TableDefinition<&str, &[u8]> = TableDefinition::new("disks");
    let dir = tempfile::tempdir().unwrap();
    {
        let db = redb::Database::create(dir.path().join(LEGACY)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(DISKS).unwrap();
            for id in ["vol-a", "vol-b"] {
                let bytes = serde_json::to_vec(&record(id)).unwrap();
                t.insert(id, bytes.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    {
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.load().unwrap(), [record("vol-a"), record("vol-b")]);
        store
            .commit(Mutation::Delete("vol-a".into()))
            .await
            .unwrap();
    }
    assert!(!dir.path().join(LEGACY).exists());
    assert!(dir.path().join(format!("{LEGACY}.converted")).exists());
    // Read from the log from now on, not converted again.
    assert_eq!(ids(&reopen(dir.path())), ["vol-b"]);

    // An older version ran again after the conversion (a rollback) and wrote a new
    // redb store, and neither has a snapshot to say which is current: refused.
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(
        dir.path().join(format!("{LEGACY}.converted")),
        other.path().join(LEGACY),
    )
    .unwrap();
    std::fs::copy(dir.path().join(LOG), other.path().join(LOG)).unwrap();
    let err = Store::open(other.path()).err().expect("refused");
    assert!(err.to_string().contains("both hold disks"), "{err}");
    assert!(other.path().join(LEGACY).exists(), "nothing renamed");
}
