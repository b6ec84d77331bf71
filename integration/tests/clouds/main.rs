//! The providers against their clouds: the real OpenStack services, vcsim, the zVirt engine simulator (with the oVirt SDK).
//!
//! One test binary for the area (a module per former test file): a build links it once.

mod openstack_real_cloud;
mod vsphere_real_cloud;
mod zvirt_engine;
