//! overcastctl against the real driver: a whole volume lifecycle through the CLI alone,
//! JSON output parsed, errors carried in exit codes and text.

use std::path::Path;
use std::process::Command;

use overcast_integration::*;
use serde_json::Value;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn ctl(socket: &Path, args: &[&str]) -> Out {
    let out = Command::new(binary("overcastctl"))
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .args(args)
        .output()
        .expect("run overcastctl");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ok(socket: &Path, args: &[&str]) -> String {
    let out = ctl(socket, args);
    assert_eq!(out.code, 0, "overcastctl {args:?}: {}", out.stderr);
    out.stdout
}

fn json(socket: &Path, args: &[&str]) -> Value {
    let mut all = vec!["-o", "json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(socket, &all)).expect("JSON output")
}

#[tokio::test]
async fn a_whole_volume_lifecycle_through_the_cli() {
    let csi = Csi::start(&[]).await;
    let s = csi.socket.as_path();
    let root = csi.dir.path().join("quickstart");
    let staging = root.join("staging");
    let target = root.join("target");
    std::fs::create_dir_all(&staging).unwrap();

    let info = json(s, &["identity", "info"]);
    assert_eq!(info["name"], "local.csi.overcast.dev");
    assert_eq!(json(s, &["identity", "probe"])["ready"], true);
    let caps = json(s, &["controller", "capabilities"]);
    assert!(caps
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "CREATE_DELETE_VOLUME"));

    let created = json(
        s,
        &[
            "controller",
            "create",
            "demo",
            "--size",
            "32Mi",
            "--fs",
            "ext4",
        ],
    );
    let id = created["volume_id"].as_str().unwrap().to_owned();
    assert_eq!(created["capacity_bytes"], 32 << 20);
    assert_eq!(
        ok(s, &["-q", "controller", "create", "demo", "--size", "32Mi"]).trim(),
        id,
        "idempotent, and -q prints the id"
    );

    let ctx = ok(s, &["-q", "controller", "publish", &id, "--node", NODE_ID]);
    assert!(ctx.contains("devicePath=/dev/loop"), "{ctx}");
    let ctx = ctx.trim();
    ok(
        s,
        &[
            "node",
            "stage",
            &id,
            "--staging",
            staging.to_str().unwrap(),
            "--fs",
            "ext4",
            "--context",
            ctx,
        ],
    );
    ok(
        s,
        &[
            "node",
            "publish",
            &id,
            "--staging",
            staging.to_str().unwrap(),
            "--target",
            target.to_str().unwrap(),
            "--fs",
            "ext4",
        ],
    );
    std::fs::write(target.join("hello.txt"), b"hello from the quickstart").unwrap();

    let stats = json(
        s,
        &["node", "stats", &id, "--path", target.to_str().unwrap()],
    );
    assert_eq!(stats["condition"]["abnormal"], false);
    assert_eq!(stats["usage"][0]["unit"], "BYTES");
    assert!(stats["usage"][0]["total"].as_i64().unwrap() > 16 << 20);

    let listed = json(s, &["controller", "list"]);
    assert_eq!(listed["entries"][0]["volume_id"], id.as_str());
    assert_eq!(listed["entries"][0]["published_node_ids"][0], NODE_ID);
    let table = ok(s, &["controller", "list"]);
    assert!(
        table.starts_with("VOLUME") && table.contains(&id),
        "{table}"
    );
    // Each volume's name (CreateVolume's), from the volume context.
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[1], "NAME", "{table}");
    let row = table.lines().find(|l| l.contains(&id)).unwrap();
    assert_eq!(row.split_whitespace().nth(1), Some("demo"), "{table}");

    ok(
        s,
        &[
            "node",
            "unpublish",
            &id,
            "--target",
            target.to_str().unwrap(),
        ],
    );
    ok(
        s,
        &[
            "node",
            "unstage",
            &id,
            "--staging",
            staging.to_str().unwrap(),
        ],
    );
    ok(s, &["controller", "unpublish", &id, "--node", NODE_ID]);
    ok(s, &["controller", "delete", &id]);
    assert!(!target.exists());
    assert_eq!(
        json(s, &["controller", "list"])["entries"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert!(csi.loops().is_empty() && csi.all_disk_dir_files().is_empty());
}

#[tokio::test]
async fn errors_carry_the_grpc_code_in_exit_status_and_text() {
    let csi = Csi::start(&[]).await;
    let s = csi.socket.as_path();
    let missing = ctl(
        s,
        &["controller", "get", "vol-0123456789abcdef0123456789abcdef"],
    );
    assert_eq!(missing.code, 5);
    assert!(
        missing.stderr.starts_with("error: NOT_FOUND: "),
        "{}",
        missing.stderr
    );
    let invalid = ctl(s, &["controller", "create", "x", "--fs", "ntfs"]);
    assert_eq!(invalid.code, 3);
    assert!(
        invalid.stderr.contains("INVALID_ARGUMENT") && invalid.stderr.contains("ntfs"),
        "{}",
        invalid.stderr
    );
    let usage = ctl(s, &["controller", "create"]);
    assert_eq!(usage.code, 64, "a command line that does not parse");
    let size = ctl(s, &["controller", "create", "x", "--size", "12XB"]);
    assert_eq!(size.code, 64);
    let missing = csi.dir.path().join("nobody.sock");
    let nobody = ctl(&missing, &["identity", "probe"]);
    assert_eq!(nobody.code, 14, "no driver: UNAVAILABLE; {}", nobody.stderr);
    assert!(
        nobody.stderr.contains("UNAVAILABLE")
            && nobody.stderr.contains(&missing.display().to_string()),
        "the socket it could not reach is named: {}",
        nobody.stderr
    );
    assert!(ok(s, &["--help"]).contains("identity"));
}
