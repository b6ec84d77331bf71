//! The objects the discoverer publishes and every request it makes for them
//! (`publish.rs`): read the current object, then server-side apply only when it differs.

use overcast_kube::ApiCall;

pub const NAMESPACE: &str = "kube-system";
pub const SECRET: &str = "d8-cloud-provider-discovery-data";
pub const SECRET_KEY: &str = "discovery-data.json";
pub const CONDITIONS: &str = "d8-cloud-provider-conditions";
pub const CATALOG: &str = "for-cluster-autoscaler";
/// The InstanceTypesCatalog resource (Deckhouse's; `deploy/overlays/local` carries a CRD
/// for clusters without Deckhouse).
pub const CATALOG_GROUP: &str = "deckhouse.io";
pub const CATALOG_VERSION: &str = "v1alpha1";
pub const CATALOG_KIND: &str = "InstanceTypesCatalog";
pub const CATALOG_PLURAL: &str = "instancetypescatalogs";

pub const API_CALLS: &[ApiCall] = &[
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get", "patch"],
        namespace: Some(NAMESPACE),
        names: &[SECRET],
    },
    ApiCall {
        group: "",
        resource: "configmaps",
        verbs: &["get", "patch"],
        namespace: Some(NAMESPACE),
        names: &[CONDITIONS],
    },
    ApiCall {
        group: CATALOG_GROUP,
        resource: CATALOG_PLURAL,
        verbs: &["get", "patch"],
        namespace: None,
        names: &[CATALOG],
    },
    // A server-side apply that creates the object is authorized as a create too, and
    // RBAC cannot limit create by name.
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["create"],
        namespace: Some(NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: "",
        resource: "configmaps",
        verbs: &["create"],
        namespace: Some(NAMESPACE),
        names: &[],
    },
    ApiCall {
        group: CATALOG_GROUP,
        resource: CATALOG_PLURAL,
        verbs: &["create"],
        namespace: None,
        names: &[],
    },
    // Orphan detection: which disks no PersistentVolume references.
    ApiCall {
        group: "",
        resource: "persistentvolumes",
        verbs: &["list"],
        namespace: None,
        names: &[],
    },
];
