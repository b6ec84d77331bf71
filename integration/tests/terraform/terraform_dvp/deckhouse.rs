//! What Deckhouse's DVP layouts name a node's objects, written here from their HCL and
//! apart from our layouts: a disk's, the VM's and the cloud-init Secret's names end in the
//! first six hex digits of the sha256 of their "destructive parameters" as Terraform's
//! `jsonencode` writes them (keys sorted, no spaces — serde_json's map is sorted too); the
//! disks' parameters are encoded twice. Two generations: 1.75–1.76 (the disks' parameters
//! name their storage class) and 1.77 on (`modules/030-cloud-provider-dvp/candi/
//! terraform-modules/root-disk/variables.tf` @26d1157c: `{"rootDisk":{"image":…}}`;
//! `kubernetes-data-disk/variables.tf` @49eb0319: `{"kbernetesDataDisk":{}}`;
//! `additional-disk/variables.tf` @26d1157c: `{"additionalDisk":{}}`), whose VM parameters
//! are the same keys with those hashes (`master/variables.tf` @76036b98).

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn h6(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()[..6]
        .to_owned()
}

fn enc(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

/// `substr(sha256(jsonencode(jsonencode(params))), 0, 6)`.
fn twice(params: Value) -> String {
    h6(&enc(&Value::String(enc(&params))))
}

/// A node as its instance class describes it (what the names depend on).
pub struct Node<'a> {
    pub prefix: &'a str,
    pub group: &'a str,
    pub index: u32,
    pub image: (&'a str, &'a str),
    pub root_storage_class: Option<&'a str>,
    /// A master's etcd disk's storage class (`Some(None)`: the parent's default).
    pub etcd: Option<Option<&'a str>>,
    pub cores: i64,
    pub core_fraction: &'a str,
    pub memory: &'a str,
    pub ssh_key: &'a str,
    /// Named as Deckhouse 1.77 and after name it (else as 1.75–1.76).
    pub since_1_77: bool,
}

impl Node<'_> {
    pub fn hostname(&self) -> String {
        format!("{}-{}-{}", self.prefix, self.group, self.index)
    }

    /// The root disk's destructive parameters (its annotation holds them encoded once).
    pub fn root_params(&self) -> Value {
        let image = json!({"type": self.image.0, "name": self.image.1});
        if self.since_1_77 {
            json!({"rootDisk": {"image": image}})
        } else {
            json!({"rootDisk": {"storageClass": self.root_storage_class, "image": image}})
        }
    }

    /// The etcd disk's (Deckhouse's spelling of the key).
    pub fn etcd_params(&self) -> Option<Value> {
        self.etcd.map(|sc| {
            if self.since_1_77 {
                json!({"kbernetesDataDisk": {}})
            } else {
                json!({"kbernetesDataDisk": {"storageClass": sc}})
            }
        })
    }

    fn root_hash(&self) -> String {
        twice(self.root_params())
    }

    fn etcd_hash(&self) -> Option<String> {
        self.etcd_params().map(twice)
    }

    pub fn root_disk(&self) -> String {
        format!("{}-{}", self.hostname(), self.root_hash())
    }

    pub fn etcd_disk(&self) -> String {
        format!(
            "{}-{}-kubernetes-data-{}-{}",
            self.prefix,
            self.group,
            self.index,
            self.etcd_hash().expect("a master")
        )
    }

    /// `lower(join("-", [hostname, replace(address, ".", "-")]))`.
    pub fn vmip(&self, address: &str) -> String {
        format!("{}-{}", self.hostname(), address.replace('.', "-")).to_lowercase()
    }

    /// The VM's parameters, with the address its VirtualMachineIPAddress leased.
    pub fn vm_params(&self, leased: &str) -> Value {
        let mut p = json!({
            "virtualMachine": {
                "cpu": {"cores": self.cores, "coreFraction": self.core_fraction},
                "memory": {"size": self.memory},
                "nodeSelector": {},
                "tolerations": null,
                "priorityClassName": null,
                "ipAddress": leased,
                "sshPublicKeyHash": format!("{:x}", Sha256::digest(enc(&json!(self.ssh_key)).as_bytes())),
            },
            "rootDiskHash": self.root_hash(),
            "additionalDisksHash": [],
        });
        if let Some(h) = self.etcd_hash() {
            p["etcDiskHash"] = json!(h);
        }
        p
    }

    fn vm_hash(&self, leased: &str) -> String {
        h6(&enc(&self.vm_params(leased)))
    }

    pub fn vm(&self, leased: &str) -> String {
        format!("{}-{}", self.hostname(), self.vm_hash(leased))
    }

    pub fn secret(&self, leased: &str) -> String {
        format!("{}-cloudinit-{}", self.hostname(), self.vm_hash(leased))
    }
}

/// Known answers, from Terraform 1.0.3 evaluating Deckhouse's expressions for this node
/// (`substr(sha256(jsonencode(jsonencode({"rootDisk" = …}))), 0, 6)` and the rest): the
/// formulas above are checked against Terraform itself, not only against our layout.
#[test]
fn the_formulas_give_terraforms_answers() {
    let n = Node {
        prefix: "d8",
        group: "master",
        index: 0,
        image: ("ClusterVirtualImage", "ubuntu"),
        root_storage_class: None,
        etcd: Some(None),
        cores: 4,
        core_fraction: "100%",
        memory: "8Gi",
        ssh_key: "ssh-ed25519 AAAA",
        since_1_77: false,
    };
    assert_eq!(n.root_disk(), "d8-master-0-ae5d10");
    assert_eq!(n.etcd_disk(), "d8-master-kubernetes-data-0-2b1348");
    assert_eq!(
        enc(&n.vm_params("10.66.20.7")),
        r#"{"additionalDisksHash":[],"etcDiskHash":"2b1348","rootDiskHash":"ae5d10","virtualMachine":{"cpu":{"coreFraction":"100%","cores":4},"ipAddress":"10.66.20.7","memory":{"size":"8Gi"},"nodeSelector":{},"priorityClassName":null,"sshPublicKeyHash":"349d653a53c30313d162ca97c79ea7baa0ce129ac5233d259828916e77b44ec1","tolerations":null}}"#
    );
    assert_eq!(n.vm("10.66.20.7"), "d8-master-0-d064b0");
    assert_eq!(n.secret("10.66.20.7"), "d8-master-0-cloudinit-d064b0");
    assert_eq!(n.vmip("Auto"), "d8-master-0-auto");
    assert_eq!(n.vmip("10.66.20.7"), "d8-master-0-10-66-20-7");
    // 1.77's: Terraform 1.11.4 on `substr(sha256(jsonencode(jsonencode({"rootDisk" =
    // {"image" = {…}}}))), 0, 6)`, `{"kbernetesDataDisk" = {}}` and the VM's parameters
    // with those hashes.
    let n = Node {
        since_1_77: true,
        ..n
    };
    assert_eq!(n.root_disk(), "d8-master-0-d187c6");
    assert_eq!(n.etcd_disk(), "d8-master-kubernetes-data-0-313fa0");
    assert_eq!(n.vm("10.66.20.7"), "d8-master-0-a49951");
}
