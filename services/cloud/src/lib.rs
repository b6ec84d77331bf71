//! The cloud abstraction: one set of traits, split by capability, that every Overcast
//! service reaches its cloud through, and the providers that implement them.
//!
//! A provider implements only the capabilities its cloud has; the services ask for the
//! capability they need and map the typed [`CloudError`] to their wire codes in one place.

mod disks;
mod error;
pub mod local;

pub use disks::{Attachment, Disk, DiskCondition, DiskSpec, Disks, Zone};
pub use error::{CloudError, Result};
