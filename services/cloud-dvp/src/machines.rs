//! VirtualMachines of the parent as capdvp makes them for Cluster API Machines: the VM
//! `<name>` labelled `deckhouse.io/managed-by: deckhouse`, `dvp.deckhouse.io/cluster-uuid`
//! and `dvp.deckhouse.io/hostname`, booting `<name>-boot` (a VirtualDisk from the
//! machine's image) and `<name>-additional-disk-<i>`, provisioned by the cloud-init Secret
//! `cloud-init-<name>`; the disks and the Secret owned by the VM, as capdvp owns them.
//!
//! Where capdvp makes the parts only when the VM is first made (a failure between the
//! VM's create and its Secret's leaves a VM that never starts, `ProvisioningNotReady`),
//! every part here is looked for and made when missing, at create and again at each
//! [`Machines::start`], so a crash or an outage at any step is repaired by the next
//! reconcile. Removal detaches what CSI attached (the VM's VMBDAs), deletes the VM and
//! waits until it is gone, then its own disks and Secret — only those it owns, so a
//! user's disk of a like name is never taken.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use overcast_cloud::machines::{Machines, Removal, Vm, VmPhase};
use overcast_cloud::{CloudError, Result};
use serde_json::json;

use crate::api::{self, VirtualMachine};
use crate::parent::Parent;

/// capdvp's labels on a VM it makes.
pub const MANAGED_BY_LABEL: &str = "deckhouse.io/managed-by";
pub const CLUSTER_UUID_LABEL: &str = "dvp.deckhouse.io/cluster-uuid";
/// The Secret type DVP reads cloud-init from, and the key capdvp writes.
pub const CLOUD_INIT_TYPE: &str = "provisioning.virtualization.deckhouse.io/cloud-init";
pub const USER_DATA_KEY: &str = "userData";

/// How long a removal waits for the VM to be gone before answering "not yet".
const GONE_WAIT: Duration = Duration::from_secs(20);

/// What a DeckhouseMachine asks for (its spec, defaults applied by the CRD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmSpec {
    pub class: String,
    pub cores: u32,
    /// `"100%"`.
    pub core_fraction: String,
    /// A quantity (`"8Gi"`).
    pub memory: String,
    /// `EFI`, `BIOS`, `EFIWithSecureBoot`.
    pub bootloader: String,
    pub run_policy: String,
    pub live_migration_policy: String,
    /// `ClusterVirtualImage` or `VirtualImage`, and its name.
    pub image_kind: String,
    pub image_name: String,
    pub root_disk_bytes: u64,
    pub root_disk_storage_class: Option<String>,
    /// Size and StorageClass of each additional disk.
    pub additional_disks: Vec<(u64, Option<String>)>,
}

/// The parent's VMs of one cluster for the Cluster API provider. Several clusters may
/// share a parent namespace, and their machines' names may meet: a VM is this cluster's
/// only when it carries this cluster's `dvp.deckhouse.io/cluster-uuid`, and one that does
/// not is never adopted, changed or removed.
pub struct ParentVms {
    parent: Parent,
    cluster_uuid: String,
}

/// The name of a VM's boot disk, of its `i`-th additional disk, of its Secret.
pub fn boot_disk(name: &str) -> String {
    format!("{name}-boot")
}
pub fn additional_disk(name: &str, i: usize) -> String {
    format!("{name}-additional-disk-{i}")
}
pub fn cloud_init_secret(name: &str) -> String {
    format!("cloud-init-{name}")
}

/// A label value's limit (Kubernetes' `validation.LabelValueMaxLength`).
const LABEL_VALUE_MAX: usize = 63;

/// Why a machine of this name cannot have its VM here, if it cannot (retrying cannot
/// help; the name cannot be edited): the virtualization webhook refuses a VirtualDisk
/// name with a '.', so `<name>-boot` would never be made; and the VM carries its name as
/// the `dvp.deckhouse.io/hostname` label's value (capdvp's and the CSI driver's way to
/// find it), which the API server refuses past 63 characters.
pub fn name_refusal(name: &str) -> Option<String> {
    if name.contains('.') {
        return Some(format!(
            "the VM's boot disk {:?} would be refused by DVP: a VirtualDisk name may not contain '.'",
            boot_disk(name)
        ));
    }
    (name.len() > LABEL_VALUE_MAX).then(|| {
        format!(
            "the VM's {} label takes its name, {} characters long, and a label value may have at most {LABEL_VALUE_MAX}",
            api::HOSTNAME_LABEL,
            name.len()
        )
    })
}

