//! The CSI driver on the local cloud: its RPCs over real sockets, the node plugin's mounts, crashes, lost state, fuzzing, csi-sanity, the registrar and the CLI.
//!
//! One test binary for the area (a module per former test file): a build links it once.

mod any_authority;
mod attach_once;
mod controller;
mod controller_guards;
mod crash;
mod csi_sanity;
mod ctl;
mod fuzz;
mod lost_state;
mod namespaced;
mod node;
mod node_owns;
mod process;
mod proto_wire;
mod read_only_state;
mod registrar;
mod snapshots;
mod startup;
mod store_full;
mod upgrade;
