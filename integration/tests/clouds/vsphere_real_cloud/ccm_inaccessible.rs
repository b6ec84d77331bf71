//! The real `ccm --cloud vsphere` keeps the Node of a VM that the vCenter lists as
//! inaccessible (its configuration files unreachable: "no configuration can be returned for
//! a virtual machine", the vim25 reference says of `inaccessible`), as
//! cloud-provider-vsphere#642 did not: such a VM's summary carries no BIOS UUID, so it
//! cannot be matched to its Node, and taking it for gone deletes a Node whose VM is only
//! unreadable for a while. vcsim has no way to make a VM inaccessible, so the front before
//! it answers the PropertyCollector as a vCenter does for one: `runtime.connectionState`
//! `inaccessible` and no `summary.config.uuid`.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use overcast_integration::free_port;
use overcast_integration::vcsim_front::{Part, VcsimFront};

use super::ccm::{ccm, kit_and_vcsim};
use super::sim::{self, Guest};
use super::*;

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const NODE: &str = "overcast-it-vs-unreadable";

/// Answers one VM as inaccessible while `on`.
struct Inaccessible {
    vm: String,
    on: AtomicBool,
    /// Property answers given with the VM inaccessible.
    answered: AtomicUsize,
}

#[async_trait::async_trait]
impl Part for Inaccessible {
    async fn answer(&self, path: &str, request: &[u8], _status: u16, body: Bytes) -> Bytes {
        let req = String::from_utf8_lossy(request);
        if !self.on.load(Ordering::SeqCst)
            || !path.starts_with("/sdk")
            || !req.contains("RetrievePropertiesEx")
        {
            return body;
        }
        let text = String::from_utf8_lossy(&body);
        match unreadable(&text, &self.vm) {
            Some(changed) => {
                self.answered.fetch_add(1, Ordering::SeqCst);
                Bytes::from(changed)
            }
            None => body,
        }
    }
}

/// `text` (a RetrievePropertiesEx answer) with the `objects` of `vm` as a vCenter gives an
/// inaccessible VM: its connection state `inaccessible`, its summary's config without the
/// BIOS UUID; `None` when the answer does not hold that VM.
fn unreadable(text: &str, vm: &str) -> Option<String> {
    let at = text.find(&format!(">{vm}</obj>"))?;
    let end = at + text[at..].find("</objects>")?;
    let object = text[at..end]
        .replace(">connected</val>", ">inaccessible</val>")
        .replace(">connected<", ">inaccessible<");
    let object = match (object.find("<uuid>"), object.find("</uuid>")) {
        (Some(from), Some(to)) if to > from => {
            format!("{}{}", &object[..from], &object[to + "</uuid>".len()..])
        }
        _ => object,
    };
    Some(format!("{}{object}{}", &text[..at], &text[end..]))
}

#[test]
fn an_answer_is_rewritten_for_that_vm_alone() {
    let text = "<objects><obj type=\"VirtualMachine\">vm-1</obj>\
        <propSet><name>runtime.connectionState</name><val>connected</val></propSet>\
        <propSet><name>summary.config</name><val><name>a</name><uuid>u-1</uuid></val></propSet></objects>\
        <objects><obj type=\"VirtualMachine\">vm-2</obj>\
        <propSet><name>runtime.connectionState</name><val>connected</val></propSet>\
        <propSet><name>summary.config</name><val><uuid>u-2</uuid></val></propSet></objects>";
    let out = unreadable(text, "vm-1").unwrap();
    assert!(!out.contains("u-1") && out.contains("u-2"), "{out}");
    assert_eq!(out.matches(">inaccessible</val>").count(), 1, "{out}");
    assert!(unreadable(text, "vm-3").is_none());
}

#[tokio::test]
async fn an_inaccessible_vm_keeps_its_node() {
    let Some((sim, kubeconfig, _kit)) = kit_and_vcsim("ccm, an inaccessible VM", &[]).await else {
        return;
    };
    let nodes: Api<Node> = Api::all(overcast_integration::real::client(&kubeconfig).await);
    let _ = nodes.delete(NODE, &Default::default()).await;

    let admin = vcenter(&sim, &Arc::new(ApiMetrics::unregistered()));
    let vm = sim::vms(&admin)
        .await
        .into_iter()
        .find(|(n, _)| n.contains("_C0_"))
        .map(|(_, m)| m)
        .unwrap();
    let guest = Guest {
        host_name: NODE,
        ip: "10.0.0.9",
        guest_id: "centos7_64Guest",
        cpus: 2,
        memory_mb: 4096,
    };
    sim::reconfigure(&admin, &vm, &guest).await;
    let part = Arc::new(Inaccessible {
        vm: vm.id.clone(),
        on: AtomicBool::new(false),
        answered: AtomicUsize::new(0),
    });
    let front = VcsimFront::start(&sim, Arc::clone(&part) as Arc<dyn Part>).await;

    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = sim.conf(dir.path(), "");
    let text = std::fs::read_to_string(&conf).unwrap().replace(
        &format!("port = {}", sim.port),
        &format!("port = {}", front.port),
    );
    std::fs::write(&conf, text).unwrap();
    let _ccm = ccm(
        &conf,
        &kubeconfig,
        "overcast-it-vs-inaccessible",
        free_port(),
        Stdio::inherit(),
    );
    let provider_id = wait("the node initialized", 60, async || {
        let n = nodes.get(NODE).await.ok()?;
        (!tainted(&n, UNINITIALIZED)).then_some(())?;
        n.spec?.provider_id
    })
    .await;
    assert!(provider_id.starts_with("vsphere://"), "{provider_id}");

    // The VM's files become unreachable. Its NotReady Node (the kit runs no kubelet for
    // it) stays through several syncs, each of which saw the VM inaccessible.
    part.on.store(true, Ordering::SeqCst);
    let before = part.answered.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        part.answered.load(Ordering::SeqCst) >= before + 3,
        "the ccm listed the VMs fewer than three times in 10 s"
    );
    let kept = nodes.get_opt(NODE).await.unwrap();
    assert!(
        kept.is_some(),
        "the ccm deleted the Node of an inaccessible VM"
    );
    assert_eq!(
        kept.unwrap().spec.unwrap().provider_id.as_deref(),
        Some(provider_id.as_str())
    );
    let _ = nodes.delete(NODE, &Default::default()).await;
}
