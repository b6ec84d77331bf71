//! The parent's CRDs: the kit's `virtualization.deckhouse.io` ones, installed into the
//! API server the simulator plays the parent on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use super::objects::wait_for;
use super::FIELD_MANAGER;

/// Where the kit's virtualization CRDs are: `OVERCAST_DVP_CRDS`, else `shared/kit/…`
/// beside the project of the package cargo runs (its `CARGO_MANIFEST_DIR`, read now: a
/// binary a kept target directory holds serves a clone at another path), else beside
/// the checkout this was built in.
pub fn crd_dir() -> PathBuf {
    const KIT_CRDS: &str = "shared/kit/crds/virtualization";
    if let Some(dir) = std::env::var_os("OVERCAST_DVP_CRDS") {
        return dir.into();
    }
    let beside = std::env::var_os("CARGO_MANIFEST_DIR").and_then(|package| {
        Path::new(&package)
            .ancestors()
            .map(|a| a.join(KIT_CRDS))
            .find(|d| d.is_dir())
    });
    beside.unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../..")
            .join(KIT_CRDS)
    })
}

/// The parent's CRDs the kit lacks, kept verbatim from deckhouse/virtualization in
/// `sim/dvp/crds/` (its README names the commit) and carried in the binary, so a program
/// run anywhere installs them.
const OWN_CRDS: &[(&str, &str)] = &[(
    "sim/dvp/crds/virtualdisksnapshots.yaml",
    include_str!("../crds/virtualdisksnapshots.yaml"),
)];

/// Installs the virtualization CRDs (server-side apply) and waits until they serve: the
/// kit's, then the ones it lacks.
pub async fn install_crds(client: &Client) {
    install_crds_from(client, &crd_dir()).await
}

/// [`install_crds`] from the kit's CRDs in `dir` (deckhouse/virtualization's `crds/`), and
/// the ones the kit lacks.
pub async fn install_crds_from(client: &Client, dir: &Path) {
    let mut texts: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read CRD");
        texts.push((path.display().to_string(), text));
    }
    texts.extend(
        OWN_CRDS
            .iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned())),
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for (path, text) in texts {
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
        names.push(name);
    }
    for name in names {
        wait_for(
            &format!("CRD {name} established"),
            Duration::from_secs(30),
            async || {
                let crd = crds.get(&name).await.ok()?;
                let established = crd
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            },
        )
        .await;
    }
}
