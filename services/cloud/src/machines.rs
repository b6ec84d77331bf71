//! VMs as a Cluster API infrastructure provider leads them: found by name (the Machine's),
//! made from a cloud-specific spec with the bootstrap data, finished and started, their
//! guest addresses read; and on delete stopped, rid of every disk a CSI driver attached
//! (so removing the VM cannot take a user's volume with it), and removed. Every step
//! looks at what exists first, so a restart in the middle adopts the VM it finds instead
//! of making a second one.

use std::net::IpAddr;

use crate::Result;

/// Where a VM is in its life, as the controller needs to tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmPhase {
    /// Being made (the cloud still copies its disks).
    Creating,
    /// Made and not running: to be finished and started.
    Stopped,
    /// Starting (or stopping); to be waited for.
    Transitioning(String),
    Running,
    /// A state no retry gets it out of (paused, not responding, unknown …), named.
    Failed(String),
}

/// One VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// The cloud's id of it (what the providerID carries).
    pub id: String,
    pub name: String,
    pub phase: VmPhase,
    /// What the cloud says the VM still waits for, when it says (DVP's first False
    /// condition of a Pending VM: its class, disks or provisioning).
    pub waiting_for: Option<String>,
}

/// What a removal found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removal {
    /// The disks detached from the VM before it was removed (kept, not deleted).
    pub detached: Vec<String>,
}

/// A cloud's VMs, for its Cluster API provider.
#[async_trait::async_trait]
pub trait Machines: Send + Sync {
    /// What a VM is made from (template or image, shape, disks, network).
    type Spec: Send + Sync;

    /// The VM named `name`, if there is one.
    async fn find(&self, name: &str) -> Result<Option<Vm>>;

    /// Makes the VM `name` from `spec` with `bootstrap` (the cloud-init data) and answers it
    /// as it stands, not waiting for it to be made. The caller has looked first: a VM of
    /// that name made meanwhile is the cloud's AlreadyExists.
    async fn create(&self, name: &str, spec: &Self::Spec, bootstrap: &[u8]) -> Result<Vm>;

    /// Finishes a made VM as `spec` says (what the cloud cannot set at creation, or a part
    /// an interrupted create left out, made with `bootstrap`) and starts it. Each part is
    /// skipped when it is already so.
    async fn start(&self, vm: &Vm, spec: &Self::Spec, bootstrap: &[u8]) -> Result<()>;

    /// The guest's addresses (loopback and link-local left out); empty until it reports.
    async fn addresses(&self, vm: &Vm) -> Result<Vec<IpAddr>>;

    /// Stops the VM, detaches every disk it was not made with, and removes it with its own
    /// disks. Answers only once the VM is gone; a VM already gone is success.
    async fn remove(&self, vm: &Vm) -> Result<Removal>;
}
