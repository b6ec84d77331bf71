//! Attaching a volume to a node (a `VirtualMachineBlockDeviceAttachment` named
//! `vmbda-<disk>-<hostname>`) and detaching it: waited for until the parent's controller
//! says Attached or the attachment is gone.

use std::collections::BTreeMap;

use kube::api::{DeleteParams, PostParams};
use kube::ResourceExt;
use overcast_cloud::{Attachment, CloudError, Result};

use super::{attachment_node, condition_message, context, is_name, is_readonly, DvpDisks};
use crate::api::{self, Vmbda};

impl DvpDisks {
    pub(super) async fn attach(&self, id: &str, node: &str, readonly: bool) -> Result<Attachment> {
        let vd = self.get_disk(id).await?;
        let Some(vm) = self.vm_of(node).await? else {
            return Err(CloudError::not_found("instance", node));
        };
        let hostname = api::vm_hostname(&vm).to_owned();
        let name = api::vmbda_name(id, &hostname);
        let uid = vd.metadata.uid.clone().unwrap_or_default();
        let existing = self.attachments_of(id).await?.into_iter().find(|v| {
            attachment_node(v) == hostname || v.spec.virtual_machine_name == vm.name_any()
        });
        let vmbda = match existing {
            Some(v) if is_readonly(&v) != readonly => {
                return Err(CloudError::FailedPrecondition(format!(
                    "VirtualDisk {id} is attached to {hostname} with readonly={}",
                    is_readonly(&v)
                )))
            }
            Some(v) => v,
            None => {
                let mut v = Vmbda::new(
                    &name,
                    &api::vmbda(),
                    api::VmbdaSpec {
                        virtual_machine_name: vm.name_any(),
                        block_device_ref: api::BlockDeviceRef {
                            kind: "VirtualDisk".into(),
                            name: id.to_owned(),
                        },
                    },
                );
                v.metadata.labels = Some(BTreeMap::from([
                    (api::VMBDA_DISK_LABEL.to_owned(), id.to_owned()),
                    (api::VMBDA_VM_LABEL.to_owned(), hostname.clone()),
                ]));
                if readonly {
                    v.metadata.annotations = Some(BTreeMap::from([(
                        api::READONLY_ANNOTATION.to_owned(),
                        "true".to_owned(),
                    )]));
                }
                v.status = None;
                match self
                    .parent
                    .call(
                        "vmbda_create",
                        &format!("create VirtualMachineBlockDeviceAttachment {name}"),
                        self.parent.vmbdas().create(&PostParams::default(), &v),
                    )
                    .await
                {
                    Ok(made) => made,
                    Err(CloudError::Conflict(_)) => self
                        .parent
                        .get_opt("vmbda_get", &self.parent.vmbdas(), &name)
                        .await?
                        .ok_or_else(|| {
                            CloudError::Conflict(format!(
                                "{name} was deleted while it was being made"
                            ))
                        })?,
                    Err(e) => return Err(e),
                }
            }
        };
        let vmbda_name = vmbda.name_any();
        let phase = |v: &Vmbda| v.status.as_ref().and_then(|s| s.phase.clone());
        let settled = |o: Option<&Vmbda>| {
            o.is_none_or(|v| matches!(phase(v).as_deref(), Some("Attached" | "Failed")))
        };
        let outcome = if settled(Some(&vmbda)) {
            Some(Some(vmbda))
        } else {
            self.parent
                .wait(
                    "vmbda",
                    self.parent.vmbdas(),
                    &vmbda_name,
                    self.waits.attached,
                    settled,
                )
                .await?
        };
        let attached = Attachment {
            node: hostname.clone(),
            readonly,
            publish_context: context(&uid),
        };
        match outcome {
            Some(Some(v)) if phase(&v).as_deref() == Some("Attached") => Ok(attached),
            Some(Some(v)) => {
                // Failed: the parent will not retry it; neither should the caller, until
                // something changes (the VM starts, the disk is freed elsewhere).
                let status = v.status.unwrap_or_default();
                Err(CloudError::FailedPrecondition(format!(
                    "attaching VirtualDisk {id} to {hostname} failed (VirtualMachineBlockDeviceAttachment {vmbda_name}): {}",
                    condition_message(&status.conditions)
                )))
            }
            Some(None) => Err(CloudError::Unavailable(format!(
                "VirtualMachineBlockDeviceAttachment {vmbda_name} was deleted before it attached"
            ))),
            None => {
                // Not attached in time. A VM deleted meanwhile makes it NotFound, and the
                // attachment is taken back so that nothing names the gone VM.
                if self.vm_of(node).await?.is_none() {
                    self.delete_vmbda(&vmbda_name).await?;
                    return Err(CloudError::not_found("instance", node));
                }
                let now = self
                    .parent
                    .get_opt("vmbda_get", &self.parent.vmbdas(), &vmbda_name)
                    .await?;
                let status = now.and_then(|v| v.status).unwrap_or_default();
                Err(CloudError::DeadlineExceeded(format!(
                    "VirtualMachineBlockDeviceAttachment {vmbda_name} is not Attached after {:?}: phase {}: {}",
                    self.waits.attached,
                    status.phase.as_deref().unwrap_or("unset"),
                    condition_message(&status.conditions)
                )))
            }
        }
    }

    pub(super) async fn detach(&self, id: &str, node: &str) -> Result<()> {
        if !is_name(id) {
            return Ok(());
        }
        let vm = self.vm_of(node).await?;
        let vmbdas = self.attachments_of(id).await?;
        let mine: Vec<Vmbda> = vmbdas
            .into_iter()
            .filter(|v| {
                attachment_node(v) == node
                    || vm
                        .as_ref()
                        .is_some_and(|vm| v.spec.virtual_machine_name == vm.name_any())
            })
            .collect();
        if vm.is_none() {
            // The parent says the VM is gone: every attachment naming it is dead weight.
            let selector = format!("{}={node}", api::VMBDA_VM_LABEL);
            let orphans = if is_name(node) {
                self.parent
                    .list_all("vmbda_list", &self.parent.vmbdas(), Some(&selector))
                    .await?
            } else {
                Vec::new()
            };
            for v in orphans.iter().chain(&mine) {
                self.delete_vmbda(&v.name_any()).await?;
            }
            return Ok(());
        }
        for v in &mine {
            let name = v.name_any();
            self.delete_vmbda(&name).await?;
            match self
                .parent
                .wait(
                    "vmbda",
                    self.parent.vmbdas(),
                    &name,
                    self.waits.detached,
                    |o: Option<&Vmbda>| o.is_none(),
                )
                .await?
            {
                Some(_) => {}
                None => {
                    return Err(CloudError::DeadlineExceeded(format!(
                        "VirtualMachineBlockDeviceAttachment {name} is still detaching after {:?}",
                        self.waits.detached
                    )))
                }
            }
        }
        Ok(())
    }

    async fn delete_vmbda(&self, name: &str) -> Result<()> {
        self.parent
            .delete(
                "vmbda_delete",
                &self.parent.vmbdas(),
                name,
                &DeleteParams::default(),
            )
            .await
    }
}
