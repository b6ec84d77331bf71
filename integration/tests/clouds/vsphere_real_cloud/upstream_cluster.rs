//! vsphere-csi-driver's volumes after a switch, made as that driver makes them — not by
//! our code: a raw `CnsCreateVolume` of its create spec (`pkg/csi/service/common/
//! vsphereutil.go` at bf809025: a BLOCK volume whose `containerCluster` and
//! `containerClusterArray` carry its cluster id, `vSphereUser` and the VANILLA flavour),
//! then the PV and PVC entities its syncer records (`CnsUpdateVolumeMetadata` with
//! `CnsKubernetesEntityMetadata`, the PVC referring to the PV). Another cluster sharing
//! the vCenter has one too. The driver runs with the vsphere overlay's own cloud-config
//! (deploy/overlays/vsphere/cloud-config.yaml, pointed at vcsim):
//! - as shipped (no `cluster-id`, `--cluster` left at `kubernetes`), neither volume is
//!   listed, and an attach or delete of either is refused, naming the key that decides;
//! - with that driver's `cluster-id` carried over, its volume is listed, attached and
//!   detached; the other cluster's is still neither listed nor touched.

use overcast_cloud_vsphere::cns::{Cns, Filter};
use overcast_cloud_vsphere::session::Endpoint;
use overcast_cloud_vsphere::soap::{el, Moref};
use overcast_cloud_vsphere::xml::Element;
use overcast_integration::{attach_request, csi_v1 as csi, detach_request, mount_cap, Csi};

use super::*;

/// vsphere-csi-driver's cluster id when `cluster-id` is unset: a UUID it generated (and
/// kept in its `vsphere-csi-cluster-id` ConfigMap).
const THEIRS: &str = "3c5e0a5e-7b4f-4c2b-9a57-1a3f0d9e8b21";
const OTHER: &str = "another-cluster";

/// Its container cluster, as `GetContainerCluster` fills it.
fn container_cluster(tag: &str, cluster: &str) -> String {
    format!(
        "<{tag}>{}{}{}{}</{tag}>",
        el("clusterType", "KUBERNETES"),
        el("clusterId", cluster),
        el("vSphereUser", "k8s@vsphere.local"),
        el("clusterFlavor", "VANILLA"),
    )
}

/// A volume made as vsphere-csi-driver makes one, with its syncer's entities: its id.
async fn made_upstream(admin: &Vcenter, datastore: &Moref, cluster: &str, pv: &str) -> String {
    let manager = Moref::new("CnsVolumeManager", "cns-volume-manager");
    let create = format!(
        "{}<createSpecs>{}{}{}<metadata>{}{}</metadata>\
         <backingObjectDetails xsi:type=\"CnsBlockBackingDetails\">{}</backingObjectDetails>\
         </createSpecs>",
        manager.xml("_this"),
        el("name", pv),
        el("volumeType", "BLOCK"),
        datastore.xml("datastores"),
        container_cluster("containerCluster", cluster),
        container_cluster("containerClusterArray", cluster),
        el("capacityInMb", "1024"),
    );
    let result = run_cns_task(admin, "CnsCreateVolume", &create).await;
    let id = result
        .text_at(&["volumeResults", "volumeId", "id"])
        .expect("a volume id")
        .to_owned();
    // The syncer's PV and PVC entities.
    let entity = |kind: &str, name: &str, namespace: Option<&str>, refers: &str| {
        format!(
            "<entityMetadata xsi:type=\"CnsKubernetesEntityMetadata\">{}<delete>false</delete>{}{}{}{refers}</entityMetadata>",
            el("entityName", name),
            el("clusterId", cluster),
            el("entityType", kind),
            namespace.map(|n| el("namespace", n)).unwrap_or_default(),
        )
    };
    let refers = format!(
        "<referredEntity>{}{}{}</referredEntity>",
        el("entityType", "PERSISTENT_VOLUME"),
        el("entityName", pv),
        el("clusterId", cluster)
    );
    let update = format!(
        "{}<updateSpecs><volumeId>{}</volumeId><metadata>{}{}{}{}</metadata></updateSpecs>",
        manager.xml("_this"),
        el("id", &id),
        container_cluster("containerCluster", cluster),
        entity("PERSISTENT_VOLUME", pv, None, ""),
        entity(
            "PERSISTENT_VOLUME_CLAIM",
            "data-db-0",
            Some("prod"),
            &refers
        ),
        container_cluster("containerClusterArray", cluster),
    );
    run_cns_task(admin, "CnsUpdateVolumeMetadata", &update).await;
    id
}

