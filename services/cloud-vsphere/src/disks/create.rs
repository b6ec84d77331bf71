//! Creating a CNS volume: once per name, a create already under way waited for (its
//! task recorded in [`InFlight`](crate::creates::InFlight)), on a datastore every host
//! of its zone mounts.

use std::sync::Arc;

use overcast_cloud::{CloudError, Disk, DiskSource, DiskSpec, Disks, Result, Zone};

use super::placement::{self, same_url};
use super::{Holders, Parts, VsphereDisks, MIB, PARAM_DATASTORE_URL, PARAM_STORAGE_POLICY};
use crate::cns::{CreateSpec, Volume};
use crate::soap::Moref;
use crate::task::TaskError;

impl VsphereDisks {
    /// A volume of `spec`'s name, made once: a create of that name under way is waited
    /// for, one made before is found by name, else it is made on a datastore every host
    /// of its zone mounts.
    pub(super) async fn create(&self, spec: DiskSpec) -> Result<Disk> {
        self.validate_parameters(&spec.parameters)?;
        let lock = {
            let mut map = self.creating.lock().await;
            Arc::clone(map.entry(spec.name.clone()).or_default())
        };
        let _held = lock.lock().await;
        // A create of this name already under way (its caller gave up, or the process
        // was restarted): its task decides, no second create is started.
        if let Some(task) = self.in_flight.get(&spec.name) {
            // A task an earlier call started that ended in error is that call's news,
            // not this one's: its record is gone, and this call decides afresh below.
            let found = match self.awaited(&spec.name, task).await {
                Err(TaskError::Failed(_)) => None,
                other => other?,
            };
            if let Some(v) = found {
                let v = self.grown(v, &spec).await?;
                let places = self.places().await?;
                return Ok(self.disk_of(v, &Holders::new(), places.as_ref(), Some(&spec.zone)));
            }
        }
        if let Some(v) = self.by_name(&spec.name).await? {
            // A restore made before a crash may not have been grown yet.
            let v = self.grown(v, &spec).await?;
            // A create's answer carries no attachments: none are read.
            let places = self.places().await?;
            return Ok(self.disk_of(v, &Holders::new(), places.as_ref(), Some(&spec.zone)));
        }
        let places = match self.places().await? {
            Some(p) => p,
            None => self.read(Parts::Datastores).await?.places(),
        };
        // A restore is made on its snapshot's datastore (vsphere-csi-driver's
        // `createSpec.datastores`, the snapshot's alone), at the snapshot's size, and grown
        // after to the size asked.
        let restore = match &spec.source {
            None => None,
            Some(DiskSource::Snapshot(id)) => {
                let (volume, snapshot) = self.restore_source(id)?;
                let from = self.volume(&volume).await?;
                Some((id.clone(), volume, snapshot, from))
            }
            Some(DiskSource::Disk(id)) => {
                return Err(CloudError::InvalidArgument(format!(
                    "vSphere does not clone volume {id} (no CLONE_VOLUME)"
                )))
            }
        };
        let url = match &restore {
            Some((_, _, _, from)) => Some(from.datastore_url.as_str()),
            None => spec
                .parameters
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(PARAM_DATASTORE_URL))
                .map(|(_, v)| v.as_str()),
        };
        let mut candidates: Vec<&placement::Datastore> = places
            .shared(&spec.zone)
            .into_iter()
            .filter(|d| url.is_none_or(|u| same_url(&d.url, u)))
            .collect();
        if candidates.is_empty() {
            let place = format!("{}/{}", spec.zone.region, spec.zone.zone);
            return Err(match url {
                Some(u) if !places.datastores.iter().any(|d| same_url(&d.url, u)) => {
                    CloudError::InvalidArgument(format!(
                        "{PARAM_DATASTORE_URL} {u:?} names no accessible datastore"
                    ))
                }
                // The CSI spec's code for "cannot be made in the accessible topology".
                Some(u) => CloudError::ResourceExhausted(format!(
                    "{PARAM_DATASTORE_URL} {u:?} is not mounted on every host of zone {place}"
                )),
                None if spec.zone == Zone::default() => {
                    CloudError::ResourceExhausted("no accessible datastore".into())
                }
                None => CloudError::ResourceExhausted(format!(
                    "no accessible datastore is mounted on every host of zone {place}"
                )),
            });
        }
        // A storage policy by name (upstream's `storagepolicyname`), as its profile id.
        let profile_id = match spec
            .parameters
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(PARAM_STORAGE_POLICY))
        {
            Some((_, name)) => Some(
                self.pbm
                    .policies()
                    .await?
                    .into_iter()
                    .find(|p| &p.name == name)
                    .map(|p| p.id)
                    .ok_or_else(|| {
                        CloudError::InvalidArgument(format!(
                            "{PARAM_STORAGE_POLICY} {name:?} names no storage policy"
                        ))
                    })?,
            ),
            None => None,
        };
        // With a policy, CNS picks among the candidates the one that complies; without,
        // the freest is named alone (one datastore is one volume: vcsim makes one on each
        // datastore it is given).
        if profile_id.is_none() {
            candidates.sort_by_key(|d| std::cmp::Reverse(d.free));
            candidates.truncate(1);
        }
        let datastores: Vec<Moref> = candidates.iter().map(|d| d.moref.clone()).collect();
        // Recorded before the create, by the volume's name: a crash after it leaves the
        // record for the retry to compare with (CNS does not say a volume's source back).
        match &restore {
            Some((id, _, _, _)) => self
                .restores
                .record(&spec.name, &Moref::new("VolumeSnapshot", id)),
            // A record a failed restore of this name left is not this volume's.
            None => self.restores.forget(&spec.name),
        }
        let user = self.cns.vcenter().credential().await?.user;
        let task = self
            .cns
            .start_create(&CreateSpec {
                name: spec.name.clone(),
                capacity_mb: match &restore {
                    Some((_, _, _, from)) => from.capacity_mb,
                    None => spec.size_bytes.div_ceil(MIB),
                },
                datastores,
                profile_id,
                cluster_id: self.cluster_id.clone(),
                vsphere_user: user,
                metadata: spec.metadata.clone(),
                snapshot: restore
                    .as_ref()
                    .map(|(_, volume, snapshot, _)| (volume.clone(), snapshot.clone())),
            })
            .await?;
        // Recorded before it is awaited: if this call is dropped here, the retry waits.
        self.in_flight.record(&spec.name, &task);
        // Made just now: attached nowhere, no VM needs reading.
        let v = self.awaited(&spec.name, task).await?.ok_or_else(|| {
            CloudError::Unavailable(format!(
                "vsphere: the create of {:?} lost its task; retry",
                spec.name
            ))
        })?;
        let v = self.grown(v, &spec).await?;
        let places = self.topology.is_some().then_some(&places);
        Ok(self.disk_of(v, &Holders::new(), places, Some(&spec.zone)))
    }

    /// A restore grows after its create to the size asked (it is made at its snapshot's):
    /// `v` grown when it is smaller — only the restore of this very snapshot (its record
    /// says so): a volume of the name made otherwise is not changed by a request it does
    /// not fit (the CSI layer answers ALREADY_EXISTS).
    async fn grown(&self, mut v: Volume, spec: &DiskSpec) -> Result<Volume> {
        let asked = spec.size_bytes.div_ceil(MIB);
        let this_restore = match &spec.source {
            Some(DiskSource::Snapshot(id)) => {
                self.restores.get(&spec.name).is_some_and(|r| r.id == *id)
                    || v.restored_from.as_ref() == Some(id)
            }
            _ => false,
        };
        if this_restore && v.capacity_mb < asked {
            self.cns.extend(&v.id, asked).await?;
            v.capacity_mb = asked;
        }
        Ok(v)
    }

    /// The volume a recorded create's task made, once it has succeeded; `None` when
    /// there is no record or its task is gone (what it made is then found by name).
    /// A task that ended in error loses its record: the call that started it answers
    /// its fault, and a later call (a retry, a restarted process) decides afresh, by name
    /// first, as vsphere-csi-driver resumes only a task still pending (`IsTaskPending`).
    /// Only a task still running, or one that could not be read, keeps its record.
    ///
    /// A vCenter reuses task ids after a restart: a recorded id may name another task by
    /// then. Only a create's task that made a volume of this name is taken as this
    /// create's; anything else is forgotten and the name looked up.
    async fn awaited(
        &self,
        name: &str,
        task: Moref,
    ) -> std::result::Result<Option<Volume>, TaskError> {
        match self.cns.created(&task).await {
            Ok(Some(id)) => {
                let v = self.volume(&id).await;
                self.in_flight.forget(name);
                match v {
                    Ok(v) if v.name == name => Ok(Some(v)),
                    Ok(_) | Err(CloudError::NotFound { .. }) => Ok(None),
                    Err(e) => Err(TaskError::Unread(e)),
                }
            }
            Ok(None) => {
                self.in_flight.forget(name);
                Ok(None)
            }
            // vCenter no longer knows the task (it keeps finished ones for minutes): what
            // it did is found by name.
            Err(TaskError::Unread(CloudError::NotFound { .. })) => {
                self.in_flight.forget(name);
                Ok(None)
            }
            Err(TaskError::Unread(e)) => Err(TaskError::Unread(e)),
            Err(TaskError::Failed(e)) => {
                tracing::warn!(volume = name, error = %e, "a create's task ended in error; its record is dropped and the next create decides afresh");
                self.in_flight.forget(name);
                Err(TaskError::Failed(e))
            }
        }
    }
}
