//! The objects the discoverer publishes and every request it makes for them
//! (`publish.rs`): read the current object, then server-side apply only when it differs.

use overcast_kube::ApiCall;

pub const NAMESPACE: &str = "kube-system";
pub const SECRET: &str = "d8-cloud-provider-discovery-data";
pub const SECRET_KEY: &str = "discovery-data.json";
/// What the installer already knows (`cloud-provider-discovery-data.json` in it): the
/// base the discovered fields are laid over.
pub const INSTALLER_SECRET: &str = "d8-provider-cluster-configuration";
pub const INSTALLER_KEY: &str = "cloud-provider-discovery-data.json";
pub const CONDITIONS: &str = "d8-cloud-provider-conditions";
pub const CATALOG: &str = "for-cluster-autoscaler";
/// The InstanceTypesCatalog resource (Deckhouse's; `deploy/overlays/local` carries a CRD
/// for clusters without Deckhouse).
pub const CATALOG_GROUP: &str = "deckhouse.io";
pub const CATALOG_VERSION: &str = "v1alpha1";
pub const CATALOG_KIND: &str = "InstanceTypesCatalog";
pub const CATALOG_PLURAL: &str = "instancetypescatalogs";

pub const API_CALLS: &[ApiCall] = &[
    // Read, then server-side apply by name. An apply that creates is authorized as a
    // create with the object's name, so create is limited by name too; the discoverer
    // never POSTs. delete: a discovery Secret of the wrong type (its type cannot be
    // changed) is deleted and published anew.
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get", "patch", "create", "delete"],
        namespace: Some(NAMESPACE),
        names: &[SECRET],
    },
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get"],
        namespace: Some(NAMESPACE),
        names: &[INSTALLER_SECRET],
    },
    ApiCall {
        group: "",
        resource: "configmaps",
        verbs: &["get", "patch", "create"],
        namespace: Some(NAMESPACE),
        names: &[CONDITIONS],
    },
    ApiCall {
        group: CATALOG_GROUP,
        resource: CATALOG_PLURAL,
        verbs: &["get", "patch", "create"],
        namespace: None,
        names: &[CATALOG],
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
