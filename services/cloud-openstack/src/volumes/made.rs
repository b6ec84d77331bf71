//! What Cinder makes and the provider waits on, a snapshot or a backup: the first answer
//! of a create, and a delete carried to its end.

use std::time::{Duration, Instant};

use super::*;

/// How long a CreateSnapshot waits for Cinder before answering `ready_to_use: false`
/// (the fake and LVM backends finish in a second or two; a Ceph one in about as long).
const FIRST_ANSWER: Duration = Duration::from_secs(10);

/// A snapshot or a backup, as far as waiting on it goes.
pub(super) trait Made {
    fn status(&self) -> &str;
}

/// Polls what Cinder is making (`fetch` asks for it again) for [`FIRST_ANSWER`] at most:
/// the first answer in which it is no longer on its way (`available`, `error`, being
/// deleted), or the last one when Cinder takes longer. `None`: it was deleted meanwhile.
pub(super) async fn first_answer<T, Fut>(mut now: T, fetch: impl Fn() -> Fut) -> Result<Option<T>>
where
    T: Made,
    Fut: std::future::Future<Output = Result<T>>,
{
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        let settled = matches!(
            now.status(),
            "available" | "error" | "deleting" | "error_deleting"
        );
        if settled || started.elapsed() + delay > FIRST_ANSWER {
            return Ok(Some(now));
        }
        tokio::time::sleep(delay).await;
        delay = (delay + Duration::from_millis(100)).min(Duration::from_millis(500));
        now = match fetch().await {
            Ok(t) => t,
            Err(CloudError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
    }
}

/// One delete: what is deleted, and how Cinder and an operator name it.
pub(super) struct Deletion<'a> {
    pub kind: &'static str,
    pub id: &'a str,
    /// The request's name in the metrics.
    pub call: &'static str,
    pub path: String,
    /// The operator's command that takes an `error_deleting` one back.
    pub reset: &'static str,
}

impl CinderDisks {
    /// Deletes what `now` is (as Cinder last said) and waits until Cinder no longer knows
    /// it. Cinder takes a DELETE only of one `available` or `error`: one still being made
    /// or restored is FAILED_PRECONDITION (a later retry is answered), one `deleting` is
    /// waited for, one its backend failed to delete before (`error_deleting`) stays until
    /// an operator resets it. Cinder marks it `deleting` before it answers; its backend
    /// then removes it, leaves it `error_deleting`, or puts it back: `kept` says why.
    pub(super) async fn delete_made<T, Fut>(
        &self,
        d: Deletion<'_>,
        now: T,
        fetch: impl Fn() -> Fut,
        kept: impl Fn(&T) -> CloudError,
    ) -> Result<()>
    where
        T: Made,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let Deletion {
            kind,
            id,
            call,
            path,
            reset,
        } = d;
        match now.status() {
            "error_deleting" => {
                return Err(CloudError::Internal(format!(
                    "openstack: Cinder failed to delete {kind} {id} before (error_deleting); \
                     it is deleted once an operator resets its state ({reset})"
                )))
            }
            "deleting" => {}
            _ => {
                let resp = self
                    .os
                    .call(
                        Service::BlockStorage,
                        call,
                        Method::DELETE,
                        &path,
                        None,
                        None,
                    )
                    .await?;
                match resp.status.as_u16() {
                    202 | 204 => {}
                    // Not always about the object: Cinder answers a backup's DELETE 404
                    // "Service cinder-backup could not be found." while no backup
                    // service of its zone is up, the backup still there. Only Cinder's
                    // own word on the object says it is gone.
                    404 => {
                        return Err(match fetch().await {
                            Err(CloudError::NotFound { .. }) => CloudError::not_found(kind, id),
                            Ok(_) => CloudError::Unavailable(format!(
                                "{}; {kind} {id} is still there, and is asked again",
                                unexpected(call, &resp)
                            )),
                            Err(e) => e,
                        })
                    }
                    400 => {
                        return Err(CloudError::FailedPrecondition(format!(
                            "{}",
                            unexpected(call, &resp)
                        )))
                    }
                    _ => return Err(unexpected(call, &resp)),
                }
            }
        }
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            let now = match fetch().await {
                Err(CloudError::NotFound { .. }) => return Ok(()),
                r => r?,
            };
            match now.status() {
                "deleting" => {}
                "error_deleting" => {
                    return Err(CloudError::Internal(format!(
                        "openstack: Cinder failed to delete {kind} {id} (error_deleting)"
                    )))
                }
                _ => return Err(kept(&now)),
            }
            if started.elapsed() + delay > self.waits.deleted {
                return Err(CloudError::DeadlineExceeded(format!(
                    "openstack: {kind} {id} is still deleting after {:?}",
                    self.waits.deleted
                )));
            }
            tokio::time::sleep(delay).await;
            delay = if started.elapsed() < Duration::from_secs(10) {
                (delay + Duration::from_millis(100)).min(Duration::from_millis(500))
            } else {
                Duration::from_secs(2)
            };
        }
    }
}
