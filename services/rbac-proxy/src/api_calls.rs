//! Every request the proxy makes to the Kubernetes API (`authz.rs`): one TokenReview to
//! learn who the caller is, one SubjectAccessReview to learn whether they may.

use overcast_kube::ApiCall;

pub const API_CALLS: &[ApiCall] = &[
    ApiCall {
        group: "authentication.k8s.io",
        resource: "tokenreviews",
        verbs: &["create"],
        namespace: None,
        names: &[],
    },
    ApiCall {
        group: "authorization.k8s.io",
        resource: "subjectaccessreviews",
        verbs: &["create"],
        namespace: None,
        names: &[],
    },
];