impl ParentVms {
    /// capdvp's `validateVMResources`, before a VM is made: why the parent could not run
    /// a VM of `spec` — its VirtualMachineClass or its boot image (a ClusterVirtualImage,
    /// a VirtualImage of the namespace) is not there, in capdvp's words — or `None`. Only a 404 is "not there": the class and a
    /// ClusterVirtualImage are cluster-scoped, read under the optional ClusterRole of
    /// `deploy/parent/dvp/rbac.yaml`, and a Forbidden means "cannot tell", so the VM is
    /// made (the parent then says what it misses on the VM). Any other error is the
    /// parent's and retried.
    pub async fn refusal(&self, spec: &VmSpec) -> Result<Option<String>> {
        let class = self.parent.dynamic(&api::virtual_machine_class(), false);
        if self
            .look("vmclass_get", &class, &spec.class, "VirtualMachineClass")
            .await?
            == Some(false)
        {
            return Ok(Some(format!(
                "VirtualMachineClass '{}' not found in parent DVP cluster. Please ensure the VirtualMachineClass exists before creating VMs. Available VirtualMachineClasses can be listed with: kubectl get virtualmachineclasses",
                spec.class
            )));
        }
        let ns = &self.parent.namespace;
        let (resource, namespaced, list) = match spec.image_kind.as_str() {
            "ClusterVirtualImage" => (
                api::cluster_virtual_image(),
                false,
                "kubectl get clustervirtualimages".to_owned(),
            ),
            "VirtualImage" => (
                api::virtual_image(),
                true,
                format!("kubectl get virtualimages -n {ns}"),
            ),
            // A VirtualDisk may boot from a snapshot too (capdvp refuses the kind, which
            // its own CRD allows); not looked for, as before.
            "VirtualDiskSnapshot" => return Ok(None),
            other => {
                return Ok(Some(format!(
                    "unsupported boot disk image kind '{other}', must be either 'ClusterVirtualImage' or 'VirtualImage'"
                )))
            }
        };
        let images = self.parent.dynamic(&resource, namespaced);
        if self
            .look("image_get", &images, &spec.image_name, &spec.image_kind)
            .await?
            == Some(false)
        {
            let place = if namespaced {
                format!(" in namespace '{ns}'")
            } else {
                String::new()
            };
            return Ok(Some(format!(
                "{kind} '{name}' not found{place} in parent DVP cluster. Please ensure the image exists before creating VMs. Available {kind}s can be listed with: {list}",
                kind = spec.image_kind,
                name = spec.image_name,
            )));
        }
        Ok(None)
    }

