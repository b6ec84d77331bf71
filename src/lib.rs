//! Generated protobuf and gRPC code: the CSI spec (v1.10), kubelet's plugin
//! registration API and Terraform's provider plugin protocol 6. Nothing hand-written lives here but the module tree and the one
//! constant the driver and its client share.

#![allow(clippy::all, missing_docs, unreachable_pub)]

pub mod csi {
    pub mod v1 {
        tonic::include_proto!("csi.v1");
    }
}

pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}

/// Terraform's provider plugin protocol, version 6 (the subset Terraform >= 1.0 and
/// OpenTofu call; see `proto/tfplugin6/tfplugin6.proto`).
pub mod tfplugin6 {
    tonic::include_proto!("tfplugin6");
}

/// go-plugin's controller (`plugin.GRPCController`), which Terraform calls to end a plugin.
pub mod goplugin {
    tonic::include_proto!("plugin");
}

pub use csi::v1 as csi_v1;
/// The well-known types the generated code uses (CSI's `creation_time` is a
/// `google.protobuf.Timestamp`), so a user names the same version.
pub use prost_types;

/// The compiled descriptors of every proto under `proto/`, for tests that pin the wire.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// The `volume_context` key under which the Overcast driver returns a volume's CSI name
/// (CreateVolume's `name`): CSI's Volume has no name field, and `overcastctl controller
/// list` shows it from here.
pub const VOLUME_NAME_KEY: &str = "csi.overcast.dev/volume-name";
