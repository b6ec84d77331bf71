//! vSphere tasks: a method ending in `_Task` (and every CNS call) answers a Task at
//! once; its `info.state` goes `queued` → `running` → `success` (with `info.result`) or
//! `error` (with `info.error`, a fault typed as any other).

use std::time::{Duration, Instant};

use overcast_cloud::CloudError;

use crate::inventory::properties;
use crate::session::Vcenter;
use crate::soap::{fault_error, Fault, Moref};
use crate::xml::Element;

/// Why a task gave no result: it ended in error (what it was to do was not done; a retry
/// decides afresh), or it could not be read (it may be running, or done: a retry reads it
/// again). A task vCenter no longer knows is `Unread(NotFound)`.
#[derive(Debug)]
pub enum TaskError {
    Failed(CloudError),
    Unread(CloudError),
}

impl From<TaskError> for CloudError {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::Failed(e) | TaskError::Unread(e) => e,
        }
    }
}

/// Waits for `task` (polling, from 100 ms doubling to 2 s) at most `limit`; its result
/// element on success (`None` when it has none). Running out of time is
/// `Unread(DeadlineExceeded)`: the task may still finish, and the caller's retry reads it.
pub async fn wait(
    vc: &Vcenter,
    task: &Moref,
    what: &str,
    limit: Duration,
) -> Result<Option<Element>, TaskError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        let p = properties(vc, task, &["info"])
            .await
            .map_err(TaskError::Unread)?;
        let info = p.get("info").cloned().unwrap_or_default();
        match info.text_at(&["state"]).unwrap_or_default() {
            "success" => return Ok(info.child("result").cloned()),
            "error" => {
                let e = info.child("error");
                let fault = Fault {
                    kind: e
                        .and_then(|e| e.child("fault"))
                        .and_then(|f| f.xsi_type.clone())
                        .unwrap_or_default(),
                    message: e
                        .and_then(|e| e.text_at(&["localizedMessage"]))
                        .unwrap_or_default()
                        .to_owned(),
                    object: e.and_then(|e| e.at(&["fault", "obj"])).and_then(Moref::of),
                };
                return Err(TaskError::Failed(fault_error(vc.server(), what, &fault)));
            }
            _ => {}
        }
        if started.elapsed() + delay > limit {
            return Err(TaskError::Unread(CloudError::DeadlineExceeded(format!(
                "vsphere: {}: {what} ({task}) not finished after {limit:?}",
                vc.server()
            ))));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}