    /// Whether `name` is there: `Some(false)` only on a 404, `None` when this account may
    /// not read it.
    async fn look(
        &self,
        request: &'static str,
        api: &Api<DynamicObject>,
        name: &str,
        kind: &str,
    ) -> Result<Option<bool>> {
        match self.parent.get_opt(request, api, name).await {
            Ok(found) => Ok(Some(found.is_some())),
            Err(CloudError::PermissionDenied(m)) => {
                tracing::warn!(%kind, %name, "cannot check that the {kind} exists before making a VM: {m}");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

impl ParentVms {
    /// The VMs of the cluster `cluster_uuid` (its `d8-cluster-uuid`).
    pub fn new(parent: Parent, cluster_uuid: impl Into<String>) -> Self {
        Self {
            parent,
            cluster_uuid: cluster_uuid.into(),
        }
    }

    fn is_ours<K: kube::Resource>(&self, obj: &K) -> bool {
        obj.labels().get(CLUSTER_UUID_LABEL) == Some(&self.cluster_uuid)
    }

    /// A part found under the name a VM's part has is used only when it is this cluster's
    /// or the VM's (capdvp's parts are owned by their VM): a user's or another cluster's
    /// disk or Secret of that name is never booted from, nor its cloud-init run.
    fn usable<K: kube::Resource>(
        &self,
        obj: &K,
        vm_uid: &str,
        kind: &str,
        name: &str,
    ) -> Result<()> {
        let owned = obj
            .owner_references()
            .iter()
            .any(|o| o.kind == "VirtualMachine" && o.uid == vm_uid);
        if self.is_ours(obj) || owned {
            Ok(())
        } else {
            Err(CloudError::Conflict(format!(
                "{kind} {name} exists in {} and is neither this cluster's nor its VM's: not used",
                self.parent.namespace
            )))
        }
    }

    /// The VM `name` when it is this cluster's; another cluster's is refused, naming it.
    async fn get_ours(&self, name: &str) -> Result<Option<VirtualMachine>> {
        match self.get(name).await? {
            Some(vm) if !self.is_ours(&vm) => Err(CloudError::Conflict(format!(
                "VirtualMachine {name} in {} is not this cluster's ({CLUSTER_UUID_LABEL} is {:?}, not {:?}): not adopted",
                self.parent.namespace,
                vm.labels().get(CLUSTER_UUID_LABEL).map(String::as_str).unwrap_or(""),
                self.cluster_uuid
            ))),
            found => Ok(found),
        }
    }

    fn vms(&self) -> Api<DynamicObject> {
        self.parent.dynamic(&api::virtual_machine(), true)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.parent.client.clone(), &self.parent.namespace)
    }

    async fn get(&self, name: &str) -> Result<Option<VirtualMachine>> {
        self.parent
            .get_opt("vm_get", &self.parent.vms(), name)
            .await
    }

    /// The Secret and the disks of `vm`, each made when missing (owned by the VM).
    async fn ensure_parts(
        &self,
        vm: &VirtualMachine,
        spec: &VmSpec,
        bootstrap: &[u8],
    ) -> Result<()> {
        let name = vm.name_any();
        let owner = json!([{
            "apiVersion": format!("{}/{}", api::GROUP, api::VERSION),
            "kind": "VirtualMachine", "name": name, "uid": vm.uid().unwrap_or_default(),
        }]);
        let labels = json!({
            CLUSTER_UUID_LABEL: self.cluster_uuid,
            api::HOSTNAME_LABEL: name,
        });
        let vm_uid = vm.uid().unwrap_or_default();
        let secret_name = cloud_init_secret(&name);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": secret_name, "labels": labels, "ownerReferences": owner},
            "type": CLOUD_INIT_TYPE,
            "stringData": {USER_DATA_KEY: String::from_utf8_lossy(bootstrap)},
        }))
        .map_err(|e| CloudError::InvalidArgument(format!("cloud-init Secret: {e}")))?;
        self.ensure_part(
            &self.secrets(),
            ("secret_get", "secret_create"),
            "Secret",
            &secret,
            &vm_uid,
        )
        .await?;
        let mut disks = vec![(
            boot_disk(&name),
            spec.root_disk_bytes,
            spec.root_disk_storage_class.clone(),
            Some(json!({
                "type": "ObjectRef",
                "objectRef": {"kind": spec.image_kind, "name": spec.image_name},
            })),
        )];
        for (i, (bytes, class)) in spec.additional_disks.iter().enumerate() {
            disks.push((additional_disk(&name, i), *bytes, class.clone(), None));
        }
        let vds = self.parent.dynamic(&api::virtual_disk(), true);
        for (disk, bytes, class, source) in disks {
            let mut claim = json!({"size": bytes.to_string()});
            if let Some(c) = class {
                claim["storageClassName"] = json!(c);
            }
            let mut spec_json = json!({"persistentVolumeClaim": claim});
            if let Some(s) = source {
                spec_json["dataSource"] = s;
            }
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{}/{}", api::GROUP, api::VERSION),
                "kind": "VirtualDisk",
                "metadata": {"name": disk, "labels": labels, "ownerReferences": owner},
                "spec": spec_json,
            }))
            .map_err(|e| CloudError::InvalidArgument(format!("VirtualDisk {disk}: {e}")))?;
            self.ensure_part(
                &vds,
                ("disk_get", "disk_create"),
                "VirtualDisk",
                &obj,
                &vm_uid,
            )
            .await?;
        }
        Ok(())
    }

    /// Makes the part `obj` when none of its name is there. One found — before, or made
    /// between the look and the create (a concurrent reconcile, or a stranger) — is used
    /// only when [`Self::usable`]: an AlreadyExists is never taken as "ours" unseen.
    async fn ensure_part<K>(
        &self,
        api: &Api<K>,
        (get, create): (&'static str, &'static str),
        kind: &str,
        obj: &K,
        vm_uid: &str,
    ) -> Result<()>
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let name = obj.name_any();
        if let Some(found) = self.parent.get_opt(get, api, &name).await? {
            return self.usable(&found, vm_uid, kind, &name);
        }
        match self
            .parent
            .call(
                create,
                &format!("create {kind} {name}"),
                api.create(&PostParams::default(), obj),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(CloudError::Conflict(_)) => match self.parent.get_opt(get, api, &name).await? {
                Some(found) => self.usable(&found, vm_uid, kind, &name),
                None => Err(CloudError::Unavailable(format!(
                    "{kind} {name} was there at create, then gone: made again on the next pass"
                ))),
            },
            Err(e) => Err(e),
        }
    }
}

