//! The Terraform provider and Deckhouse's layouts, with Terraform itself (OVERCAST_TERRAFORM).
//!
//! One test binary for the area (a module per former test file): a build links it once.

mod terraform_dvp;
mod terraform_openstack;
mod terraform_zvirt;
mod terraform_zvirt_layouts;
