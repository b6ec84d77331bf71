//! vCenter for trying and testing the vSphere suite without one (`overcast-sim vsphere`):
//! vcsim (govmomi's simulator, a binary built from Debian's govmomi sources) started as
//! the tests start it, and the fronts that stand before it for what vcsim leaves out —
//! the ESXi host's and the guest's part of a CNS attach ([`esxi_host`]), a real vCenter's
//! timing, paging and refusals ([`vcsim_front`]), and CNS snapshots ([`cns_snapshots`]).

pub mod cns_snapshots;
pub mod esxi_host;
pub mod vcsim;
pub mod vcsim_front;
