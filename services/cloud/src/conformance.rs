//! The provider conformance suite: one set of checks, written against the traits, that
//! every provider must pass. A provider crate runs it from its tests against its cloud
//! (a real one where it runs here, else its simulator):
//!
//! ```ignore
//! overcast_cloud::conformance::disks(&DiskHarness { disks, node, gone_node, .. }).await;
//! overcast_cloud::conformance::instances(&*instances, &node).await;
//! ```
//!
//! Each check cleans up the disks it made, and panics naming the rule a provider broke.
//! Built only with the `conformance` feature (providers enable it for their tests).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{CloudError, Disk, DiskSpec, Disks, Instances, Zone};

/// A state a disk passes through on the cloud's side that a repeated create must see
/// through: only a disk the cloud says is usable answers a create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskState {
    /// Still being made (DVP `Provisioning`, zVirt `locked`, Cinder `creating`).
    Creating,
    /// Made, and the cloud says it failed (DVP `Pending`/`QuotaExceeded` or `Failed`,
    /// zVirt `illegal`, Cinder `error`).
    Failed,
    /// Being deleted (DVP `Terminating` held by a finalizer, zVirt `locked` on its way out,
    /// Cinder `deleting`, the local cloud's delete interrupted by a crash).
    Deleting,
}

/// Puts a disk of the cloud under test into a [`DiskState`], as the cloud itself would
/// (a test knob of a simulator, an admin call of a real cloud).
#[async_trait]
pub trait DiskStates: Send + Sync {
    /// Makes the cloud keep the next disk it makes named `name` on its way (`Creating`)
    /// until [`DiskStates::release`], so that the first create itself is interrupted.
    /// `false` where the cloud cannot (a real cloud: the disk is put back into
    /// `Creating` once made, as its admin API can).
    async fn hold_creates(&self, _name: &str) -> bool {
        false
    }
    /// Puts `disk` into `state` and keeps it there until [`DiskStates::release`];
    /// `false` when the cloud has no such state (the rule then says it was skipped).
    async fn enter(&self, disk: &Disk, state: DiskState) -> bool;
    /// Lets the cloud carry on: a disk `Creating` finishes, one `Deleting` goes.
    async fn release(&self, disk: &Disk, state: DiskState);
}

/// What the suite needs to know about the cloud under test.
pub struct DiskHarness {
    pub disks: Arc<dyn Disks>,
    /// An instance disks can be attached to: the CSI node id of a node of this cloud
    /// (which is also the instance's node name, see `Instances`).
    pub node: String,
    /// A node id that names no instance of this cloud.
    pub gone_node: String,
    /// The zone disks are made in.
    pub zone: Zone,
    /// StorageClass parameters of a plain disk.
    pub parameters: BTreeMap<String, String>,
    /// Put before every name, so runs against a shared cloud do not meet.
    pub prefix: String,
    /// How the test puts disks into the cloud's in-between states; `None` where it
    /// cannot (a real cloud without an admin account): those rules say they were skipped.
    pub states: Option<Arc<dyn DiskStates>>,
    /// How long a repeated create is given while its disk is held in a state: longer
    /// than a poll, shorter than the provider's own wait (the CO's deadline).
    pub held_for: Duration,
}

impl DiskHarness {
    fn spec(&self, name: &str, size_bytes: u64) -> DiskSpec {
        DiskSpec {
            name: format!("{}{name}", self.prefix),
            size_bytes,
            zone: self.zone.clone(),
            parameters: self.parameters.clone(),
            metadata: BTreeMap::new(),
            source: None,
        }
    }

    fn unit(&self) -> u64 {
        self.disks.size_granularity().max(1 << 20)
    }

