//! The one place a cloud error becomes a gRPC status, per the CSI spec's error tables.
//! Handlers that give a variant another meaning (DeleteVolume treats NotFound as
//! success) match it before calling here.

use overcast_cloud::CloudError;
use tonic::{Code, Status};

/// `op` names the operation and its object: "create volume pvc-1".
pub fn to_status(op: &str, err: CloudError) -> Status {
    let code = match &err {
        CloudError::NotFound { .. } => Code::NotFound,
        CloudError::ParameterMismatch { .. } => Code::AlreadyExists,
        CloudError::FailedPrecondition(_) => Code::FailedPrecondition,
        // The spec's "volume in use" (DeleteVolume's table), and external-attacher
        // counts FAILED_PRECONDITION as not final: it keeps retrying with backoff.
        CloudError::InUse(_) => Code::FailedPrecondition,
        CloudError::Busy(_) => Code::Aborted,
        CloudError::ResourceExhausted(_) => Code::ResourceExhausted,
        CloudError::OutOfRange(_) => Code::OutOfRange,
        CloudError::InvalidArgument(_) => Code::InvalidArgument,
        CloudError::Unavailable(_) => Code::Unavailable,
        CloudError::DeadlineExceeded(_) => Code::DeadlineExceeded,
        CloudError::Conflict(_) => Code::Aborted,
        CloudError::Unauthenticated(_) => Code::Unauthenticated,
        CloudError::PermissionDenied(_) => Code::PermissionDenied,
        CloudError::Io { source, .. } => io_code(source),
        CloudError::Internal(_) => Code::Internal,
    };
    Status::new(code, format!("{op}: {err}"))
}

/// A failed system call by its root cause: what the CO or an operator can act on gets
/// the code that says so; the rest is the driver's own failure.
fn io_code(err: &std::io::Error) -> Code {
    use std::io::ErrorKind;
    match err.kind() {
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => Code::ResourceExhausted,
        ErrorKind::ReadOnlyFilesystem => Code::Unavailable,
        ErrorKind::ResourceBusy => Code::FailedPrecondition,
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cloud_error_has_its_code() {
        let cases = [
            (CloudError::not_found("disk", "d"), Code::NotFound),
            (
                CloudError::ParameterMismatch {
                    kind: "disk",
                    name: "n".into(),
                    reason: "r".into(),
                },
                Code::AlreadyExists,
            ),
            (
                CloudError::FailedPrecondition("attached".into()),
                Code::FailedPrecondition,
            ),
            (
                CloudError::InUse("mounted".into()),
                Code::FailedPrecondition,
            ),
            (CloudError::Busy("busy".into()), Code::Aborted),
            (
                CloudError::ResourceExhausted("full".into()),
                Code::ResourceExhausted,
            ),
            (CloudError::OutOfRange("big".into()), Code::OutOfRange),
            (
                CloudError::InvalidArgument("bad".into()),
                Code::InvalidArgument,
            ),
            (CloudError::Unavailable("down".into()), Code::Unavailable),
            (
                CloudError::io("write", std::io::Error::other("eio")),
                Code::Internal,
            ),
            (
                CloudError::io("commit", std::io::ErrorKind::StorageFull.into()),
                Code::ResourceExhausted,
            ),
            (
                CloudError::io("commit", std::io::ErrorKind::ReadOnlyFilesystem.into()),
                Code::Unavailable,
            ),
            (CloudError::Internal("corrupt".into()), Code::Internal),
            (
                CloudError::DeadlineExceeded("slow".into()),
                Code::DeadlineExceeded,
            ),
            (CloudError::Conflict("locked".into()), Code::Aborted),
            (
                CloudError::Unauthenticated("expired".into()),
                Code::Unauthenticated,
            ),
            (
                CloudError::PermissionDenied("not allowed".into()),
                Code::PermissionDenied,
            ),
        ];
        for (err, code) in cases {
            let status = to_status("attach volume v to node n", err);
            assert_eq!(status.code(), code);
            assert!(
                status.message().starts_with("attach volume v to node n: "),
                "{}",
                status.message()
            );
        }
    }
}
