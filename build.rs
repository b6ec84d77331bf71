//! Compiles everything under `proto/` into Rust with tonic + prost.
//!
//! The descriptors come from `protox`, a protobuf compiler written in Rust, so the
//! build needs neither a system `protoc` nor the network.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let mut files = Vec::new();
    collect_protos(&root, &mut files)?;
    files.sort();
    // Relative to the package root, as cargo reads them: an absolute path would name this
    // checkout's files, and a build of the same target directory from another checkout
    // (CI's fresh clones, .ci/sources.py) would watch the old checkout's.
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    println!("cargo:rerun-if-changed=proto");
    for f in &files {
        let rel = f.strip_prefix(&manifest).unwrap_or(f);
        println!("cargo:rerun-if-changed={}", rel.display());
    }

    let fds = protox::compile(&files, [&root])?;
    // Kept for the wire test that pins every field number.
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("descriptors.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // RPCs a service does not implement answer UNIMPLEMENTED, as the spec asks.
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
