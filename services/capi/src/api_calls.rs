//! Every request `capi` makes to the management cluster's API (the RBAC `deploy/` grants
//! it, and nothing more: the manifests are tested against these lists). The parent
//! cluster's (DVP) and the engine's (zVirt) are the cloud's, granted there.

use overcast_kube::ApiCall;

/// Where node-manager keeps its Cluster API objects (`--namespace` in the manifests).
pub const NODE_MANAGER_NAMESPACE: &str = "d8-cloud-instance-manager";
/// The Lease the manifests elect the leader on.
pub const LEASE_NAME: &str = "overcast-capi";
pub const LEASE_NAMESPACE: &str = "kube-system";

const INFRA: &str = "infrastructure.cluster.x-k8s.io";

/// What both Cluster API providers ask of node-manager's namespace.
const CAPI_COMMON: &[ApiCall] = &[
    // core.rs: the owner Machine read; the Machine watch maps a change to its infra
    // machine.
    ApiCall {
        group: "cluster.x-k8s.io",
        resource: "machines",
        verbs: &["get", "list", "watch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    // core.rs: the Machine's Cluster (paused, infrastructure ready).
    ApiCall {
        group: "cluster.x-k8s.io",
        resource: "clusters",
        verbs: &["get"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    // core.rs: the bootstrap data (the Machine names its Secret).
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
];

/// What every cloud asks, node-manager's Secret kept alone or with a provider.
const REGISTRATION_COMMON: &[ApiCall] = &[
    // main.rs: the Lease is created once (RBAC cannot limit create by name), then read
    // and replaced by name.
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["create"],
        namespace: Some(LEASE_NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "update"],
        namespace: Some(LEASE_NAMESPACE),
        names: &[LEASE_NAME],
    },
    // registration.rs: what the installer recorded, read.
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get"],
        namespace: Some("kube-system"),
        names: &["d8-provider-cluster-configuration"],
    },
];

/// zVirt: the ZvirtMachine and ZvirtCluster controllers and node-manager's Secret.
const ZVIRT: &[ApiCall] = &[
    // zvirt/machine.rs: watched; the finalizer, id and providerID by patch; the status.
    ApiCall {
        group: INFRA,
        resource: "zvirtmachines",
        verbs: &["list", "watch", "patch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: INFRA,
        resource: "zvirtmachines/status",
        verbs: &["patch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    // zvirt/cluster.rs: watched, the endpoint patched; zvirt/machine.rs reads it.
    ApiCall {
        group: INFRA,
        resource: "zvirtclusters",
        verbs: &["get", "list", "watch", "patch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: INFRA,
        resource: "zvirtclusters/status",
        verbs: &["patch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    // registration.rs: node-manager's Secret, read and applied (server-side apply
    // creates it the first time: a create that names it).
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get", "patch", "create"],
        namespace: Some("kube-system"),
        names: &["d8-node-manager-cloud-provider"],
    },
];

/// DVP: the DeckhouseMachine and DeckhouseCluster controllers and node-manager's two
/// Secrets.
const DVP: &[ApiCall] = &[
    ApiCall {
        group: INFRA,
        resource: "deckhousemachines",
        verbs: &["list", "watch", "patch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: INFRA,
        resource: "deckhousemachines/status",
        verbs: &["patch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: INFRA,
        resource: "deckhouseclusters",
        verbs: &["list", "watch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: INFRA,
        resource: "deckhouseclusters/status",
        verbs: &["patch"],
        namespace: Some(NODE_MANAGER_NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get", "patch", "create"],
        namespace: Some("kube-system"),
        names: &[
            "d8-node-manager-cloud-provider",
            "d8-node-manager-cloud-provider-dvp",
        ],
    },
];

/// OpenStack and vSphere: node-manager's Secret alone.
const REGISTRATION_ALONE: &[ApiCall] = &[ApiCall {
    group: "",
    resource: "secrets",
    verbs: &["get", "patch", "create"],
    namespace: Some("kube-system"),
    names: &["d8-node-manager-cloud-provider"],
}];

/// The calls `capi --cloud <cloud>` makes in the manifests; `None` for a cloud they do not
/// run it for (local: no Deckhouse module reads its registration).
pub fn for_cloud(cloud: &str) -> Option<Vec<ApiCall>> {
    let parts: &[&[ApiCall]] = match cloud {
        "zvirt" => &[REGISTRATION_COMMON, CAPI_COMMON, ZVIRT],
        "dvp" => &[REGISTRATION_COMMON, CAPI_COMMON, DVP],
        "openstack" => &[REGISTRATION_COMMON, REGISTRATION_ALONE],
        // The vCenter credentials of its `vsphere` object, from upstream's Secret.
        "vsphere" => &[
            REGISTRATION_COMMON,
            REGISTRATION_ALONE,
            overcast_cloud_vsphere::credentials::API_CALLS,
        ],
        _ => return None,
    };
    Some(parts.iter().flat_map(|p| p.iter()).cloned().collect())
}
