//! Generated protobuf and gRPC code: the CSI spec (v1.10) and kubelet's plugin
//! registration API. Nothing hand-written lives here but the module tree and the one
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

pub use csi::v1 as csi_v1;

/// The compiled descriptors of every proto under `proto/`, for tests that pin the wire.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// The `volume_context` key under which the Overcast driver returns a volume's CSI name
/// (CreateVolume's `name`): CSI's Volume has no name field, and `overcastctl controller
/// list` shows it from here.
pub const VOLUME_NAME_KEY: &str = "csi.overcast.dev/volume-name";
