//! Cluster API in the kit's API server for the `capi` tests: Cluster API's own CRDs (the
//! kit's, `../shared/kit/crds/cluster-api/`) and the providers' from `deploy/crds/`, and
//! what CAPI's core controllers would do to the objects (the kit runs none of them).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

/// Where the kit's Cluster API CRDs are.
pub fn capi_crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kit/crds/cluster-api")
}

/// The providers' CRDs as shipped (`deploy/crds/capi-<provider>.yaml`).
pub fn provider_crds(provider: &str) -> Vec<CustomResourceDefinition> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/crds")
        .join(format!("capi-{provider}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.split("\n---\n")
        .skip(1)
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

/// Cluster API's core CRDs from the kit.
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    let dir = capi_crd_dir();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read CRD");
        out.push(
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        );
    }
    out
}

/// Applies `crds` (server-side) and waits until each is established.
pub async fn install(client: &Client, crds: &[CustomResourceDefinition]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.name_any();
        api.patch(
            &name,
            &PatchParams::apply("overcast-it").force(),
            &Patch::Apply(crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
    }
    for crd in crds {
        let name = crd.name_any();
        crate::real::wait_for(
            &format!("CRD {name} established"),
            Duration::from_secs(30),
            async || {
                let crd = api.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await;
    }
}
