//! A test beside ours, as the lanes run them: a loop device with a filesystem mounted in
//! this machine's mount namespace. A mount namespace one of our tests makes (node-b, a
//! controller in a namespace of its own) copies it; the neighbour must still be able to let
//! its disk go once it has unmounted it here (CI: node-b's copy kept two zVirt program
//! tests' devices busy, and both failed).

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct NeighbourMount {
    dir: tempfile::TempDir,
    device: String,
    mounted: bool,
}

impl NeighbourMount {
    /// A 16 MiB sparse file on a loop device, ext4, mounted in a temporary directory.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("overcast-it-neighbour-")
            .tempdir()
            .unwrap();
        let file = dir.path().join("disk.img");
        std::fs::File::create(&file)
            .and_then(|f| f.set_len(16 << 20))
            .unwrap();
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {out:?}");
        let device = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let mut neighbour = Self {
            dir,
            device,
            mounted: false,
        };
        run(Command::new("mkfs.ext4").args(["-q", &neighbour.device]));
        let at = neighbour.mount_point();
        std::fs::create_dir_all(&at).unwrap();
        run(Command::new("mount").arg(&neighbour.device).arg(&at));
        neighbour.mounted = true;
        neighbour
    }

    fn mount_point(&self) -> PathBuf {
        self.dir.path().join("mounted")
    }

    /// Unmounts it here, then whether its device can be opened exclusively (no mount of
    /// it left anywhere) within `wait`.
    pub fn unmounted_is_free(&mut self, wait: Duration) -> bool {
        run(Command::new("umount").arg(self.mount_point()));
        self.mounted = false;
        let deadline = Instant::now() + wait;
        loop {
            let free = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_EXCL)
                .open(&self.device)
                .is_ok();
            if free || Instant::now() >= deadline {
                return free;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Default for NeighbourMount {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NeighbourMount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.mount_point())
                .status();
        }
        // Still held somewhere, the kernel lets it go when the holder does.
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

fn run(command: &mut Command) {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{command:?}: {out:?}");
}
