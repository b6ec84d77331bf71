//! Waiting for a VirtualDisk the parent is provisioning, and recording where a bound
//! disk can be used.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use overcast_cloud::{CloudError, Result, Zone};
use serde_json::json;

use super::{condition_message, zone_annotations, zone_of, DvpDisks};
use crate::api::{self, VirtualDisk};
use crate::zones::{pv_zones, zones_of, ParentNode};

impl DvpDisks {
    /// Records where a disk that the parent has bound can be used: the zones of the
    /// parent nodes its PersistentVolume admits. The zone asked for is kept when it is
    /// one of them (or when that cannot be told: a topology narrower than the truth
    /// only restricts scheduling), another when the parent bound it elsewhere, none
    /// when every zone can use it (network storage). A disk waiting for its first
    /// consumer keeps the zone asked for: its first attachment, made in that zone,
    /// binds it there.
    pub(super) async fn settle_zone(&self, vd: VirtualDisk, asked: &Zone) -> Result<VirtualDisk> {
        let status = vd.status.clone().unwrap_or_default();
        if *asked == Zone::default() || status.phase.as_deref() != Some("Ready") {
            return Ok(vd);
        }
        let name = vd.name_any();
        let nodes = self.nodes.list(&self.parent).await?.unwrap_or_default();
        let Some(admitted) = self.bound_zones(&vd, &nodes).await? else {
            return Ok(vd);
        };
        let all = zones_of(&nodes);
        let zone = match admitted {
            None => Zone::default(),
            Some(zones) if zones == all => Zone::default(),
            Some(zones) if zones.contains(asked) => asked.clone(),
            Some(zones) => match zones.into_iter().next() {
                Some(z) => z,
                None => {
                    tracing::warn!(disk = %name, "its PersistentVolume admits no parent node with a zone: the zone asked for is kept");
                    asked.clone()
                }
            },
        };
        let annotations = vd.metadata.annotations.clone().unwrap_or_default();
        if zone_of(&annotations) == zone {
            return Ok(vd);
        }
        let patch = json!({"metadata": {"annotations": zone_annotations(&zone)}});
        self.parent
            .call(
                "virtualdisk_patch",
                &format!("record the zone of VirtualDisk {name}"),
                self.parent
                    .disks()
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await
    }

    /// The zones the PersistentVolume of a bound disk admits (`Some(None)`: any node;
    /// `None`: it cannot be told — no target PVC yet, or the account may not read it).
    async fn bound_zones(
        &self,
        vd: &VirtualDisk,
        nodes: &[ParentNode],
    ) -> Result<Option<Option<BTreeSet<Zone>>>> {
        let Some(claim) = vd
            .status
            .as_ref()
            .and_then(|s| s.target.as_ref())
            .and_then(|t| t.persistent_volume_claim_name.clone())
        else {
            return Ok(None);
        };
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.parent.client.clone(), &self.parent.namespace);
        let pvc = match self
            .parent
            .get_opt("persistentvolumeclaim_get", &claims, &claim)
            .await
        {
            Ok(Some(pvc)) => pvc,
            Ok(None) => return Ok(None),
            Err(CloudError::PermissionDenied(e)) => {
                tracing::warn!(error = %e, "the parent's PVCs cannot be read: volumes keep the zone asked for");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let Some(volume) = pvc.spec.and_then(|s| s.volume_name) else {
            return Ok(None);
        };
        let volumes: Api<PersistentVolume> = Api::all(self.parent.client.clone());
        let pv = match self
            .parent
            .get_opt("persistentvolume_get", &volumes, &volume)
            .await
        {
            Ok(Some(pv)) => pv,
            Ok(None) => return Ok(None),
            Err(CloudError::PermissionDenied(e)) => {
                tracing::warn!(error = %e, "the parent's PersistentVolumes cannot be read: volumes keep the zone asked for");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        Ok(Some(pv_zones(&pv, nodes)))
    }

    /// Waits until the VirtualDisk `name`, being deleted, is gone: `None` then, `Busy`
    /// while it is still there when the wait ends.
    pub(super) async fn wait_gone(&self, name: &str) -> Result<Option<VirtualDisk>> {
        match self
            .parent
            .wait(
                "virtualdisk",
                self.parent.disks(),
                name,
                self.waits.deleted,
                |o: Option<&VirtualDisk>| o.is_none(),
            )
            .await?
        {
            Some(_) => Ok(None),
            None => Err(CloudError::Busy(format!(
                "VirtualDisk {name} is still being deleted after {:?}; a retry makes it again once it is gone",
                self.waits.deleted
            ))),
        }
    }

    /// Waits until the disk is usable (see [`provisioning`]). A disk the parent will
    /// not provision is deleted and the reason answered; one being deleted is not
    /// waited for here (the create waits for it to go first).
    pub(super) async fn wait_ready(&self, name: &str) -> Result<VirtualDisk> {
        let settled = |o: Option<&VirtualDisk>| {
            o.is_none_or(|vd| !matches!(provisioning(vd), Provisioning::OnItsWay))
        };
        let waited = self
            .parent
            .wait(
                "virtualdisk",
                self.parent.disks(),
                name,
                self.waits.disk_ready,
                settled,
            )
            .await?;
        let vd = match waited {
            Some(Some(vd)) => vd,
            Some(None) => {
                return Err(CloudError::Unavailable(format!(
                    "VirtualDisk {name} disappeared while it was being provisioned; a retry makes it again"
                )))
            }
            None => {
                let now = self.get_disk(name).await?;
                let status = now.status.unwrap_or_default();
                return Err(CloudError::DeadlineExceeded(format!(
                    "VirtualDisk {name} is not Ready after {:?}: phase {}: {}",
                    self.waits.disk_ready,
                    status.phase.as_deref().unwrap_or("unset"),
                    condition_message(&status.conditions)
                )));
            }
        };
        match provisioning(&vd) {
            Provisioning::Usable => Ok(vd),
            Provisioning::OnItsWay => unreachable_wait(name),
            Provisioning::Going => Err(CloudError::Busy(format!(
                "VirtualDisk {name} is being deleted; a retry makes it again once it is gone"
            ))),
            Provisioning::Refused(refusal) => {
                // Ours, never attached, and the parent will not provision it: leave
                // nothing behind, only this very disk (a newer one of the name is not
                // ours to delete).
                let dp = DeleteParams {
                    preconditions: vd.metadata.uid.clone().map(|uid| kube::api::Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let deleted = self
                    .parent
                    .delete("virtualdisk_delete", &self.parent.disks(), name, &dp)
                    .await;
                let left = match deleted {
                    Ok(()) | Err(CloudError::NotFound { .. }) => "deleted",
                    Err(_) => "its deletion failed; the next create retries it",
                };
                Err(refusal.into_error(name, left))
            }
        }
    }
}

fn unreachable_wait(name: &str) -> Result<VirtualDisk> {
    Err(CloudError::Internal(format!(
        "VirtualDisk {name}: the wait ended on a disk still on its way"
    )))
}

/// Where a VirtualDisk is on its way to being usable, read as the virtualization
/// controller writes it (deckhouse/virtualization `vd` controller: `life_cycle.go`, the
/// blank source's steps, `storageclass_ready.go`).
#[derive(Debug, PartialEq)]
pub(super) enum Provisioning {
    /// Ready, or WaitForFirstConsumer (the parent's StorageClass binds on first use:
    /// the first attachment provisions it).
    Usable,
    /// Pending or Provisioning for a reason that passes (the PVC not bound yet, the
    /// datasource or StorageClass condition not written yet), Resizing, Migrating.
    OnItsWay,
    /// Being deleted (a deletion timestamp; the controller writes phase Terminating).
    Going,
    /// The parent will not provision it as it is.
    Refused(Refusal),
}

#[derive(Debug, PartialEq)]
pub(super) struct Refusal {
    kind: RefusalKind,
    why: String,
}

#[derive(Debug, PartialEq)]
enum RefusalKind {
    /// Ready=False `QuotaExceeded`: the project's quota refused the PVC (phase Pending
    /// for a blank disk, Failed for an imported one).
    Quota,
    /// Ready=False `StorageClassIsNotReady` with the StorageClassReady condition False
    /// for this generation (missing, terminating, deprecated or not allowed), or
    /// `StorageClassProvisionerMismatch`: the class asked for cannot make the disk.
    StorageClass,
    /// Failed, or PVCLost: its storage failed or is gone.
    Failed,
}

impl Refusal {
    fn into_error(self, name: &str, left: &str) -> CloudError {
        let msg = format!(
            "VirtualDisk {name} will not be provisioned ({left}): {}",
            self.why
        );
        match self.kind {
            RefusalKind::Quota => CloudError::ResourceExhausted(msg),
            RefusalKind::StorageClass => CloudError::InvalidArgument(msg),
            // Retryable: a new disk may well provision where this one failed.
            RefusalKind::Failed => CloudError::Internal(msg),
        }
    }
}

pub(super) fn provisioning(vd: &VirtualDisk) -> Provisioning {
    if vd.metadata.deletion_timestamp.is_some() {
        return Provisioning::Going;
    }
    let status = vd.status.clone().unwrap_or_default();
    let generation = vd.metadata.generation;
    let current = |c: &&api::Condition| {
        c.observed_generation.is_none()
            || generation.is_none()
            || c.observed_generation == generation
    };
    let condition = |type_: &str| {
        status
            .conditions
            .iter()
            .filter(current)
            .find(|c| c.type_ == type_)
    };
    let ready = condition("Ready");
    let reason = ready.and_then(|c| c.reason.as_deref()).unwrap_or_default();
    let said = |c: Option<&api::Condition>| {
        c.and_then(|c| c.message.clone())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| reason.to_owned())
    };
    let refused = |kind, why: String| {
        Provisioning::Refused(Refusal {
            kind,
            why: format!(
                "phase {}, {reason}: {why}",
                status.phase.as_deref().unwrap_or("unset")
            ),
        })
    };
    match status.phase.as_deref() {
        Some("Terminating") => return Provisioning::Going,
        Some("Ready" | "WaitForFirstConsumer") => return Provisioning::Usable,
        Some("Failed") if reason == "QuotaExceeded" => {
            return refused(RefusalKind::Quota, said(ready))
        }
        Some("Failed" | "PVCLost") => return refused(RefusalKind::Failed, said(ready)),
        _ => {}
    }
    let class = condition("StorageClassReady");
    match reason {
        "QuotaExceeded" => refused(RefusalKind::Quota, said(ready)),
        // Written while the StorageClassReady condition is not True *or not yet written
        // for this generation*: only its own False for this generation is a refusal.
        "StorageClassIsNotReady" if class.is_some_and(|c| c.status == "False") => {
            refused(RefusalKind::StorageClass, said(class))
        }
        "StorageClassProvisionerMismatch" => refused(RefusalKind::StorageClass, said(ready)),
        _ => Provisioning::OnItsWay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(phase: &str, conditions: serde_json::Value, deleting: bool) -> VirtualDisk {
        let mut metadata = serde_json::json!({"name": "d", "generation": 2});
        if deleting {
            metadata["deletionTimestamp"] = serde_json::json!("2026-11-24T00:00:00Z");
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
            "metadata": metadata,
            "spec": {"persistentVolumeClaim": {"size": "1Gi"}},
            "status": {"phase": phase, "conditions": conditions},
        }))
        .unwrap()
    }

    fn c(type_: &str, status: &str, reason: &str, generation: i64) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": status, "reason": reason,
            "message": format!("{reason} says so"), "observedGeneration": generation})
    }

    /// What the virtualization controller writes, and what a create makes of it.
    #[test]
    fn the_controllers_phases_and_reasons_are_read_as_it_writes_them() {
        use Provisioning::*;
        let kind = |p: Provisioning| match p {
            Refused(r) => format!("{:?}", r.kind),
            other => format!("{other:?}"),
        };
        let cases = [
            (
                "Ready",
                serde_json::json!([c("Ready", "True", "Ready", 2)]),
                false,
                "Usable",
            ),
            (
                "WaitForFirstConsumer",
                serde_json::json!([]),
                false,
                "Usable",
            ),
            (
                "Provisioning",
                serde_json::json!([c("Ready", "False", "Provisioning", 2)]),
                false,
                "OnItsWay",
            ),
            ("Pending", serde_json::json!([]), false, "OnItsWay"),
            // create_blank_pvc_step.go: quota is Pending, not Failed.
            (
                "Pending",
                serde_json::json!([c("Ready", "False", "QuotaExceeded", 2)]),
                false,
                "Quota",
            ),
            (
                "Pending",
                serde_json::json!([
                    c("StorageClassReady", "False", "StorageClassNotReady", 2),
                    c("Ready", "False", "StorageClassIsNotReady", 2)
                ]),
                false,
                "StorageClass",
            ),
            // The StorageClassReady condition not yet written for this generation: wait.
            (
                "Pending",
                serde_json::json!([
                    c("StorageClassReady", "False", "StorageClassNotReady", 1),
                    c("Ready", "False", "StorageClassIsNotReady", 2)
                ]),
                false,
                "OnItsWay",
            ),
            (
                "Pending",
                serde_json::json!([c("Ready", "False", "DatasourceIsNotReady", 2)]),
                false,
                "OnItsWay",
            ),
            (
                "Failed",
                serde_json::json!([c("Ready", "False", "ProvisioningFailed", 2)]),
                false,
                "Failed",
            ),
            (
                "Failed",
                serde_json::json!([c("Ready", "False", "QuotaExceeded", 2)]),
                false,
                "Quota",
            ),
            (
                "PVCLost",
                serde_json::json!([c("Ready", "False", "PVCLost", 2)]),
                false,
                "Failed",
            ),
            ("Terminating", serde_json::json!([]), false, "Going"),
            // A deletion timestamp before the controller wrote Terminating.
            (
                "Ready",
                serde_json::json!([c("Ready", "True", "Ready", 2)]),
                true,
                "Going",
            ),
        ];
        for (phase, conditions, deleting, want) in cases {
            let got = kind(provisioning(&disk(phase, conditions.clone(), deleting)));
            assert_eq!(got, want, "{phase} {conditions} deleting={deleting}");
        }
    }
}
