//! Typed cloud errors. Services map them to their wire codes (gRPC, HTTP) in one place;
//! nothing here knows about the wire.

use std::io;

pub type Result<T, E = CloudError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// The object does not exist (or an id that cannot name one of ours).
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// A name-idempotent create found the name taken by an object with other parameters.
    #[error("disk named {name:?} already exists with other parameters: {reason}")]
    ParameterMismatch { name: String, reason: String },
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
    /// The cloud (or its store) cannot be reached right now.
    #[error("{0}")]
    Unavailable(String),
    /// A system call failed while acting on `context`.
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    /// The cloud's metadata store failed.
    #[error("metadata store: {0}")]
    Store(String),
}

impl CloudError {
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    pub fn not_found(kind: &'static str, id: impl Into<String>) -> Self {
        Self::NotFound {
            kind,
            id: id.into(),
        }
    }
}
