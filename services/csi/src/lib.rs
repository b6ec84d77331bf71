//! The Overcast CSI driver: Identity, Controller and Node services over one cloud.
//!
//! [`driver`] picks the services for a mode and serves them on a Unix socket; the
//! services take their cloud as a value, so each can be tested alone.

pub mod api_calls;
pub mod controller;
pub mod driver;
pub mod errors;
pub mod identity;
pub mod inflight;
pub mod node;
pub mod options;
pub mod validation;
