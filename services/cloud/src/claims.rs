//! Creates of one disk name, one at a time in this process. A cloud that keeps no names
//! unique (Cinder, the oVirt engine) would otherwise let two concurrent creates of one
//! CSI name both find none and make two disks; the second is told Busy (retryable) and
//! finds the first's disk when it comes back.

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

impl Drop for Claim {
    fn drop(&mut self) {
        if let Ok(mut names) = self.names.lock() {
            names.remove(&self.name);
        }
    }
}

impl NameClaims {
    /// The name's create slot, or Busy while another create of it runs.
    pub fn claim(&self, name: &str) -> Result<Claim> {
        let mut names = self
            .names
            .lock()
            .map_err(|_| CloudError::Internal("the create lock is poisoned".into()))?;
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
}
