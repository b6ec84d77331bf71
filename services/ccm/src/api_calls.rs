//! Every request the ccm makes to the Kubernetes API (the RBAC the manifests grant it,
//! and nothing more: `deploy/` is tested against this list).

use overcast_kube::ApiCall;

use overcast_kube::leader::{DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE};

pub const API_CALLS: &[ApiCall] = &[
    // nodes.rs: the node reflector lists and watches; initialization and address sync
    // merge-patch the Node and strategic-patch its status; lifecycle deletes and taints;
    // a patch refused with 409 reads the node again (get) and retries.
    ApiCall {
        group: "",
        resource: "nodes",
        verbs: &["get", "list", "watch", "patch", "delete"],
        namespace: None,
        names: &[],
    },
    ApiCall {
        group: "",
        resource: "nodes/status",
        verbs: &["patch"],
        namespace: None,
        names: &[],
    },
    // services.rs: the Service reflector; the finalizer by merge patch, ingress on status.
    ApiCall {
        group: "",
        resource: "services",
        verbs: &["list", "watch", "patch"],
        namespace: None,
        names: &[],
    },
    ApiCall {
        group: "",
        resource: "services/status",
        verbs: &["patch"],
        namespace: None,
        names: &[],
    },
    // services.rs: EndpointSlices are watched (a change re-runs its Service) and listed
    // per `externalTrafficPolicy: Local` Service (its backends are the nodes with a
    // ready endpoint).
    ApiCall {
        group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: &["list", "watch"],
        namespace: None,
        names: &[],
    },
    // kube's event Recorder: creates an Event, patches it when the same one repeats.
    ApiCall {
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        namespace: None,
        names: &[],
    },
    // leader.rs: the Lease is created once (RBAC cannot limit create by name) and then
    // read and replaced by name.
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["create"],
        namespace: Some(DEFAULT_LEASE_NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "update"],
        namespace: Some(DEFAULT_LEASE_NAMESPACE),
        names: &[DEFAULT_LEASE_NAME],
    },
];
