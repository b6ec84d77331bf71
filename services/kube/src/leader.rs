//! Leader election on a `coordination.k8s.io/v1` Lease, as kube-controller-manager and
//! the upstream cloud-controller-managers do it (client-go's leaderelection): take the
//! lease when it is free or expired, renew it every retry period, and stop leading when a
//! renewal has not succeeded within the renew deadline. Every call is bounded by that
//! deadline: an API server that accepts the request and never answers (etcd stopped) must
//! not keep us leading past it, since after the lease duration another replica may take
//! the lease; the renew deadline is shorter than the lease duration for exactly that.

use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::Api;

/// What the lease's API calls fail with.
pub type Result<T, E = kube::Error> = std::result::Result<T, E>;

/// Why `hold` returned: the caller stops its controllers either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Another replica holds the lease now.
    Taken,
    /// No renewal succeeded within the renew deadline (the API server failed or hung).
    Deadline,
}

/// The ccm's Lease, unless `--leader-elect-lease-name` says otherwise (capi names its own).
pub const DEFAULT_LEASE_NAME: &str = "overcast-cloud-controller-manager";
/// Where that Lease lives, unless `--leader-elect-namespace` says otherwise.
pub const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";

#[derive(Debug, Clone)]
pub struct Election {
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Election {
    /// Takes the lease or renews it; `Ok(true)` when we hold it now.
    pub async fn try_acquire_or_renew(&self, api: &Api<Lease>) -> Result<bool> {
        let now = Timestamp::now();
        let existing = match api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(now, now, 0)),
                };
                return match api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                };
            }
            Some(l) => l,
        };
        let spec = existing.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0);
        let next = if holder == self.identity {
            let acquired = spec.acquire_time.map(|t| t.0).unwrap_or(now);
            self.spec(acquired, now, transitions)
        } else {
            let duration =
                SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
            let renewed = spec.renew_time.map(|t| t.0);
            let expired =
                renewed.is_none_or(|r| r.checked_add(duration).is_ok_and(|end| end < now));
            if !holder.is_empty() && !expired {
                return Ok(false);
            }
            self.spec(now, now, transitions + 1)
        };
        // Replace carries the resourceVersion we read: two contenders cannot both win.
        let lease = Lease {
            metadata: existing.metadata,
            spec: Some(next),
        };
        match api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up on a clean shutdown (client-go's ReleaseOnCancel): no holder,
    /// a one-second duration, so the next replica leads at its next attempt instead of
    /// after the lease duration. Only a lease we still hold is touched (the replace
    /// carries the resourceVersion we read); bounded by the renew deadline; the caller
    /// has stopped its controllers first.
    pub async fn release(&self, api: &Api<Lease>) {
        let attempt = async {
            let Some(existing) = api.get_opt(&self.name).await? else {
                return Ok::<bool, kube::Error>(false);
            };
            let spec = existing.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            let now = MicroTime(Timestamp::now());
            let lease = Lease {
                metadata: existing.metadata,
                spec: Some(LeaseSpec {
                    holder_identity: None,
                    lease_duration_seconds: Some(1),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: spec.lease_transitions,
                    ..Default::default()
                }),
            };
            api.replace(&self.name, &PostParams::default(), &lease)
                .await?;
            Ok(true)
        };
        match tokio::time::timeout(self.renew_deadline, attempt).await {
            Ok(Ok(true)) => tracing::info!(lease = %self.name, "lease released"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, lease = %self.name, "could not release the lease; it expires by itself")
            }
            Err(_) => {
                tracing::warn!(lease = %self.name, "releasing the lease did not answer in time; it expires by itself")
            }
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Waits until we lead. Each attempt is bounded by the renew deadline.
    pub async fn acquire(&self, api: &Api<Lease>) {
        loop {
            match tokio::time::timeout(self.renew_deadline, self.try_acquire_or_renew(api)).await {
                Ok(Ok(true)) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                    return;
                }
                Ok(Ok(false)) => tracing::debug!(lease = %self.name, "another replica leads"),
                Ok(Err(e)) => tracing::warn!(error = %e, "leader election"),
                Err(_) => tracing::warn!(
                    lease = %self.name,
                    "leader election: the API server did not answer within the renew deadline"
                ),
            }
            tokio::time::sleep(self.retry_period).await;
        }
    }

    /// Renews every retry period while we lead; returns as soon as leadership is lost: the
    /// lease was taken, or no renewal succeeded within the renew deadline of the last one
    /// that did (a renewal still waiting for its answer is abandoned at the deadline).
    pub async fn hold(&self, api: &Api<Lease>) -> Lost {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.retry_period).await;
            let left = self.renew_deadline.saturating_sub(renewed.elapsed());
            match tokio::time::timeout(left, self.try_acquire_or_renew(api)).await {
                Ok(Ok(true)) => renewed = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::error!(lease = %self.name, "another replica took the lease");
                    return Lost::Taken;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "lease renewal failed"),
                Err(_) => {
                    tracing::warn!(lease = %self.name, "lease renewal did not answer in time")
                }
            }
            if renewed.elapsed() >= self.renew_deadline {
                tracing::error!(
                    lease = %self.name,
                    deadline = ?self.renew_deadline,
                    "no renewal within the renew deadline: leadership lost"
                );
                return Lost::Deadline;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::{mock, serve, status_reply, Call};

    fn election() -> Election {
        Election {
            name: "overcast-ccm".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/overcast-ccm";

    fn lease(holder: &str, renewed_secs_ago: i64) -> serde_json::Value {
        let renewed = Timestamp::now()
            .checked_sub(SignedDuration::from_secs(renewed_secs_ago))
            .unwrap();
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "overcast-ccm", "namespace": "kube-system", "resourceVersion": "5"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": MicroTime(renewed), "leaseTransitions": 3}
        })
    }

    async fn attempt(calls: Vec<Call>) -> (bool, usize) {
        let (client, handle) = mock();
        let server = tokio::spawn(serve(handle, calls));
        let api: Api<Lease> = Api::namespaced(client, "kube-system");
        let won = election().try_acquire_or_renew(&api).await.unwrap();
        drop(api);
        (won, server.await.unwrap())
    }

    #[tokio::test]
    async fn a_missing_lease_is_created_and_held() {
        let calls = vec![
            Call::new("GET", PATH, status_reply(404, "NotFound")).status(404),
            Call::new(
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
                lease("me", 0),
            )
            .checking(|b| {
                assert_eq!(b["spec"]["holderIdentity"], "me");
                assert_eq!(b["spec"]["leaseDurationSeconds"], 15);
            }),
        ];
        assert_eq!(attempt(calls).await, (true, 2));
    }

    #[tokio::test]
    async fn a_live_lease_of_another_is_respected_an_expired_one_taken() {
        assert_eq!(
            attempt(vec![Call::new("GET", PATH, lease("other", 3))]).await,
            (false, 1)
        );
        let calls = vec![
            Call::new("GET", PATH, lease("other", 60)),
            Call::new("PUT", PATH, lease("me", 0)).checking(|b| {
                assert_eq!(b["spec"]["holderIdentity"], "me");
                assert_eq!(b["spec"]["leaseTransitions"], 4);
                assert_eq!(
                    b["metadata"]["resourceVersion"], "5",
                    "replace is guarded by the version read"
                );
            }),
        ];
        assert_eq!(attempt(calls).await, (true, 2));
    }

    #[tokio::test]
    async fn our_own_lease_is_renewed_and_a_lost_race_is_not_leadership() {
        let calls = vec![
            Call::new("GET", PATH, lease("me", 5)),
            Call::new("PUT", PATH, lease("me", 0))
                .checking(|b| assert_eq!(b["spec"]["leaseTransitions"], 3)),
        ];
        assert_eq!(attempt(calls).await, (true, 2));
        let calls = vec![
            Call::new("GET", PATH, lease("other", 60)),
            Call::new("PUT", PATH, status_reply(409, "Conflict")).status(409),
        ];
        assert_eq!(attempt(calls).await, (false, 2));
    }

    /// etcd stopped: the API server takes the renewal and never answers. Leadership must
    /// end at the renew deadline, not whenever the request gives up (42 s in issue 13).
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_never_answers_ends_leadership_at_the_deadline() {
        let (client, mut handle) = mock();
        let hang = tokio::spawn(async move {
            let mut unanswered = Vec::new();
            while let Some((_, reply)) = handle.next_request().await {
                unanswered.push(reply);
            }
        });
        let api: Api<Lease> = Api::namespaced(client, "kube-system");
        let started = tokio::time::Instant::now();
        let lost = tokio::time::timeout(Duration::from_secs(120), election().hold(&api))
            .await
            .expect("leadership outlived a hung API server");
        assert_eq!(lost, Lost::Deadline);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(10) && took < Duration::from_secs(11),
            "{took:?}"
        );
        hang.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn failed_renewals_within_the_deadline_keep_leadership_a_taken_lease_ends_it() {
        let (client, handle) = mock();
        let api: Api<Lease> = Api::namespaced(client, "kube-system");
        let calls = vec![
            // Two failures (8 s) and then a renewal: still the leader.
            Call::new("GET", PATH, status_reply(500, "InternalError")).status(500),
            Call::new("GET", PATH, status_reply(500, "InternalError")).status(500),
            Call::new("GET", PATH, status_reply(500, "InternalError")).status(500),
            Call::new("GET", PATH, lease("me", 8)),
            Call::new("PUT", PATH, lease("me", 0)),
            Call::new("GET", PATH, lease("other", 1)),
        ];
        let server = tokio::spawn(serve(handle, calls));
        assert_eq!(election().hold(&api).await, Lost::Taken);
        drop(api);
        assert_eq!(server.await.unwrap(), 6);
    }
}