/// Whether `obj` is owned by a VirtualMachine named `name` (a user's disk of a like name
/// is not).
fn owned_by_vm<K: kube::Resource>(obj: &K, name: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|o| o.kind == "VirtualMachine" && o.name == name)
}

/// A VM's phase as the controller tells it.
pub fn phase_of(vm: &VirtualMachine) -> VmPhase {
    match vm.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => VmPhase::Running,
        Some("Stopped") => VmPhase::Stopped,
        Some("Degraded") => VmPhase::Failed("Degraded".into()),
        // Made, waiting for its disks and provisioning.
        None | Some("" | "Pending") => VmPhase::Creating,
        Some(other) => VmPhase::Transitioning(other.to_owned()),
    }
}

fn vm_of(vm: &VirtualMachine) -> Vm {
    let phase = phase_of(vm);
    // A Pending VM's first unmet condition says what it waits for.
    let waiting_for = (phase == VmPhase::Creating)
        .then(|| {
            vm.status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.status == "False")
                .map(|c| {
                    let said = c.message.clone().filter(|m| !m.is_empty());
                    format!(
                        "{}: {}",
                        c.type_,
                        said.or_else(|| c.reason.clone()).unwrap_or_default()
                    )
                })
        })
        .flatten();
    Vm {
        id: vm.name_any(),
        name: vm.name_any(),
        phase,
        waiting_for,
    }
}

#[async_trait::async_trait]
impl Machines for ParentVms {
    type Spec = VmSpec;

    async fn find(&self, name: &str) -> Result<Option<Vm>> {
        Ok(self.get_ours(name).await?.as_ref().map(vm_of))
    }

