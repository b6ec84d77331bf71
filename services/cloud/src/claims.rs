//! Creates of one disk name, one at a time in this process. A cloud that keeps no names
//! unique (Cinder, the oVirt engine) would otherwise let two concurrent creates of one
//! CSI name both find none and make two disks; the second is told Busy (retryable) and
//! finds the first's disk when it comes back. The CSI driver's in-flight set (one
//! operation per volume and per name) is the same mechanism with its own keys.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::{CloudError, Result};

#[derive(Debug, Clone, Default)]
pub struct NameClaims {
    names: Arc<Mutex<BTreeSet<String>>>,
}

/// Holds a name until dropped.
#[derive(Debug)]
pub struct Claim {
    names: Arc<Mutex<BTreeSet<String>>>,
    name: String,
}

// A set of names stays consistent whatever panicked while holding its lock: a poisoned
// lock is used as is (refusing would hold every name, or leak this one, for good).
impl Drop for Claim {
    fn drop(&mut self) {
        self.names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.name);
    }
}

impl NameClaims {
    /// The name's create slot, or Busy while another create of it runs.
    pub fn claim(&self, name: &str) -> Result<Claim> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if !names.insert(name.to_owned()) {
            return Err(CloudError::Busy(format!(
                "a create of disk {name:?} is in progress"
            )));
        }
        Ok(Claim {
            names: Arc::clone(&self.names),
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_held_until_its_claim_is_dropped() {
        let claims = NameClaims::default();
        let first = claims.claim("pvc-1").unwrap();
        assert!(matches!(claims.claim("pvc-1"), Err(CloudError::Busy(_))));
        let _other = claims.claim("pvc-2").unwrap();
        drop(first);
        claims.claim("pvc-1").unwrap();
    }

    #[test]
    fn a_panic_under_the_lock_neither_blocks_nor_leaks_names() {
        let claims = NameClaims::default();
        let held = claims.claim("pvc-1").unwrap();
        let names = Arc::clone(&claims.names);
        let _ = std::thread::spawn(move || {
            let _guard = names.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        assert!(claims.names.is_poisoned());
        assert!(matches!(claims.claim("pvc-1"), Err(CloudError::Busy(_))));
        drop(held);
        claims
            .claim("pvc-1")
            .expect("released despite the poisoned lock");
    }
}
