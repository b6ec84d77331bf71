//! The simulated VirtualDisk controller: provisioning (a real PVC bound to a real PV
//! backed by a sparse file), resizing, deletion.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};
use overcast_cloud_dvp::api::{self, VirtualDisk};
use overcast_cloud_local::loopdev;
use serde_json::json;

use super::{
    add_finalizer, cond, disk_file, due, forget, remove_finalizer, set_status, State, FINALIZER,
    SIM_LABEL,
};

/// The target PVC's name, as the virtualization controller names it.
fn claim_name(name: &str, uid: &str) -> String {
    format!("vd-{name}-{}", &uid[..8.min(uid.len())])
}

/// The parent's StorageClass a disk is made in (the kit's object, when a test made one).
async fn storage_class_object(client: &Client, name: &str) -> Option<StorageClass> {
    Api::<StorageClass>::all(client.clone())
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

/// The PVC and the PV behind a Ready disk, as the parent's storage makes them: a PV
/// pinned to the consumer's host for a StorageClass binding on first consumer (local
/// storage), to the first zone of `allowedTopologies` for one that names zones (zonal
/// storage), else usable anywhere (network storage).
async fn provision_claim(
    client: &Client,
    namespace: &str,
    claim: &str,
    class: &str,
    bytes: u64,
    consumer: Option<&str>,
) -> anyhow::Result<()> {
    let sc = storage_class_object(client, class).await;
    let wffc =
        sc.as_ref().and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer");
    let zone = sc
        .as_ref()
        .and_then(|c| c.allowed_topologies.as_ref())
        .and_then(|t| t.first())
        .and_then(|t| t.match_label_expressions.as_ref()?.first().cloned())
        .filter(|e| e.key == "topology.kubernetes.io/zone")
        .and_then(|e| e.values.first().cloned());
    let affinity = match (wffc, consumer, zone) {
        (true, Some(node), _) => Some(("kubernetes.io/hostname", node.to_owned())),
        (_, _, Some(zone)) => Some(("topology.kubernetes.io/zone", zone)),
        _ => None,
    };
    let pv_name = format!("pv-{claim}");
    let mut pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": {SIM_LABEL: namespace}},
        "spec": {
            "capacity": {"storage": bytes.to_string()},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {"namespace": namespace, "name": claim},
            "csi": {"driver": "sim.virtualization.deckhouse.io", "volumeHandle": claim},
        },
    });
    if let Some((key, value)) = affinity {
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}});
    }
    let pvc = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "volumeName": pv_name,
            "resources": {"requests": {"storage": bytes.to_string()}},
        },
    });
    let pp = PostParams::default();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    for made in [
        pvs.create(&pp, &serde_json::from_value(pv)?)
            .await
            .map(|_| ()),
        pvcs.create(&pp, &serde_json::from_value(pvc)?)
            .await
            .map(|_| ()),
    ] {
        match made {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn delete_claim(client: &Client, namespace: &str, claim: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .delete(claim, &dp)
        .await;
    let _ = Api::<PersistentVolume>::all(client.clone())
        .delete(&format!("pv-{claim}"), &dp)
        .await;
}

pub(super) async fn reconcile_disk(
    api: &Api<VirtualDisk>,
    vd: &VirtualDisk,
    consumer: Option<&str>,
    state: &State,
) -> anyhow::Result<()> {
    let name = vd.name_any();
    let uid = vd.uid().unwrap_or_default();
    let file = disk_file(state, &uid);
    let client = api.clone().into_client();
    let namespace = vd.namespace().unwrap_or_default();
    let claim = claim_name(&name, &uid);
    if vd.metadata.deletion_timestamp.is_some() {
        let status = vd.status.clone().unwrap_or_default();
        if status.phase.as_deref() != Some("Terminating") {
            // life_cycle.go: a deletion timestamp is phase Terminating.
            set_status(api, &name, json!({"phase": "Terminating"})).await?;
            return Ok(());
        }
        let held = state
            .faults
            .held_deletions
            .lock()
            .expect("lock")
            .contains(&name);
        if !held && vd.finalizers().iter().any(|f| f == FINALIZER) {
            let _ = std::fs::remove_file(&file);
            delete_claim(&client, &namespace, &claim).await;
            forget(state, &uid);
            remove_finalizer(api, vd).await?;
        }
        return Ok(());
    }
    if !vd.finalizers().iter().any(|f| f == FINALIZER) {
        add_finalizer(api, vd).await?;
        return Ok(());
    }
    let status = vd.status.clone().unwrap_or_default();
    // A disk from an image or a snapshot waits for it; made, it is at least the source's
    // size (a restore's PVC is grown to the snapshot's restoreSize, getPVCSize).
    // Read until provisioned only: a disk made from a snapshot since deleted is a disk.
    let provisioned = matches!(status.phase.as_deref(), Some("Ready" | "Resizing"));
    let data_source = vd.spec.data_source.as_ref().filter(|_| !provisioned);
    let source = match super::image::datasource(&client, &namespace, data_source, state).await? {
        Ok(source) => source,
        Err(conditions) => {
            if status.phase.as_deref().unwrap_or("Pending") == "Pending" {
                let reason = |c: &serde_json::Value| c["reason"].clone();
                let now: Vec<_> = status.conditions.iter().map(|c| json!(c.reason)).collect();
                if now != conditions.iter().map(reason).collect::<Vec<_>>() {
                    set_status(
                        api,
                        &name,
                        json!({"phase": "Pending", "conditions": conditions}),
                    )
                    .await?;
                }
            }
            return Ok(());
        }
    };
    let asked = vd
        .spec
        .persistent_volume_claim
        .size
        .as_ref()
        .and_then(|q| api::quantity_bytes(&q.0));
    let want = match (asked, source.bytes) {
        (Some(a), Some(s)) if source.file.is_some() => a.max(s),
        (Some(a), _) => a,
        (None, s) => s.unwrap_or(0),
    };
    let have = status.capacity.as_deref().and_then(api::quantity_bytes);
    let storage_class = vd
        .spec
        .persistent_volume_claim
        .storage_class_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let generation = vd.metadata.generation.unwrap_or(1);
    // Conditions as the controller builds them: for this generation.
    let gcond = |type_: &str, ok: bool, reason: &str, message: &str| {
        let mut c = cond(type_, ok, reason, message);
        c["observedGeneration"] = json!(generation);
        c
    };
    let class_ready = gcond("StorageClassReady", true, "StorageClassReady", "");
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.reason.clone())
        .unwrap_or_default();
    match status.phase.as_deref() {
        None | Some("Pending") if reason != "QuotaExceeded" => {
            let named = vd.spec.persistent_volume_claim.storage_class_name.is_some();
            let sc = storage_class_object(&client, &storage_class).await;
            if named && sc.is_none() {
                // storageclass_ready.go's setFromSpec, then life_cycle.go.
                set_status(api, &name, json!({
                    "phase": "Pending", "storageClassName": storage_class,
                    "conditions": [
                        gcond("StorageClassReady", false, "StorageClassNotReady",
                            &format!("The specified StorageClass {storage_class:?} was not found.")),
                        gcond("Ready", false, "StorageClassIsNotReady", "The StorageClass is not ready."),
                    ],
                }))
                .await?;
                return Ok(());
            }
            let wffc = sc.as_ref().and_then(|c| c.volume_binding_mode.as_deref())
                == Some("WaitForFirstConsumer");
            let status = if wffc {
                json!({
                    "phase": "WaitForFirstConsumer", "storageClassName": storage_class,
                    "target": {"persistentVolumeClaimName": claim},
                    "conditions": [class_ready, gcond("Ready", false, "WaitingForFirstConsumer", "Awaiting the creation and scheduling of the VirtualMachine with the attached VirtualDisk.")],
                })
            } else {
                json!({
                    "phase": "Provisioning", "storageClassName": storage_class, "progress": "0%",
                    "conditions": [class_ready, gcond("Ready", false, "Provisioning", "Waiting for the underlying PersistentVolumeClaim to be created.")],
                })
            };
            set_status(api, &name, status).await?;
        }
        // The first VMBDA whose VM runs: provisioned where that VM is.
        Some("WaitForFirstConsumer") if consumer.is_some() => {
            set_status(api, &name, json!({
                "phase": "Provisioning", "storageClassName": storage_class, "progress": "0%",
                "conditions": [class_ready, gcond("Ready", false, "Provisioning", "Waiting for the underlying PersistentVolumeClaim to be created.")],
            }))
            .await?;
        }
        Some("Provisioning" | "Pending") if due(state, &uid) => {
            if state
                .faults
                .held_provisioning
                .lock()
                .expect("lock")
                .contains(&name)
            {
                return Ok(());
            }
            let f = std::fs::File::create(&file)?;
            if let Some(from) = &source.file {
                // The restored PVC's content: the snapshot's.
                overcast_cloud_local::copy::copy(&std::fs::File::open(from)?, &f)?;
            }
            if f.metadata()?.len() < want {
                f.set_len(want)?;
            }
            match provision_claim(&client, &namespace, &claim, &storage_class, want, consumer).await
            {
                Ok(()) => {}
                // create_blank_pvc_step.go: the API server's quota refusal is phase
                // Pending, Ready=False QuotaExceeded; tried again later.
                Err(e) if e.to_string().contains("exceeded quota") => {
                    set_status(api, &name, json!({
                        "phase": "Pending", "progress": "",
                        "conditions": [class_ready, gcond("Ready", false, "QuotaExceeded",
                            &format!("Quota exceeded during the creation of underlying PersistentVolumeClaim: {e}"))],
                    }))
                    .await?;
                    forget(state, &uid);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
            set_status(
                api,
                &name,
                json!({
                    "phase": "Ready", "capacity": want.to_string(), "progress": "100%",
                    "target": {"persistentVolumeClaimName": claim},
                    "conditions": [class_ready, gcond("Ready", true, "Ready", "")],
                }),
            )
            .await?;
            forget(state, &uid);
        }
        Some("Ready") if have.is_some_and(|h| want > h) => {
            set_status(api, &name, json!({
                "phase": "Resizing",
                "conditions": [cond("Ready", true, "Ready", ""), cond("Resized", false, "InProgress", "the PVC is being resized")],
            }))
            .await?;
        }
        Some("Resizing") if due(state, &uid) => {
            let f = std::fs::OpenOptions::new().write(true).open(&file)?;
            if f.metadata()?.len() < want {
                f.set_len(want)?;
            }
            let bound: Vec<u32> = {
                let attached = state.attached.lock().expect("lock");
                attached
                    .values()
                    .filter(|a| a.file == file)
                    .map(|a| a.index)
                    .collect()
            };
            for index in bound {
                loopdev::refresh_capacity(index, &file)?;
            }
            set_status(api, &name, json!({
                "phase": "Ready", "capacity": want.to_string(),
                "conditions": [cond("Ready", true, "Ready", ""), cond("Resized", true, "Resized", "")],
            }))
            .await?;
            forget(state, &uid);
        }
        _ => {}
    }
    Ok(())
}