    async fn create(&self, name: &str, spec: &VmSpec, bootstrap: &[u8]) -> Result<Vm> {
        if let Some(why) = name_refusal(name) {
            return Err(CloudError::InvalidArgument(format!(
                "machine {name:?}: {why}"
            )));
        }
        let mut refs = vec![json!({"kind": "VirtualDisk", "name": boot_disk(name)})];
        for i in 0..spec.additional_disks.len() {
            refs.push(json!({"kind": "VirtualDisk", "name": additional_disk(name, i)}));
        }
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{}/{}", api::GROUP, api::VERSION),
            "kind": "VirtualMachine",
            "metadata": {"name": name, "labels": {
                MANAGED_BY_LABEL: "deckhouse",
                CLUSTER_UUID_LABEL: self.cluster_uuid,
                api::HOSTNAME_LABEL: name,
            }},
            "spec": {
                "runPolicy": spec.run_policy,
                "liveMigrationPolicy": spec.live_migration_policy,
                "osType": "Generic",
                "bootloader": spec.bootloader,
                "virtualMachineClassName": spec.class,
                "enableParavirtualization": true,
                "provisioning": {"type": "UserDataRef", "userDataRef": {"kind": "Secret", "name": cloud_init_secret(name)}},
                "cpu": {"cores": spec.cores, "coreFraction": spec.core_fraction},
                "memory": {"size": spec.memory},
                "blockDeviceRefs": refs,
            },
        }))
        .map_err(|e| CloudError::InvalidArgument(format!("VirtualMachine {name}: {e}")))?;
        self.parent
            .call(
                "vm_create",
                &format!("create VirtualMachine {name}"),
                self.vms().create(&PostParams::default(), &obj),
            )
            .await?;
        let vm = self.get_ours(name).await?.ok_or_else(|| {
            CloudError::Unavailable(format!("VirtualMachine {name} made, then not found"))
        })?;
        self.ensure_parts(&vm, spec, bootstrap).await?;
        Ok(vm_of(&vm))
    }

    /// DVP starts the VM itself (its run policy) once its disks and Secret are there:
    /// this makes whichever of them is missing.
    async fn start(&self, vm: &Vm, spec: &VmSpec, bootstrap: &[u8]) -> Result<()> {
        let Some(now) = self.get_ours(&vm.name).await? else {
            return Err(CloudError::not_found("VirtualMachine", vm.name.clone()));
        };
        self.ensure_parts(&now, spec, bootstrap).await
    }

    async fn addresses(&self, vm: &Vm) -> Result<Vec<IpAddr>> {
        let Some(now) = self.get_ours(&vm.name).await? else {
            return Ok(Vec::new());
        };
        Ok(now
            .status
            .and_then(|s| s.ip_address)
            .and_then(|a| a.parse::<IpAddr>().ok())
            .filter(|a| !a.is_loopback() && !a.is_unspecified())
            .into_iter()
            .collect())
    }

    /// Another cluster's VM of this name (never adopted, so this machine has none) is
    /// left alone with its attachments; only parts labelled this cluster's are taken.
    async fn remove(&self, vm: &Vm) -> Result<Removal> {
        let mut removal = Removal::default();
        if let Some(now) = self.get(&vm.name).await?.filter(|v| self.is_ours(v)) {
            let hostname = api::vm_hostname(&now).to_owned();
            // What CSI attached: the VMBDAs naming this VM. Deleted (the disks stay).
            let vmbdas = self
                .parent
                .list_all("vmbda_list", &self.parent.vmbdas(), None)
                .await?;
            for a in vmbdas.iter().filter(|a| {
                a.spec.virtual_machine_name == vm.name
                    || api::labels(&a.metadata).get(api::VMBDA_VM_LABEL) == Some(&hostname)
            }) {
                self.parent
                    .delete(
                        "vmbda_delete",
                        &self.parent.vmbdas(),
                        &a.name_any(),
                        &DeleteParams::default(),
                    )
                    .await?;
                removal.detached.push(a.spec.block_device_ref.name.clone());
            }
            if now.metadata.deletion_timestamp.is_none() {
                self.parent
                    .delete(
                        "vm_delete",
                        &self.parent.vms(),
                        &vm.name,
                        &DeleteParams::default(),
                    )
                    .await?;
            }
            let gone = self
                .parent
                .wait(
                    "vm_delete",
                    self.parent.vms(),
                    &vm.name,
                    GONE_WAIT,
                    |o: Option<&VirtualMachine>| o.is_none(),
                )
                .await?;
            if gone.is_none() {
                return Err(CloudError::Unavailable(format!(
                    "VirtualMachine {} is still terminating",
                    vm.name
                )));
            }
        }
        // Its own disks and Secret, the VM gone (now, or by an earlier removal that did
        // not finish): the parts a VirtualMachine of this name owned. The parent's
        // garbage collector takes them too; deleted here so nothing waits on it.
        let vds = self.parent.dynamic(&api::virtual_disk(), true);
        for d in self
            .parent
            .call(
                "disk_list",
                "list VirtualDisks",
                vds.list(&Default::default()),
            )
            .await?
            .items
        {
            if owned_by_vm(&d, &vm.name) && self.is_ours(&d) {
                self.parent
                    .delete("disk_delete", &vds, &d.name_any(), &DeleteParams::default())
                    .await?;
            }
        }
        let secrets = self.secrets();
        if let Some(s) = self
            .parent
            .get_opt("secret_get", &secrets, &cloud_init_secret(&vm.name))
            .await?
        {
            if owned_by_vm(&s, &vm.name) && self.is_ours(&s) {
                self.parent
                    .delete(
                        "secret_delete",
                        &secrets,
                        &s.name_any(),
                        &DeleteParams::default(),
                    )
                    .await?;
            }
        }
        Ok(removal)
    }
}

#[cfg(test)]
mod tests;