    /// Retries what a provider says can be retried (Busy, Conflict, outages), the way
    /// the CSI sidecars do, for a bounded time.
    async fn retry<T, F, Fut>(&self, what: &str, mut call: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = crate::Result<T>>,
    {
        let mut last = None;
        for _ in 0..200 {
            match call().await {
                Ok(v) => return v,
                Err(e) if e.is_retryable() => last = Some(e),
                Err(e) => panic!("{what}: {e:?} (not retryable)"),
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{what}: still failing after retries: {last:?}")
    }

    async fn cleanup(&self, disk: &Disk) {
        let _ = self.disks.detach_disk(&disk.id, &self.node).await;
        match self.disks.delete_disk(&disk.id).await {
            Ok(()) | Err(CloudError::NotFound { .. }) => {}
            Err(e) => panic!("clean up disk {}: {e:?}", disk.id),
        }
    }
}

/// Every disk rule, in turn.
pub async fn disks(h: &DiskHarness) {
    create_is_idempotent_by_name(h).await;
    concurrent_creates_of_one_name_make_one_disk(h).await;
    attach_and_detach_are_idempotent(h).await;
    attach_to_a_gone_instance_is_not_found(h).await;
    an_attached_disk_is_not_deleted(h).await;
    expand_never_shrinks(h).await;
    delete_is_final_and_unknown_ids_are_not_found(h).await;
    list_names_every_disk_once(h).await;
    a_create_repeated_while_the_disk_is_being_made_waits_for_it(h).await;
    a_create_repeated_after_the_disk_failed_is_not_ok_and_leaves_nothing(h).await;
    a_disk_being_deleted_is_not_created(h).await;
}

/// Says a rule was skipped past the test harness's capture (as `print!` would not), so
/// every CI log shows it.
fn say_skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

/// The states a rule needs, or `None` after saying the rule was skipped.
fn states<'a>(h: &'a DiskHarness, rule: &str) -> Option<&'a dyn DiskStates> {
    let states = h.states.as_deref();
    if states.is_none() {
        say_skipped(&format!(
            "conformance rule {rule}: the harness cannot put disks into the cloud's states"
        ));
    }
    states
}

/// A disk made and put into `state` for `rule`: `None` (said SKIPPED) where the harness
/// or the cloud has no such state.
async fn made_in<'a>(
    h: &'a DiskHarness,
    rule: &str,
    name: &str,
    state: DiskState,
) -> Option<(&'a dyn DiskStates, DiskSpec, Disk)> {
    let states = states(h, rule)?;
    let spec = h.spec(name, h.unit());
    let disk = h.disks.create_disk(spec.clone()).await.expect("create");
    if !states.enter(&disk, state).await {
        no_such_state(h, &disk, rule).await;
        return None;
    }
    Some((states, spec, disk))
}

async fn no_such_state(h: &DiskHarness, disk: &Disk, rule: &str) {
    say_skipped(&format!(
        "conformance rule {rule}: this cloud has no such state"
    ));
    h.cleanup(disk).await;
}

/// A create given `h.held_for`: `None` when it had not answered by then.
async fn create_within(h: &DiskHarness, spec: &DiskSpec) -> Option<crate::Result<Disk>> {
    tokio::time::timeout(h.held_for, h.disks.create_disk(spec.clone()))
        .await
        .ok()
}

/// The disk the name now answers with: one, healthy, and attachable.
async fn assert_usable(h: &DiskHarness, spec: &DiskSpec, rule: &str) -> Disk {
    let disk = h.retry(rule, || h.disks.create_disk(spec.clone())).await;
    let seen = h.disks.disk(&disk.id).await.expect("get");
    assert_eq!(
        seen.condition,
        crate::DiskCondition::Healthy,
        "{rule}: {seen:?}"
    );
    let named = h
        .disks
        .list_disks()
        .await
        .expect("list")
        .into_iter()
        .filter(|d| d.name == spec.name)
        .count();
    assert_eq!(
        named, 1,
        "{rule}: one disk carries the name, nothing left behind"
    );
    h.retry(rule, || h.disks.attach_disk(&disk.id, &h.node, false))
        .await;
    h.retry(rule, || h.disks.detach_disk(&disk.id, &h.node))
        .await;
    disk
}

