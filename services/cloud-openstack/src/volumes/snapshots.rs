//! Snapshots on OpenStack: a snapshot is a Cinder snapshot named after the CSI snapshot
//! (the VolumeSnapshotContent's `snapshot-<uid>`), carrying cinder-csi-plugin's cluster
//! metadata, description and the snapshotter's `csi.storage.k8s.io/volumesnapshot*` keys,
//! so the snapshots a switched cluster's cinder-csi-plugin made are listed and restored
//! here, and ours read the same to it.
//!
//! Where cinder-csi-plugin is fragile (kubernetes/cloud-provider-openstack at
//! c453fb7c, `controllerserver.go`), the rules here:
//! - an attached volume is snapshotted (`force`) unless the class says
//!   `force-create: "false"`: a VolumeSnapshot of a running pod's PVC is the common case,
//!   and cinder-csi's default (`force` false at microversion 3.0) fails it with Cinder's 400;
//! - `ready_to_use` is what Cinder says (`available`), answered as soon as Cinder is
//!   slower than a few seconds; the sidecar asks again (cinder-csi waits ~21 s, then
//!   answers INTERNAL, and answers `true` for any snapshot it lists by id);
//! - a snapshot Cinder put in `error` is deleted once Cinder says so again, and the create
//!   fails: the retry cuts a new one, no orphan is left;
//! - a delete Cinder's backend refuses (`SnapshotIsBusy`: volumes depend on it; Cinder puts
//!   the snapshot back to `available`) is FAILED_PRECONDITION, not success: the snapshot
//!   is still there and the sidecar asks again (cinder-csi answers OK and leaves it);
//! - a source volume that does not exist is NOT_FOUND (cinder-csi: INTERNAL).

use std::time::SystemTime;

use serde::Deserialize;

use super::made::{first_answer, Deletion, Made};
use super::*;

/// cinder-csi-plugin's snapshot class parameters (openstack_snapshots.go).
pub const FORCE_CREATE_PARAMETER: &str = "force-create";
pub const SNAPSHOT_TYPE_PARAMETER: &str = "type";
/// What cinder-csi-plugin writes as each snapshot's description (`snapshotDescription`).
pub(super) const SNAPSHOT_DESCRIPTION: &str = "Created by OpenStack Cinder CSI driver";

#[derive(Debug, Clone, Deserialize)]
pub struct CinderSnapshot {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub status: String,
    /// GiB: the source volume's size when it was cut.
    pub size: u64,
    pub volume_id: String,
    /// Naive ISO 8601 in UTC (`2019-03-11T16:24:34.469003`), as Cinder writes it.
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct OneSnapshot {
    snapshot: CinderSnapshot,
}

#[derive(Deserialize)]
struct ManySnapshots {
    snapshots: Vec<CinderSnapshot>,
}

impl Made for CinderSnapshot {
    fn status(&self) -> &str {
        &self.status
    }
}

impl CinderSnapshot {
    pub fn to_snapshot(&self) -> Snapshot {
        Snapshot {
            id: self.id.clone(),
            name: self.name.clone().unwrap_or_default(),
            source: self.volume_id.clone(),
            size_bytes: self.size * GIB,
            created: self
                .created_at
                .as_deref()
                .and_then(cinder_time)
                .unwrap_or(SystemTime::UNIX_EPOCH),
            ready: self.status == "available",
        }
    }
}

/// Cinder's `created_at`: naive (UTC) as Cinder writes it, or with an offset as a
/// front might.
pub(super) fn cinder_time(s: &str) -> Option<SystemTime> {
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Some(t.into());
    }
    let civil: jiff::civil::DateTime = s.parse().ok()?;
    let zoned = civil.to_zoned(jiff::tz::TimeZone::UTC).ok()?;
    Some(zoned.timestamp().into())
}

/// Whether a class asks for an attached volume to be snapshotted (`force`).
pub(super) fn force(parameters: &BTreeMap<String, String>) -> Result<bool> {
    match parameters.get(FORCE_CREATE_PARAMETER) {
        None => Ok(true),
        Some(v) => parse_bool(v).ok_or_else(|| {
            CloudError::InvalidArgument(format!(
                "snapshot class parameter {FORCE_CREATE_PARAMETER}: {v:?} is not a boolean"
            ))
        }),
    }
}

