#!/usr/bin/env python3
"""What the last build in a kept target directory was built from, so a fresh clone rebuilds
only what changed.

Cargo takes a workspace crate's artefact as fresh when none of its source files is newer than
the artefact; it compares times, never contents, and a fresh clone's files are all new. So:

  sources.py record RECORD   writes, for every tracked file, its content's hash and its
                             modification time now (just before a build);
  sources.py restore RECORD  gives every tracked file whose content is the one RECORD names
                             the time it had then, and every other file the time now.

After `restore`, cargo sees the files it built from exactly as it saw them (what that build
found fresh or built stays fresh), and every changed, added or removed file as newer than
any artefact. Directories too, by the names of the tracked files and directories they hold:
a build script's `rerun-if-changed=<directory>` makes cargo take the newest time of every
entry under it, the directories' own included (a fresh clone's `proto/` was newer than the
last build, so overcast-api's build script ran again and every crate using it was rebuilt,
~300 s of clippy and build with nothing changed). The caller trusts RECORD only if nothing was built into the target directory
after it was written (another checkout's build would have made artefacts from other
contents): see .ci/run.

The record also names the checkout it was built from. A record of another checkout (a
fresh clone at another path) is trusted like one of this: cargo takes a workspace crate
at another path as fresh when its files' times are unchanged (checked), so nothing is
rebuilt because the path changed. That holds because no artefact keeps a checkout's path:
the tests find deploy/ and ../shared through CARGO_MANIFEST_DIR read when they run
(overcast_integration::package_dir), not `env!("CARGO_MANIFEST_DIR")` compiled in, which
cargo does not rebuild for — with it, a run read another clone's files (a test of deploy/
read the older clone's deploy/, and where that clone was gone, failed).
"""
import hashlib
import os
import subprocess
import sys
import time


def tracked():
    out = subprocess.run(["git", "ls-files", "-z"], check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and os.path.isfile(p)]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def directories(files):
    """Each directory holding tracked files (the root excepted, which no build watches),
    named with a trailing `/`, and a digest of the names of what it holds that is tracked:
    a file added or removed changes it."""
    held = {}
    for path in files:
        parts = path.split("/")
        for i in range(1, len(parts)):
            held.setdefault("/".join(parts[:i]) + "/", set()).add(parts[i])
    return {d: "d" + hashlib.sha256("\0".join(sorted(names)).encode()).hexdigest()
            for d, names in held.items()}


def record(dest):
    files = tracked()
    with open(dest + ".tmp", "w") as f:
        f.write(f"checkout 0 {os.getcwd()}\n")
        for path in files:
            # The path last: it may hold spaces.
            f.write(f"{digest(path)} {os.stat(path).st_mtime_ns} {path}\n")
        for path, h in directories(files).items():
            f.write(f"{h} {os.stat(path).st_mtime_ns} {path}\n")
    os.replace(dest + ".tmp", dest)


def restore(src):
    seen = {}
    checkout = None
    try:
        with open(src) as f:
            for line in f:
                h, mtime, path = line.rstrip("\n").split(" ", 2)
                if h == "checkout":
                    checkout = path
                else:
                    seen[path] = (h, int(mtime))
    except FileNotFoundError:
        pass
    # Another checkout's record serves as well: cargo takes a workspace crate at another
    # path as fresh when its files' times are the same, and no artefact holds the
    # checkout's path any more (the tests read CARGO_MANIFEST_DIR when they run).
    if seen and checkout != os.getcwd():
        print(f"the last build was of another checkout ({checkout or 'not named'}): its record serves this one")
    now = time.time_ns()
    kept = changed = 0
    files = tracked()
    for path in files:
        was = seen.get(path)
        if was and was[0] == digest(path) and was[1] < now:
            os.utime(path, ns=(was[1], was[1]))
            kept += 1
        else:
            os.utime(path, ns=(now, now))
            changed += 1
    # After the files: setting a file's time leaves its directory's alone.
    for path, h in directories(files).items():
        was = seen.get(path)
        if was and was[0] == h and was[1] < now:
            os.utime(path, ns=(was[1], was[1]))
            kept += 1
        else:
            os.utime(path, ns=(now, now))
            changed += 1
    print(f"{kept} files and directories as the last build saw them, {changed} new or changed")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "restore"):
        sys.exit("usage: sources.py record|restore RECORD")
    {"record": record, "restore": restore}[sys.argv[1]](sys.argv[2])