/// A create repeated while the disk is still being made (the CO's own deadline is
/// shorter than the cloud's provisioning) does not answer OK until the cloud says the
/// disk is usable: it waits, and answers a retryable code when its time is up. Released
/// while a repeat waits, the repeat answers the same disk.
pub async fn a_create_repeated_while_the_disk_is_being_made_waits_for_it(h: &DiskHarness) {
    const RULE: &str = "a create repeated while the disk is being made waits for it";
    let Some(states) = states(h, RULE) else {
        return;
    };
    let spec = h.spec("making", h.unit());
    let disk = if states.hold_creates(&spec.name).await {
        match create_within(h, &spec).await {
            None => {}
            Some(Err(e)) if e.is_retryable() => {}
            other => {
                panic!("{RULE}: the first create of a disk still being made answered {other:?}")
            }
        }
        h.disks
            .disk_by_name(&spec.name)
            .await
            .expect("by name")
            .unwrap_or_else(|| panic!("{RULE}: the interrupted create left no disk to find"))
    } else {
        let disk = h.disks.create_disk(spec.clone()).await.expect("create");
        if !states.enter(&disk, DiskState::Creating).await {
            return no_such_state(h, &disk, RULE).await;
        }
        disk
    };
    match create_within(h, &spec).await {
        None => {}
        Some(Err(e)) if e.is_retryable() => {}
        other => panic!("{RULE}: a repeat while the disk is being made answered {other:?}"),
    }
    let waiting = {
        let disks = Arc::clone(&h.disks);
        let spec = spec.clone();
        tokio::spawn(async move { disks.create_disk(spec).await })
    };
    tokio::time::sleep(h.held_for / 4).await;
    states.release(&disk, DiskState::Creating).await;
    match waiting.await.expect("create task") {
        Ok(d) => assert_eq!(
            d.id, disk.id,
            "{RULE}: the repeat answers the disk it waited for"
        ),
        Err(e) if e.is_retryable() => {}
        Err(e) => panic!("{RULE}: the waiting repeat failed for good: {e:?}"),
    }
    let usable = assert_usable(h, &spec, RULE).await;
    assert_eq!(usable.id, disk.id, "{RULE}: no second disk was made");
    h.cleanup(&usable).await;
}

/// A create repeated after the cloud said the disk failed is not OK: the failed disk is
/// removed and the failure answered, so a later retry makes a usable disk and nothing
/// failed is left behind.
pub async fn a_create_repeated_after_the_disk_failed_is_not_ok_and_leaves_nothing(h: &DiskHarness) {
    const RULE: &str = "a create repeated after the disk failed is not OK";
    let Some((states, spec, disk)) = made_in(h, RULE, "failed", DiskState::Failed).await else {
        return;
    };
    match create_within(h, &spec).await {
        Some(Err(_)) => {}
        other => panic!("{RULE}: a repeat after the disk failed answered {other:?}"),
    }
    states.release(&disk, DiskState::Failed).await;
    let usable = assert_usable(h, &spec, RULE).await;
    h.cleanup(&usable).await;
}

/// A disk being deleted is not "created": a repeat does not answer it (it waits for it to
/// go, or answers a retryable code), and once it is gone a retry makes a usable disk.
pub async fn a_disk_being_deleted_is_not_created(h: &DiskHarness) {
    const RULE: &str = "a disk being deleted is not created";
    let Some((states, spec, disk)) = made_in(h, RULE, "deleting", DiskState::Deleting).await else {
        return;
    };
    match create_within(h, &spec).await {
        None => {}
        Some(Err(e)) if e.is_retryable() => {}
        // A cloud that can finish the deletion itself (the local cloud's interrupted
        // delete) may make a new disk at once: never the one being deleted.
        Some(Ok(d)) => {
            let seen = h.disks.disk(&d.id).await.expect("get");
            assert_eq!(
                seen.condition,
                crate::DiskCondition::Healthy,
                "{RULE}: a repeat answered a disk being deleted: {seen:?}"
            );
        }
        Some(Err(e)) => panic!("{RULE}: a repeat while the disk is deleted failed for good: {e:?}"),
    }
    states.release(&disk, DiskState::Deleting).await;
    let usable = assert_usable(h, &spec, RULE).await;
    h.cleanup(&usable).await;
}

pub async fn create_is_idempotent_by_name(h: &DiskHarness) {
    let spec = h.spec("idem", h.unit());
    let first = h.disks.create_disk(spec.clone()).await.expect("create");
    assert_eq!(first.name, spec.name);
    assert!(first.size_bytes >= spec.size_bytes, "{first:?}");
    let again = h
        .disks
        .create_disk(spec.clone())
        .await
        .expect("create again");
    assert_eq!(
        again.id, first.id,
        "a create by the same name returns the same disk"
    );
    let by_name = h.disks.disk_by_name(&spec.name).await.expect("by name");
    assert_eq!(by_name.map(|d| d.id), Some(first.id.clone()));
    h.cleanup(&first).await;
}