/// Go's `strconv.ParseBool`, which cinder-csi-plugin reads `force-create` with.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

pub(super) fn validate_snapshot_parameters(parameters: &BTreeMap<String, String>) -> Result<()> {
    for (k, v) in parameters {
        match k.as_str() {
            FORCE_CREATE_PARAMETER => {
                force(parameters)?;
            }
            SNAPSHOT_TYPE_PARAMETER => match v.as_str() {
                "" | "snapshot" | "backup" => {}
                other => {
                    return Err(CloudError::InvalidArgument(format!(
                        "snapshot class parameter type: {other:?} (cinder-csi-plugin's classes take \"snapshot\" or \"backup\")"
                    )))
                }
            },
            // cinder-csi-plugin's backup zone (a snapshot stays where its volume is).
            AVAILABILITY_PARAMETER => {}
            super::backups::BACKUP_MAX_DURATION_PARAMETER => super::backups::validate_max_duration(v)?,
            _ => {
                return Err(CloudError::InvalidArgument(format!(
                    "unknown snapshot class parameter {k:?} (OpenStack takes {FORCE_CREATE_PARAMETER}, {SNAPSHOT_TYPE_PARAMETER}, {AVAILABILITY_PARAMETER}, {})",
                    super::backups::BACKUP_MAX_DURATION_PARAMETER
                )))
            }
        }
    }
    Ok(())
}

