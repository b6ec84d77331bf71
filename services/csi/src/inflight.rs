//! The set of volumes (and volume names) with an operation in flight. A second caller
//! for the same key gets ABORTED: the spec's answer to a CO that lost track of its own
//! calls, which a retry after the first call ends always fixes.

use overcast_cloud::{Claim, NameClaims};
use tonic::Status;

#[derive(Clone, Default)]
pub struct Inflight {
    keys: NameClaims,
}

/// Holds a key until dropped.
pub type InflightGuard = Claim;

impl Inflight {
    /// Claims `key`, or answers ABORTED naming `what` when someone holds it.
    pub fn claim(&self, key: String, what: &str) -> Result<InflightGuard, Status> {
        self.keys
            .claim(&key)
            .map_err(|_| Status::aborted(format!("an operation on {what} is already in progress")))
    }

    pub fn volume(&self, volume_id: &str) -> Result<InflightGuard, Status> {
        self.claim(
            format!("volume/{volume_id}"),
            &format!("volume {volume_id}"),
        )
    }

    pub fn name(&self, name: &str) -> Result<InflightGuard, Status> {
        self.claim(format!("name/{name}"), &format!("volume named {name:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_until_its_guard_drops() {
        let inflight = Inflight::default();
        let guard = inflight.volume("v1").unwrap();
        assert_eq!(
            inflight.volume("v1").err().map(|s| s.code()),
            Some(tonic::Code::Aborted)
        );
        // Names and ids live in different spaces; other volumes are unaffected.
        let _other = inflight.volume("v2").unwrap();
        let _name = inflight.name("v1").unwrap();
        drop(guard);
        assert!(inflight.volume("v1").is_ok());
    }
}