async fn run_cns_task(admin: &Vcenter, method: &'static str, params: &str) -> Element {
    let r = admin
        .call(Endpoint::Cns, method, params, false)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    let task = r.child("returnval").and_then(Moref::of).expect("a task");
    overcast_cloud_vsphere::task::wait(admin, &task, method, Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{method}: {e:?}"))
        .unwrap_or_default()
}

/// The overlay's cloud-config, pointed at `port` (vcsim's certificate), without its
/// `[Labels]` (vcsim has no such tag categories), with `cluster-id` set when given.
fn overlay_conf(
    dir: &std::path::Path,
    port: u16,
    ca: &std::path::Path,
    cluster_id: Option<&str>,
) -> std::path::PathBuf {
    let overlay = std::fs::read_to_string(
        overcast_integration::package_dir().join("../deploy/overlays/vsphere/cloud-config.yaml"),
    )
    .unwrap();
    let secret: serde_json::Value = serde_saphyr::from_str(&overlay).unwrap();
    let text = secret["stringData"]["cloud-config"].as_str().unwrap();
    let mut out = String::new();
    let mut commented_id = false;
    for line in text.lines() {
        if line.trim_start().starts_with("[Labels]") {
            break;
        }
        if line.trim_start().starts_with("# cluster-id =") {
            commented_id = true;
            if let Some(id) = cluster_id {
                // Quoted, as csi-vsphere.conf files write it.
                out.push_str(&format!("cluster-id = \"{id}\"\n"));
            }
            continue;
        }
        let line = line.replace("vcenter.example.com", "127.0.0.1");
        out.push_str(&line);
        out.push('\n');
        if line.trim() == "[Global]" {
            out.push_str(&format!("port = {port}\nca-file = {}\n", ca.display()));
        }
    }
    assert!(
        commented_id,
        "the overlay's cloud-config says where cluster-id goes:\n{text}"
    );
    let path = dir.join("vsphere.conf");
    std::fs::write(&path, out).unwrap();
    path
}

async fn listed(c: &mut overcast_integration::ControllerClient) -> Vec<String> {
    c.list_volumes(csi::ListVolumesRequest::default())
        .await
        .expect("list")
        .into_inner()
        .entries
        .into_iter()
        .map(|e| e.volume.unwrap().volume_id)
        .collect()
}

#[tokio::test]
async fn vsphere_csi_s_volumes_are_this_cluster_s_by_its_cluster_id_and_no_others_are() {
    let Some(sim) = Vcsim::start("vsphere-csi-driver's cluster id", &[]) else {
        return;
    };
    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let (node_vm_name, node_vm) = super::sim::vms(&admin).await[0].clone();
    let node = "worker-switched";
    overcast_integration::vcsim::set_host_name(&admin, &node_vm, node).await;
    let datastore =
        overcast_cloud_vsphere::inventory::View::new(Arc::clone(&admin), &["Datastore"])
            .retrieve(&[("Datastore", &["name"])])
            .await
            .unwrap()
            .into_iter()
            .find(|p| p.text("name") == Some("LocalDS_0"))
            .expect("LocalDS_0")
            .obj;
    let theirs = made_upstream(&admin, &datastore, THEIRS, "pvc-5f0c1a52-theirs").await;
    let other = made_upstream(&admin, &datastore, OTHER, "pvc-9a1b7c33-other").await;
    let dir = tempfile::tempdir().unwrap();

    // As shipped: --cluster kubernetes, no cluster-id.
    let conf = overlay_conf(dir.path(), sim.port, &sim.ca_file, None);
    let args = [
        "--cloud=vsphere".to_owned(),
        "--driver-name=csi.vsphere.vmware.com".to_owned(),
        format!("--cloud-config={}", conf.display()),
        format!("--node-id={node}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    {
        let driver = Csi::start(&args).await;
        let mut c = driver.controller().await;
        let ids = listed(&mut c).await;
        assert!(!ids.contains(&theirs) && !ids.contains(&other), "{ids:?}");
        for id in [&theirs, &other] {
            let refused = c
                .controller_publish_volume(attach_request(id, node, mount_cap("ext4")))
                .await
                .unwrap_err();
            assert_eq!(
                refused.code(),
                tonic::Code::FailedPrecondition,
                "{refused:?}"
            );
            assert!(refused.message().contains("cluster-id"), "{refused:?}");
            let refused = c
                .delete_volume(csi::DeleteVolumeRequest {
                    volume_id: id.clone(),
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert_eq!(
                refused.code(),
                tonic::Code::FailedPrecondition,
                "{refused:?}"
            );
        }
    }

    // With that driver's cluster id carried over (the same file, rewritten).
    overlay_conf(dir.path(), sim.port, &sim.ca_file, Some(THEIRS));
    let driver = Csi::start(&args).await;
    let mut c = driver.controller().await;
    let ids = listed(&mut c).await;
    assert!(ids.contains(&theirs), "{ids:?}");
    assert!(!ids.contains(&other), "{ids:?}");
    let ctx = c
        .controller_publish_volume(attach_request(&theirs, node, mount_cap("ext4")))
        .await
        .expect("attach theirs")
        .into_inner()
        .publish_context;
    assert_eq!(ctx["type"], "vSphere CNS Block Volume");
    super::sim::plug_disk(&admin, &node_vm, &node_vm_name, &theirs, &ctx["diskUUID"]).await;
    let entries = c
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .entries;
    let nodes: Vec<_> = entries
        .iter()
        .filter(|e| e.volume.as_ref().unwrap().volume_id == theirs)
        .flat_map(|e| e.status.as_ref().unwrap().published_node_ids.clone())
        .collect();
    assert_eq!(nodes, [node]);
    c.controller_unpublish_volume(detach_request(&theirs, node))
        .await
        .expect("detach theirs");
    super::sim::unplug_disk(&admin, &node_vm, &theirs).await;
    let refused = c
        .controller_publish_volume(attach_request(&other, node, mount_cap("ext4")))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    let refused = c
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: other.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    // Both still there, as made: nothing of either was changed.
    let cns = Cns::new(Arc::clone(&admin));
    for (id, cluster) in [(&theirs, THEIRS), (&other, OTHER)] {
        let v = cns
            .query(&Filter {
                ids: vec![id.clone()],
                ..Filter::default()
            })
            .await
            .unwrap();
        assert_eq!(v.len(), 1, "{id}");
        assert_eq!(v[0].cluster_id, cluster);
        assert_eq!(
            v[0].metadata
                .get("csi.storage.k8s.io/pvc/namespace")
                .map(String::as_str),
            Some("prod")
        );
    }
}
