use std::os::unix::fs::FileExt;

use super::*;

fn spec(name: &str, source: &str) -> SnapshotSpec {
    SnapshotSpec {
        name: name.into(),
        source: source.into(),
        parameters: BTreeMap::new(),
        metadata: [(
            "csi.storage.k8s.io/volumesnapshot/name".into(),
            "before-upgrade".into(),
        )]
        .into(),
    }
}

/// A disk file of 8 MiB holding `text` at 1 MiB.
fn disk(dir: &Path, text: &[u8]) -> PathBuf {
    let path = dir.join("vol.img");
    let f = File::create(&path).unwrap();
    f.set_len(8 << 20).unwrap();
    f.write_all_at(text, 1 << 20).unwrap();
    path
}

fn image_text(snapshots: &Snapshots, id: &str, len: usize) -> Vec<u8> {
    let (path, _) = snapshots.image_of(id).unwrap();
    let mut buf = vec![0u8; len];
    File::open(path)
        .unwrap()
        .read_exact_at(&mut buf, 1 << 20)
        .unwrap();
    buf
}

#[test]
fn a_snapshot_keeps_the_disk_as_it_was_and_is_found_by_id_name_and_source() {
    let dir = tempfile::tempdir().unwrap();
    let disk_file = disk(dir.path(), b"first");
    let (snapshots, _) = Snapshots::open(&dir.path().join("snapshots")).unwrap();
    let s = snapshots
        .create(&spec("snapshot-1", "vol-a"), &disk_file, 8 << 20)
        .unwrap();
    assert!(SnapshotId::parse(&s.id).is_some(), "{}", s.id);
    assert_eq!(
        (s.source.as_str(), s.size_bytes, s.ready),
        ("vol-a", 8 << 20, true)
    );
    // The disk written after: the snapshot still holds what it held.
    File::options()
        .write(true)
        .open(&disk_file)
        .unwrap()
        .write_all_at(b"later", 1 << 20)
        .unwrap();
    assert_eq!(image_text(&snapshots, &s.id, 5), b"first");
    assert_eq!(snapshots.get(&s.id).unwrap(), s);
    assert_eq!(snapshots.by_name("snapshot-1").unwrap().id, s.id);
    // Asked again by name: the same snapshot; of another disk: ALREADY_EXISTS.
    let meta = snapshots.by_name("snapshot-1").unwrap();
    assert_eq!(meta.answer(&spec("snapshot-1", "vol-a")).unwrap(), s);
    assert!(matches!(
        meta.answer(&spec("snapshot-1", "vol-b")),
        Err(CloudError::ParameterMismatch {
            kind: "snapshot",
            ..
        })
    ));
    let t = snapshots
        .create(&spec("snapshot-2", "vol-b"), &disk_file, 8 << 20)
        .unwrap();
    assert_eq!(image_text(&snapshots, &t.id, 5), b"later");
    let (all, more) = snapshots.page(None, None, 0);
    assert_eq!(all.len(), 2);
    assert!(!more);
    let (of_b, _) = snapshots.page(Some("vol-b"), None, 0);
    assert_eq!(of_b, vec![t.clone()]);
    let (first, more) = snapshots.page(None, None, 1);
    assert!(more);
    let (rest, more) = snapshots.page(None, Some(&first[0].id), 1);
    assert!(!more);
    assert_ne!(first, rest);

    // Reopened (a restart, or a lost store: the store holds no snapshot), both are there.
    drop(snapshots);
    let (snapshots, found) = Snapshots::open(&dir.path().join("snapshots")).unwrap();
    assert_eq!(found.snapshots, 2);
    assert_eq!(snapshots.get(&s.id).unwrap(), s);

    snapshots.delete(&s.id).unwrap();
    assert!(matches!(
        snapshots.get(&s.id),
        Err(CloudError::NotFound { .. })
    ));
    assert!(matches!(
        snapshots.delete(&s.id),
        Err(CloudError::NotFound { .. })
    ));
    assert!(snapshots.by_name("snapshot-1").is_none());
    let left: Vec<_> = std::fs::read_dir(dir.path().join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(&s.id))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn ids_that_are_not_ours_are_never_paths() {
    let dir = tempfile::tempdir().unwrap();
    let (snapshots, _) = Snapshots::open(&dir.path().join("snapshots")).unwrap();
    for bad in [
        "",
        "../store.log",
        "snap-../../x",
        "snap-0123456789abcdef0123456789ABCDEF",
        "vol-0123456789abcdef0123456789abcdef",
        "snap-0123456789abcdef0123456789abcdef/..",
    ] {
        assert!(SnapshotId::parse(bad).is_none(), "{bad}");
        assert!(matches!(
            snapshots.get(bad),
            Err(CloudError::NotFound { .. })
        ));
        assert!(matches!(
            snapshots.delete(bad),
            Err(CloudError::NotFound { .. })
        ));
        assert!(snapshots.image_of(bad).is_err());
    }
}

#[test]
fn what_a_crash_left_is_removed_or_kept_and_nothing_unexplained_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let disk_file = disk(dir.path(), b"data");
    let snap_dir = dir.path().join("snapshots");
    let (snapshots, _) = Snapshots::open(&snap_dir).unwrap();
    let whole = snapshots
        .create(&spec("whole", "vol-a"), &disk_file, 8 << 20)
        .unwrap();
    drop(snapshots);
    // A create that wrote its metadata and part of its image, one that wrote only its
    // metadata, an image whose metadata is gone, and one of a newer release's format.
    let (a, b, c, d) = (
        SnapshotId::generate(),
        SnapshotId::generate(),
        SnapshotId::generate(),
        SnapshotId::generate(),
    );
    std::fs::write(snap_dir.join(a.meta()), b"{}").unwrap();
    std::fs::write(snap_dir.join(a.part()), b"half").unwrap();
    std::fs::write(snap_dir.join(b.meta()), b"{}").unwrap();
    std::fs::write(snap_dir.join(c.image()), b"kept").unwrap();
    std::fs::write(snap_dir.join(d.image()), b"newer").unwrap();
    std::fs::write(
        snap_dir.join(d.meta()),
        format!("{{\"format\": 2, \"id\": \"{}\"}}", d.as_str()),
    )
    .unwrap();
    let (snapshots, found) = Snapshots::open(&snap_dir).unwrap();
    assert_eq!(found.snapshots, 1);
    assert_eq!(found.unfinished_removed, 3, "{found:?}");
    assert_eq!(found.left_alone, 2, "{found:?}");
    assert!(!snap_dir.join(a.meta()).exists() && !snap_dir.join(a.part()).exists());
    assert!(!snap_dir.join(b.meta()).exists());
    assert!(
        snap_dir.join(c.image()).exists(),
        "an unexplained image is kept"
    );
    assert!(snap_dir.join(d.image()).exists() && snap_dir.join(d.meta()).exists());
    let (listed, _) = snapshots.page(None, None, 0);
    assert_eq!(listed, vec![whole]);
}
