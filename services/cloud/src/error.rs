//! Typed cloud errors, the same for every provider. Services map them to their wire codes
//! in one place; nothing here knows about the wire.
//!
//! What each variant means for the callers (a provider picks the variant by what a retry
//! would do, not by its cloud's status code):
//!
//! | variant | CSI code (`services/csi/src/errors.rs`) | CCM / discoverer |
//! |---|---|---|
//! | `NotFound` | NOT_FOUND (DeleteVolume, ControllerUnpublish: success) | gone — only when the cloud said so |
//! | `ParameterMismatch` | ALREADY_EXISTS | — |
//! | `FailedPrecondition`, `InUse` | FAILED_PRECONDITION | retried with backoff |
//! | `Busy`, `Conflict` | ABORTED | retried soon |
//! | `ResourceExhausted` | RESOURCE_EXHAUSTED | retried with backoff |
//! | `OutOfRange` | OUT_OF_RANGE | — |
//! | `InvalidArgument` | INVALID_ARGUMENT | not retried until the object changes |
//! | `Unavailable`, `DeadlineExceeded` | UNAVAILABLE, DEADLINE_EXCEEDED | retried with backoff; never "gone" |
//! | `Unauthenticated`, `PermissionDenied` | UNAUTHENTICATED, PERMISSION_DENIED | retried with backoff (credentials get fixed); never "gone" |
//! | `Io` | by the system call's cause (ENOSPC: RESOURCE_EXHAUSTED, EROFS: UNAVAILABLE, EBUSY: FAILED_PRECONDITION, else INTERNAL) | retried |
//! | `Internal` | INTERNAL | retried with backoff |
//!
//! No variant but `NotFound` ever means that something is gone: an error a provider
//! cannot classify is `Unavailable` or `Internal`, so that nothing is deleted on it.

use std::io;

pub type Result<T, E = CloudError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// The object does not exist (or an id that cannot name one of ours).
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// A name-idempotent create found the name taken by an object with other parameters
    /// (a disk of another size, a snapshot of another disk).
    #[error("{kind} named {name:?} already exists with other parameters: {reason}")]
    ParameterMismatch {
        kind: &'static str,
        name: String,
        reason: String,
    },
    /// The request conflicts with the object's state in a way a retry will not fix
    /// until something else changes (e.g. deleting an attached disk).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The object is held by something that has to let go first — a disk still mounted
    /// or open where it is attached. Nothing was changed; a retry succeeds once the
    /// holder lets go.
    #[error("{0}")]
    InUse(String),
    /// An operation on the same object is in progress; retrying later will succeed.
    #[error("{0}")]
    Busy(String),
    /// A quota or a limit is reached: attach slots, space, placement.
    #[error("{0}")]
    ResourceExhausted(String),
    /// A size the cloud cannot provide.
    #[error("{0}")]
    OutOfRange(String),
    /// The caller asked for something the cloud does not accept.
    #[error("{0}")]
    InvalidArgument(String),
    /// The cloud (or its store) cannot be reached right now, or answered with a server
    /// error or something that is not its API (an HTML error page).
    #[error("{0}")]
    Unavailable(String),
    /// The cloud did not answer within the call's deadline; the outcome is unknown.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// The object changed or is locked on the cloud's side (an HTTP 409, a disk in a
    /// locked state); nothing was changed and a retry will succeed.
    #[error("{0}")]
    Conflict(String),
    /// The cloud refused the credentials (expired, revoked, wrong).
    #[error("{0}")]
    Unauthenticated(String),
    /// The credentials are valid but not allowed to do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// A system call failed while acting on `context`.
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    /// The provider's own failure (a store, a response it cannot read).
    #[error("{0}")]
    Internal(String),
}

impl CloudError {
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// Whether the cloud said the object does not exist: the only error on which
    /// anything may be treated as gone.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether retrying the same call later can succeed without anything else changing.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Busy(_)
            | Self::Conflict(_)
            | Self::Unavailable(_)
            | Self::DeadlineExceeded(_)
            | Self::ResourceExhausted(_)
            | Self::InUse(_)
            | Self::Internal(_)
            | Self::Io { .. } => true,
            // Someone fixes the credentials or the grant; keep trying, slowly.
            Self::Unauthenticated(_) | Self::PermissionDenied(_) => true,
            Self::NotFound { .. }
            | Self::ParameterMismatch { .. }
            | Self::FailedPrecondition(_)
            | Self::OutOfRange(_)
            | Self::InvalidArgument(_) => false,
        }
    }

    pub fn not_found(kind: &'static str, id: impl Into<String>) -> Self {
        Self::NotFound {
            kind,
            id: id.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_not_found_means_gone_and_outages_are_retried() {
        let outages = [
            CloudError::Unavailable("down".into()),
            CloudError::DeadlineExceeded("slow".into()),
            CloudError::Unauthenticated("expired".into()),
            CloudError::PermissionDenied("denied".into()),
            CloudError::Conflict("locked".into()),
            CloudError::Internal("bad answer".into()),
        ];
        for e in &outages {
            assert!(!e.is_not_found(), "{e:?}");
            assert!(e.is_retryable(), "{e:?}");
        }
        assert!(CloudError::not_found("disk", "d").is_not_found());
        assert!(!CloudError::InvalidArgument("x".into()).is_retryable());
    }
}