impl CinderDisks {
    pub(super) async fn cinder_snapshot(&self, id: &str) -> Result<CinderSnapshot> {
        if !is_uuid(id) {
            return Err(CloudError::not_found("snapshot", id));
        }
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "snapshot_get",
                Method::GET,
                &format!("/snapshots/{id}"),
                None,
                None,
            )
            .await?;
        match resp.status.as_u16() {
            200 => Ok(json::<OneSnapshot>("snapshot_get", &resp)?.snapshot),
            404 => Err(CloudError::not_found("snapshot", id)),
            _ => Err(unexpected("snapshot_get", &resp)),
        }
    }

    /// Snapshots named `name` (Cinder filters by it; only the exact name counts).
    pub(super) async fn snapshots_named(&self, name: &str) -> Result<Vec<CinderSnapshot>> {
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "snapshot_list",
                Method::GET,
                &format!("/snapshots/detail?name={}", encode(name)),
                None,
                None,
            )
            .await?;
        if resp.status.as_u16() != 200 {
            return Err(unexpected("snapshot_list", &resp));
        }
        let mut found = json::<ManySnapshots>("snapshot_list", &resp)?.snapshots;
        found.retain(|s| s.name.as_deref() == Some(name));
        Ok(found)
    }

    pub(super) async fn create_snap(&self, spec: SnapshotSpec) -> Result<Snapshot> {
        validate_snapshot_parameters(&spec.parameters)?;
        if spec.name.is_empty() || spec.name.len() > 255 {
            return Err(CloudError::InvalidArgument(format!(
                "snapshot name of {} characters (Cinder takes 1 to 255)",
                spec.name.len()
            )));
        }
        let force = force(&spec.parameters)?;
        // Creates of one name are one at a time, as a volume's (the claims are shared, so
        // a snapshot's name is kept apart from a volume's of the same spelling). Busy says
        // what is being made: the claim's own words are a disk's.
        let _slot = self
            .creating
            .claim(&format!("snapshot/{}", spec.name))
            .map_err(|_| {
                CloudError::Busy(format!(
                    "a create of snapshot {:?} is in progress",
                    spec.name
                ))
            })?;
        let snapshot = match self.snapshots_named(&spec.name).await?.as_slice() {
            [] => {
                // The source first: Cinder's 404 for it reads as any other 404.
                let source = self.get(&spec.source).await.map_err(|e| match e {
                    CloudError::NotFound { .. } => CloudError::not_found("disk", &spec.source),
                    e => e,
                })?;
                self.cut(&spec, &source, force).await?
            }
            [one] if one.volume_id == spec.source => one.clone(),
            [one] => {
                return Err(CloudError::ParameterMismatch {
                    kind: "snapshot",
                    name: spec.name,
                    reason: format!("Cinder snapshot {} is of volume {}", one.id, one.volume_id),
                })
            }
            many => {
                return Err(CloudError::FailedPrecondition(format!(
                    "{} Cinder snapshots are named {:?}; which one is the snapshot is ambiguous",
                    many.len(),
                    spec.name
                )))
            }
        };
        let snapshot = self.until_cut(&snapshot).await?;
        Ok(snapshot.to_snapshot())
    }

    /// Asks Cinder for a snapshot of `source`.
    pub(super) async fn cut(
        &self,
        spec: &SnapshotSpec,
        source: &Volume,
        force: bool,
    ) -> Result<CinderSnapshot> {
        let mut metadata = spec.metadata.clone();
        metadata.insert(CLUSTER_METADATA.to_owned(), self.cluster.clone());
        let body = json!({"snapshot": {
            "volume_id": source.id,
            "name": spec.name,
            "description": SNAPSHOT_DESCRIPTION,
            "force": force,
            "metadata": metadata,
        }});
        let resp = self
            .os
            .call(
                Service::BlockStorage,
                "snapshot_create",
                Method::POST,
                "/snapshots",
                Some(&body),
                None,
            )
            .await?;
        match resp.status.as_u16() {
            200 | 202 => Ok(json::<OneSnapshot>("snapshot_create", &resp)?.snapshot),
            404 => Err(CloudError::not_found("disk", &source.id)),
            413 => Err(CloudError::ResourceExhausted(format!(
                "{}",
                unexpected("snapshot_create", &resp)
            ))),
            // The volume's state refuses it (in use without `force`, being made, being
            // extended): another attempt may be answered once it settles.
            400 => Err(CloudError::FailedPrecondition(format!(
                "{}{}",
                unexpected("snapshot_create", &resp),
                if force || source.status != "in-use" {
                    String::new()
                } else {
                    format!(
                        "; the volume is attached and the class says {FORCE_CREATE_PARAMETER}: \"false\""
                    )
                }
            ))),
            _ => Err(unexpected("snapshot_create", &resp)),
        }
    }

    /// Polls a snapshot being cut for [`FIRST_ANSWER`] at most: `available`, or how far it
    /// got when Cinder takes longer. One in `error` is deleted and the create fails.
    pub(super) async fn until_cut(&self, snapshot: &CinderSnapshot) -> Result<CinderSnapshot> {
        let Some(now) =
            first_answer(snapshot.clone(), || self.cinder_snapshot(&snapshot.id)).await?
        else {
            return Err(CloudError::Unavailable(format!(
                "openstack: snapshot {} was deleted while it was being cut; a retry cuts it again",
                snapshot.id
            )));
        };
        match now.status.as_str() {
            "error" => Err(self.remove_failed_snapshot(&now).await),
            "deleting" | "error_deleting" => Err(CloudError::Unavailable(format!(
                "openstack: snapshot {} named {:?} is {}; a retry cuts it again once it is gone",
                now.id,
                now.name.as_deref().unwrap_or_default(),
                now.status
            ))),
            _ => Ok(now),
        }
    }

    /// Deletes a snapshot Cinder says is in `error` once it says so again, and says why
    /// the create failed.
    async fn remove_failed_snapshot(&self, failed: &CinderSnapshot) -> CloudError {
        let why = format!(
            "openstack: Cinder could not cut snapshot {} of volume {}",
            failed.id, failed.volume_id
        );
        match self.cinder_snapshot(&failed.id).await {
            Ok(s) if s.status == "error" => {}
            _ => return CloudError::Internal(why),
        }
        let left = match self.delete_snap(&failed.id).await {
            Ok(()) | Err(CloudError::NotFound { .. }) => "deleted; a retry cuts it again",
            Err(_) => "its deletion failed; the next create retries it",
        };
        CloudError::Internal(format!("{why} ({left})"))
    }

    pub(super) async fn delete_snap(&self, id: &str) -> Result<()> {
        let s = self.cinder_snapshot(id).await?;
        // Its backend may put it back to `available` when volumes still depend on it
        // (`SnapshotIsBusy`).
        self.delete_made(
            Deletion {
                kind: "snapshot",
                id,
                call: "snapshot_delete",
                path: format!("/snapshots/{id}"),
                reset: "cinder snapshot-reset-state",
            },
            s,
            || self.cinder_snapshot(id),
            |s: &CinderSnapshot| {
                CloudError::FailedPrecondition(format!(
                    "openstack: Cinder kept snapshot {id} ({}): its backend refuses to delete a snapshot volumes still depend on",
                    s.status
                ))
            },
        )
        .await
    }

    /// At most `want` snapshots (of volume `source` when given) after `after`, in id
    /// order, page by page. `None`: Cinder no longer knows `after` (deleted since the
    /// page before).
    async fn snapshots_after(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        want: usize,
    ) -> Result<Option<Vec<CinderSnapshot>>> {
        let filter = match source {
            Some(v) => format!("&volume_id={}", encode(v)),
            None => String::new(),
        };
        let mut out: Vec<CinderSnapshot> = Vec::new();
        let mut marker: Option<String> = after.map(str::to_owned);
        loop {
            let limit = self.page.min(want - out.len());
            let mut path = format!("/snapshots/detail?limit={limit}&sort=id:asc{filter}");
            if let Some(m) = &marker {
                path.push_str(&format!("&marker={}", encode(m)));
            }
            let resp = self
                .os
                .call(
                    Service::BlockStorage,
                    "snapshot_list",
                    Method::GET,
                    &path,
                    None,
                    None,
                )
                .await?;
            match resp.status.as_u16() {
                200 => {}
                // An unknown marker: a 404 or a 400 by release.
                400 | 404 if out.is_empty() && after.is_some() && marker.as_deref() == after => {
                    return Ok(None)
                }
                _ => return Err(unexpected("snapshot_list", &resp)),
            }
            let page = json::<ManySnapshots>("snapshot_list", &resp)?.snapshots;
            let last = page.last().map(|s| s.id.clone());
            let full = page.len() >= limit;
            out.extend(page);
            if out.len() >= want {
                return Ok(Some(out));
            }
            match (full, last) {
                (true, Some(id)) if marker.as_ref() != Some(&id) => marker = Some(id),
                _ => return Ok(Some(out)),
            }
        }
    }

    /// One ListSnapshots page: `max + 1` snapshots after the token's from Cinder; the
    /// whole listing, paged here, when the token's snapshot is gone since.
    pub(super) async fn list_snaps_page(
        &self,
        source: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<Snapshot>, bool)> {
        if let Some(v) = source {
            if !is_uuid(v) {
                return Ok((Vec::new(), false));
            }
        }
        let want = if max == 0 {
            usize::MAX
        } else {
            max.saturating_add(1)
        };
        if let Some(mut found) = self.snapshots_after(source, after, want).await? {
            let more = max > 0 && found.len() > max;
            if max > 0 {
                found.truncate(max);
            }
            return Ok((
                found.iter().map(CinderSnapshot::to_snapshot).collect(),
                more,
            ));
        }
        let all: Vec<Snapshot> = self
            .snapshots_after(source, None, usize::MAX)
            .await?
            .unwrap_or_default()
            .iter()
            .map(CinderSnapshot::to_snapshot)
            .collect();
        Ok(page_of(all, |s| &s.id, after, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cinder_s_naive_times_are_utc() {
        let t = cinder_time("2019-03-11T16:24:34.469003").unwrap();
        let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(since.as_secs(), 1_552_321_474);
        assert_eq!(since.subsec_micros(), 469_003);
        assert_eq!(
            cinder_time("2019-03-11T16:24:34Z"),
            cinder_time("2019-03-11T16:24:34.000000")
        );
        assert_eq!(cinder_time("yesterday"), None);
    }

    #[test]
    fn classes_written_for_cinder_csi_are_taken_and_others_refused() {
        let class = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        for ok in [
            class(&[]),
            class(&[("force-create", "true")]),
            class(&[("force-create", "False"), ("type", "snapshot")]),
            class(&[("type", ""), ("availability", "nova")]),
            class(&[
                ("type", "backup"),
                ("backup-max-duration-seconds-per-gb", "40"),
            ]),
        ] {
            validate_snapshot_parameters(&ok).unwrap();
        }
        for bad in [
            class(&[("force-create", "yes")]),
            class(&[("type", "clone")]),
            class(&[("backup-max-duration-seconds-per-gb", "forty")]),
            class(&[("volumeType", "fast")]),
        ] {
            assert!(matches!(
                validate_snapshot_parameters(&bad),
                Err(CloudError::InvalidArgument(_))
            ));
        }
        assert!(force(&class(&[])).unwrap());
        assert!(!force(&class(&[("force-create", "0")])).unwrap());
    }
}