pub async fn concurrent_creates_of_one_name_make_one_disk(h: &DiskHarness) {
    let spec = h.spec("race", h.unit());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let disks = Arc::clone(&h.disks);
        let spec = spec.clone();
        tasks.spawn(async move { disks.create_disk(spec).await });
    }
    let mut ids = Vec::new();
    let mut retry = 0;
    while let Some(r) = tasks.join_next().await {
        match r.expect("create task") {
            Ok(d) => ids.push(d.id),
            // Another create of the name is in flight: the caller retries.
            Err(e) if e.is_retryable() => retry += 1,
            Err(e) => panic!("a concurrent create failed for good: {e:?}"),
        }
    }
    for _ in 0..retry {
        let d = h
            .retry("create after a concurrent one", || {
                h.disks.create_disk(spec.clone())
            })
            .await;
        ids.push(d.id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "16 creates of one name made {ids:?}");
    let named: Vec<Disk> = h
        .disks
        .list_disks()
        .await
        .expect("list")
        .into_iter()
        .filter(|d| d.name == spec.name)
        .collect();
    assert_eq!(named.len(), 1, "one disk carries the name: {named:?}");
    h.cleanup(&named[0]).await;
}

pub async fn attach_and_detach_are_idempotent(h: &DiskHarness) {
    let disk = h
        .disks
        .create_disk(h.spec("attach", h.unit()))
        .await
        .expect("create");
    let first = h
        .retry("attach", || h.disks.attach_disk(&disk.id, &h.node, false))
        .await;
    assert_eq!(first.node, h.node);
    assert!(
        !first.publish_context.is_empty(),
        "an attachment tells the node how to find the device"
    );
    let again = h
        .retry("attach again", || {
            h.disks.attach_disk(&disk.id, &h.node, false)
        })
        .await;
    assert_eq!(
        again.publish_context, first.publish_context,
        "attaching an attached disk answers the same context"
    );
    let seen = h.disks.disk(&disk.id).await.expect("get");
    assert_eq!(
        seen.attachments.iter().filter(|a| a.node == h.node).count(),
        1,
        "{seen:?}"
    );
    for what in ["detach", "detach a detached disk"] {
        h.retry(what, || h.disks.detach_disk(&disk.id, &h.node))
            .await;
    }
    h.retry("detach from a gone instance", || {
        h.disks.detach_disk(&disk.id, &h.gone_node)
    })
    .await;
    let seen = h.disks.disk(&disk.id).await.expect("get");
    assert!(seen.attachments.is_empty(), "{seen:?}");
    h.cleanup(&disk).await;
}

pub async fn attach_to_a_gone_instance_is_not_found(h: &DiskHarness) {
    let disk = h
        .disks
        .create_disk(h.spec("gone", h.unit()))
        .await
        .expect("create");
    match h.disks.attach_disk(&disk.id, &h.gone_node, false).await {
        Err(CloudError::NotFound { .. }) => {}
        other => panic!("attach to a node that names no instance: {other:?}"),
    }
    assert!(!h
        .disks
        .node_exists(&h.gone_node)
        .await
        .expect("node_exists"));
    assert!(h.disks.node_exists(&h.node).await.expect("node_exists"));
    h.cleanup(&disk).await;
}

pub async fn an_attached_disk_is_not_deleted(h: &DiskHarness) {
    let disk = h
        .disks
        .create_disk(h.spec("busy", h.unit()))
        .await
        .expect("create");
    h.retry("attach", || h.disks.attach_disk(&disk.id, &h.node, false))
        .await;
    match h.disks.delete_disk(&disk.id).await {
        Err(CloudError::FailedPrecondition(_) | CloudError::InUse(_)) => {}
        other => panic!("delete of an attached disk: {other:?}"),
    }
    h.disks
        .disk(&disk.id)
        .await
        .expect("the disk is still there");
    h.cleanup(&disk).await;
}

