//! Creates in flight. A CNS create is a task: the volume exists, and is found by name,
//! only once the task has succeeded — seconds later on a real vCenter. A create whose
//! caller gave up (the provisioner's deadline cancels the call) or whose process was
//! restarted leaves its task running; a retry that looked the name up and found nothing
//! would start a second create, and the first volume would be made and known to no one.
//! So a create's task is recorded before it is awaited — in memory, and as a file in the
//! controller's state directory (an emptyDir in the manifests, kept across the container's
//! restarts) — and a retry of that name waits for the recorded task instead.
//! vsphere-csi-driver keeps the same record in its CnsVolumeOperationRequest objects.
//!
//! Left open, as upstream leaves it: a process that dies between sending CnsCreateVolume
//! and reading its answer never learns the task.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::soap::Moref;

/// What a record file holds.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    name: String,
    task: String,
}

pub struct InFlight {
    dir: Option<PathBuf>,
    tasks: Mutex<HashMap<String, Moref>>,
}

impl InFlight {
    /// Records kept in `dir` as well as in memory (`None`: in memory only). Those an
    /// earlier process left in `dir` are read once, here: a name asked later is looked up
    /// in memory, so a ListVolumes of n volumes opens no file per volume. (One process
    /// owns the directory: the manifests give each controller pod its own emptyDir.)
    pub fn new(dir: Option<PathBuf>) -> Self {
        let tasks = dir.as_deref().map(Self::load).unwrap_or_default();
        Self {
            dir,
            tasks: Mutex::new(tasks),
        }
    }

    /// The records in `dir`; an unreadable one is skipped and said (its create is then
    /// found by name, as a create no record names).
    fn load(dir: &std::path::Path) -> HashMap<String, Moref> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return HashMap::new();
        };
        let mut tasks = HashMap::new();
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let read = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str::<Record>(&t).map_err(|e| e.to_string()));
            match read {
                Ok(r) => {
                    tasks.insert(r.name, Moref::new("Task", &r.task));
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "skipping an unreadable record")
                }
            }
        }
        tasks
    }

    /// A volume name is the caller's: the file is named by its SHA-256, never by it.
    fn path(&self, name: &str) -> Option<PathBuf> {
        let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        self.dir.as_ref().map(|d| d.join(format!("{hex}.json")))
    }

    /// The task of a create of `name` under way, if one was recorded.
    pub fn get(&self, name: &str) -> Option<Moref> {
        self.lock().get(name).cloned()
    }

    /// Records `task` as the create of `name`. A record that cannot be written to disk
    /// is kept in memory and said (the create goes on, as upstream's).
    pub fn record(&self, name: &str, task: &Moref) {
        self.lock().insert(name.to_owned(), task.clone());
        let Some(path) = self.path(name) else {
            return;
        };
        let record = Record {
            name: name.to_owned(),
            task: task.id.clone(),
        };
        let written = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(path.parent().unwrap_or(&path))?;
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec(&record)?)?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            tracing::warn!(volume = name, task = %task, error = %e, "the create in flight is recorded in memory only");
        }
    }

    /// The create of `name` ended (made, failed, or its task is gone).
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
        if let Some(path) = self.path(name) {
            let _ = std::fs::remove_file(path);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Moref>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_outlives_the_process_and_its_file_is_not_named_by_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let a = InFlight::new(Some(dir.path().to_owned()));
        let name = "../../etc/pvc-1";
        a.record(name, &Moref::new("Task", "task-42"));
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(files.len(), 1);
        assert!(
            files[0].len() == 64 + 5 && !files[0].contains("pvc"),
            "{files:?}"
        );
        // A new process reads it, and skips a record it cannot read.
        std::fs::write(dir.path().join("torn.json"), b"{\"name\": \"pvc-9\", \"ta").unwrap();
        let b = InFlight::new(Some(dir.path().to_owned()));
        std::fs::remove_file(dir.path().join("torn.json")).unwrap();
        assert_eq!(b.get(name), Some(Moref::new("Task", "task-42")));
        assert_eq!(b.get("pvc-2"), None);
        b.forget(name);
        assert_eq!(b.get(name), None);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Without a directory, memory only.
        let m = InFlight::new(None);
        m.record("pvc-3", &Moref::new("Task", "task-7"));
        assert_eq!(m.get("pvc-3"), Some(Moref::new("Task", "task-7")));
    }
}