pub async fn expand_never_shrinks(h: &DiskHarness) {
    let unit = h.unit();
    let disk = h
        .disks
        .create_disk(h.spec("grow", unit))
        .await
        .expect("create");
    let grown = h
        .retry("expand", || h.disks.expand_disk(&disk.id, 3 * unit))
        .await;
    assert!(grown >= 3 * unit, "expand to {} gave {grown}", 3 * unit);
    let smaller = h
        .retry("expand to less", || h.disks.expand_disk(&disk.id, unit))
        .await;
    assert_eq!(smaller, grown, "an expand to less keeps the size");
    let seen = h.disks.disk(&disk.id).await.expect("get");
    assert_eq!(seen.size_bytes, grown);
    h.cleanup(&disk).await;
}

pub async fn delete_is_final_and_unknown_ids_are_not_found(h: &DiskHarness) {
    let disk = h
        .disks
        .create_disk(h.spec("delete", h.unit()))
        .await
        .expect("create");
    h.retry("delete", || h.disks.delete_disk(&disk.id)).await;
    match h.disks.delete_disk(&disk.id).await {
        Ok(()) | Err(CloudError::NotFound { .. }) => {}
        other => panic!("delete of a deleted disk: {other:?}"),
    }
    for id in [disk.id.as_str(), "../../etc/passwd", "", "vol-/x"] {
        match h.disks.disk(id).await {
            Err(CloudError::NotFound { .. }) => {}
            other => panic!("get of {id:?}: {other:?}"),
        }
    }
    assert!(h
        .disks
        .disk_by_name(&disk.name)
        .await
        .expect("by name")
        .is_none());
}

pub async fn list_names_every_disk_once(h: &DiskHarness) {
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(
            h.disks
                .create_disk(h.spec(&format!("list-{i}"), h.unit()))
                .await
                .expect("create"),
        );
    }
    let listed = h.disks.list_disks().await.expect("list");
    for d in &made {
        assert_eq!(
            listed.iter().filter(|l| l.id == d.id).count(),
            1,
            "disk {} listed once",
            d.id
        );
    }
    let mut ids: Vec<&str> = listed.iter().map(|d| d.id.as_str()).collect();
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "no disk listed twice");
    for d in &made {
        h.cleanup(d).await;
    }
}

/// The instance rules: the node a CSI node plugin reports (`node`) is an instance whose
/// node name it is, listed once, with a providerID of the provider's scheme; looking a
/// node up by name or by providerID finds the same instance — by every providerID form
/// the provider's upstream writes for it, so that no spelling of a live instance is ever
/// taken for one that is gone; and a providerID the provider cannot read is an error,
/// never "not listed".
pub async fn instances(instances: &dyn Instances, node: &str) {
    let all = instances.list_instances().await.expect("list instances");
    let mine: Vec<_> = all.iter().filter(|i| i.node_name == node).collect();
    assert_eq!(mine.len(), 1, "node {node} is one instance: {all:?}");
    let me = mine[0];
    let scheme = format!("{}://", instances.provider_name());
    assert!(
        me.provider_id.starts_with(&scheme),
        "providerID {} has the scheme {scheme}",
        me.provider_id
    );
    let index = crate::InstanceIndex::new(instances, &all);
    let by_name = index
        .find(node, None)
        .expect("a lookup by name answers")
        .expect("found by name");
    assert_eq!(by_name, me);
    let forms = instances.upstream_forms(me);
    assert!(forms.contains(&me.provider_id), "{forms:?}");
    for form in &forms {
        let by_id = index
            .find("renamed", Some(form))
            .unwrap_or_else(|e| panic!("providerID {form:?} of a live instance: {e}"))
            .unwrap_or_else(|| panic!("providerID {form:?} of a live instance is not found"));
        assert_eq!(by_id, me, "{form}");
    }
    for unreadable in [scheme.clone(), "no-such-scheme://x".to_owned()] {
        assert!(
            index.find("renamed", Some(&unreadable)).is_err(),
            "{unreadable:?} is an error, not an absent instance"
        );
    }
    let mut ids: Vec<&str> = all.iter().map(|i| i.provider_id.as_str()).collect();
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "no instance listed twice");
}
