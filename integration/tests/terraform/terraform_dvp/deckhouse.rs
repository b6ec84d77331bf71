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
    /// Its address: `Auto`, or the class's `ipAddresses[index]`.
    pub address: &'a str,
    /// Additional disks of the class (no storage class: the parent's default).
    pub additional_disks: u32,
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

    /// An additional disk's destructive parameters (`additional-disk/variables.tf`:
    /// the storage class until 1.77, @26d1157c none).
    pub fn additional_params(&self) -> Value {
        if self.since_1_77 {
            json!({"additionalDisk": {}})
        } else {
            json!({"additionalDisk": {"storageClass": null}})
        }
    }

    fn additional_hash(&self) -> String {
        twice(self.additional_params())
    }

    /// `<prefix>-<group>-additional-disk-<i>-<index>-<hash>`.
    pub fn additional_disk(&self, i: u32) -> String {
        format!(
            "{}-{}-additional-disk-{i}-{}-{}",
            self.prefix,
            self.group,
            self.index,
            self.additional_hash()
        )
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
            "additionalDisksHash": (0..self.additional_disks).map(|_| self.additional_hash()).collect::<Vec<_>>(),
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
        address: "Auto",
        additional_disks: 0,
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
    // An additional disk's (Terraform 1.11.4 on `substr(sha256(jsonencode(jsonencode(
    // {"additionalDisk" = {"storageClass" = null}}))), 0, 6)` and `{"additionalDisk" = {}}`).
    assert_eq!(n.additional_disk(0), "d8-master-additional-disk-0-0-40bc75");
    let n = Node {
        since_1_77: false,
        ..n
    };
    assert_eq!(n.additional_disk(1), "d8-master-additional-disk-1-0-504d00");
}

/// A release of Deckhouse's DVP layouts, as far as what it writes differs here (the names
/// differ by [`deckhouse::Node::since_1_77`]):
/// - ≤ 1.74 (`candi/cloud-providers/dvp/terraform-modules/master/main.tf` @6e01cad3,
///   `master/variables.tf` @023a52f3): the VM's `runPolicy: AlwaysOn` and no
///   `liveMigrationPolicy` (the parent's default applies), the VM labelled with the four
///   `dvp.deckhouse.io/*` labels and no `deckhouse.io/managed-by`, the disks, address and
///   Secret unlabelled; readiness by `wait` blocks in the manifests, no owner references;
/// - ≥ 1.75: the VM's `runPolicy: AlwaysOnUnlessStoppedManually` and
///   `liveMigrationPolicy: PreferForced` (`candi/cloud-providers/dvp/layouts/standard/
///   master-node/variables.tf` @095e8372, the layout's defaults), the labels
///   `deckhouse.io/managed-by` and `dvp.deckhouse.io/cluster-uuid` on every object (1.75,
///   #17267), `kubernetes_resource_ready_v1` and (1.76, #16777) owner references;
/// - 1.76 on: labels on the cloud-init Secret (CHANGELOG-v1.76, #20436); 1.75's has none;
/// - 1.77 on: the Secret `immutable` (`terraform-modules/master/main.tf` @76036b98) and
///   the disks named without their storage class.
#[derive(Debug)]
pub struct Release {
    pub label: &'static str,
    /// 1.75 on: the policies, `managed-by`, labelled disks and address, readiness resources.
    pub since_1_75: bool,
    pub secret_labels: bool,
    pub secret_immutable: bool,
}

pub const RELEASE_1_74: Release = Release {
    label: "1.74",
    since_1_75: false,
    secret_labels: false,
    secret_immutable: false,
};
pub const RELEASE_1_75: Release = Release {
    label: "1.75",
    since_1_75: true,
    secret_labels: false,
    secret_immutable: false,
};
pub const RELEASE_1_76: Release = Release {
    label: "1.76",
    since_1_75: true,
    secret_labels: true,
    secret_immutable: false,
};
pub const RELEASE_1_77: Release = Release {
    label: "1.77",
    since_1_75: true,
    secret_labels: true,
    secret_immutable: true,
};

/// Which node a version's module makes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Master,
    Static,
}

/// Why no node of a version can be taken over.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Refusal {
    /// Its objects are of DVP's API of 2024 (`VirtualMachineDisk`,
    /// `VirtualMachineIPAddressClaim`), which no DVP serves now: `migrate-state` refuses
    /// the state, naming each.
    Api2024,
    /// Its VM's `blockDeviceRefs` holds the additional disks as a list inside the list
    /// (`[{root}, [for disk in var.additional_disks : {…}]]` — an empty list without any):
    /// the parent's API server refuses such a VM, so no node was made with it.
    NestedDiskList,
}

/// One version of a node module, as far as what it writes differs.
#[derive(Clone, Copy, Debug)]
pub struct Version {
    /// How the test and the docs' table name it.
    pub label: &'static str,
    /// The files (path@commit) it was read from.
    pub files: &'static [&'static str],
    pub kind: Kind,
    pub release: &'static Release,
    /// Named as 1.77 and after (the disks' hashes without their storage class).
    pub names_1_77: bool,
    /// The cluster's `additionalVMLabels` on every VM
    /// (`merge(<class's>, lookup(providerClusterConfiguration, "additionalVMLabels", {}))`).
    pub cluster_labels: bool,
    /// Additional disks of the class reach the VM.
    pub additional_disks: bool,
    /// dhctl may pass the module's objects (ModuleConfig v2) instead of the configuration.
    pub objects: bool,
    pub refusal: Option<Refusal>,
}

const V174: Version = Version {
    label: "",
    files: &[],
    kind: Kind::Master,
    release: &RELEASE_1_74,
    names_1_77: false,
    cluster_labels: false,
    additional_disks: true,
    objects: false,
    refusal: None,
};

/// Deckhouse's DVP master-node and static-node modules the code index holds, oldest first
/// (where the index gives no order, by what the code carries). Every one reads the class's
/// `virtualMachine.additionalLabels` and `additionalAnnotations` and a static address from
/// `ipAddresses` (the class's, or from 1.77 the ModuleConfig's `nodes.parameters`).
pub const VERSIONS: &[Version] = &[
    Version {
        label: "candi master-node/main.tf@d8077f48 (2024)",
        files: &[
            "candi/cloud-providers/dvp/terraform-modules/master-node/main.tf@d8077f48",
            "candi/cloud-providers/dvp/terraform-modules/master-node/variables.tf@6cbde322",
        ],
        refusal: Some(Refusal::Api2024),
        ..V174
    },
    Version {
        label: "candi static-node/main.tf@6cbde322 (2024)",
        files: &[
            "candi/cloud-providers/dvp/terraform-modules/static-node/main.tf@6cbde322",
            "candi/cloud-providers/dvp/terraform-modules/static-node/variables.tf@1c62b83b",
        ],
        kind: Kind::Static,
        refusal: Some(Refusal::Api2024),
        ..V174
    },
    // The split modules (VirtualDisk, VirtualMachineIPAddress, a UserDataRef Secret),
    // `runPolicy: AlwaysOn`, four identity labels: ≤ 1.74.
    Version {
        label: "candi master/main.tf@6e01cad3 (≤ 1.74)",
        files: &[
            "candi/cloud-providers/dvp/terraform-modules/master/main.tf@069f6943",
            "candi/cloud-providers/dvp/terraform-modules/master/variables.tf@023a52f3",
            "candi/cloud-providers/dvp/terraform-modules/master/main.tf@6e01cad3",
            "candi/cloud-providers/dvp/terraform-modules/master/variables.tf@f8bd813e",
            "candi/cloud-providers/dvp/layouts/standard/master-node/main.tf@6e01cad3",
            "candi/cloud-providers/dvp/layouts/standard/master-node/variables.tf@3ab100bf",
        ],
        ..V174
    },
    Version {
        label: "candi static-node/main.tf@0569b374",
        files: &[
            "candi/cloud-providers/dvp/terraform-modules/static-node/main.tf@0569b374",
            "candi/cloud-providers/dvp/terraform-modules/static-node/variables.tf@0569b374",
        ],
        kind: Kind::Static,
        refusal: Some(Refusal::NestedDiskList),
        ..V174
    },
    Version {
        label: "candi static-node (≤ 1.74)",
        files: &[
            "candi/cloud-providers/dvp/terraform-modules/static-node/main.tf (index id 7804129383)",
            "candi/cloud-providers/dvp/layouts/standard/static-node/main.tf@58da4d6b",
            "candi/cloud-providers/dvp/layouts/standard/static-node/variables.tf@9a47ecc8",
            "candi/cloud-providers/dvp/layouts/standard/static-node/variables.tf@2cdcb3e9",
        ],
        kind: Kind::Static,
        ..V174
    },
    // Identity labels on the disks and the address, the policies' defaults (1.75).
    Version {
        label: "candi master-node/variables.tf@095e8372 (1.75)",
        files: &[
            "candi/cloud-providers/dvp/layouts/standard/master-node/main.tf@0e117f7f",
            "candi/cloud-providers/dvp/layouts/standard/master-node/variables.tf@095e8372",
        ],
        release: &RELEASE_1_75,
        ..V174
    },
    Version {
        label: "candi static-node/main.tf@1440daa6 (1.75)",
        files: &["candi/cloud-providers/dvp/layouts/standard/static-node/main.tf@1440daa6"],
        kind: Kind::Static,
        release: &RELEASE_1_75,
        ..V174
    },
    // The module's own home: `managed-by` on the VM, owner references, the Secret labelled.
    Version {
        label: "modules master (1.76)",
        files: &[
            "modules/030-cloud-provider-dvp/candi/terraform-modules/master/variables.tf@dcb36430",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/master/variables.tf@f8d97c3a",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/master/variables.tf@0a8ae6c4",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/master/main.tf@f536b818",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/master/main.tf@72497b55",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/master/main.tf@51c9cac6",
            "modules/030-cloud-provider-dvp/candi/layouts/standard/master-node/main.tf@282e9c5e",
        ],
        release: &RELEASE_1_76,
        ..V174
    },
    Version {
        label: "modules static-node (1.76)",
        files: &[
            "modules/030-cloud-provider-dvp/candi/terraform-modules/static-node/variables.tf@f8d97c3a",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/static-node/variables.tf@295cb4b0",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/static-node/main.tf@f536b818",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/static-node/main.tf@72497b55",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/static-node/main.tf@51c9cac6",
            "modules/030-cloud-provider-dvp/candi/layouts/standard/static-node/main.tf@282e9c5e",
            "modules/030-cloud-provider-dvp/candi/layouts/standard/static-node/main.tf@d2cd3d10",
            "modules/030-cloud-provider-dvp/candi/layouts/standard/static-node/main.tf@21af0b5e",
        ],
        kind: Kind::Static,
        release: &RELEASE_1_76,
        ..V174
    },
    // The cluster's labels on every VM, before the module's migration.
    Version {
        label: "modules master-node/variables.tf@b2e479d3",
        files: &["modules/030-cloud-provider-dvp/candi/layouts/standard/master-node/variables.tf@b2e479d3"],
        release: &RELEASE_1_76,
        cluster_labels: true,
        ..V174
    },
    Version {
        label: "modules static-node/variables.tf@b2e479d3",
        files: &["modules/030-cloud-provider-dvp/candi/layouts/standard/static-node/variables.tf@b2e479d3"],
        kind: Kind::Static,
        release: &RELEASE_1_76,
        cluster_labels: true,
        ..V174
    },
    // The ModuleConfig's objects as inputs, the disks named without their class (1.77).
    Version {
        label: "modules master-node/variables.tf@5fcbf772 (1.77)",
        files: &[
            "modules/030-cloud-provider-dvp/candi/layouts/standard/master-node/variables.tf@7f59a89f",
            "modules/030-cloud-provider-dvp/candi/layouts/standard/master-node/variables.tf@5fcbf772",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/migration/locals.tf@5fcbf772",
            "modules/030-cloud-provider-dvp/candi/terraform-modules/migration/locals.tf@1cd21b95",
        ],
        release: &RELEASE_1_77,
        names_1_77: true,
        objects: true,
        ..V174
    },
    Version {
        label: "modules static-node/variables.tf@0012036b (1.77)",
        files: &[
            "modules/030-cloud-provider-dvp/candi/layouts/standard/static-node/variables.tf@7f59a89f",
            "modules/030-cloud-provider-dvp/candi/layouts/standard/static-node/variables.tf@0012036b",
        ],
        kind: Kind::Static,
        release: &RELEASE_1_77,
        names_1_77: true,
        objects: true,
        ..V174
    },
    // The newest: the cluster's labels again, over the 1.77 module.
    Version {
        label: "modules master-node/variables.tf@0907b049",
        files: &["modules/030-cloud-provider-dvp/candi/layouts/standard/master-node/variables.tf@0907b049"],
        release: &RELEASE_1_77,
        names_1_77: true,
        cluster_labels: true,
        objects: true,
        ..V174
    },
    Version {
        label: "modules static-node/variables.tf@0907b049",
        files: &["modules/030-cloud-provider-dvp/candi/layouts/standard/static-node/variables.tf@0907b049"],
        kind: Kind::Static,
        release: &RELEASE_1_77,
        names_1_77: true,
        cluster_labels: true,
        objects: true,
        ..V174
    },
];

/// docs/migrate/machines.md's table has a row for every version here (its first cell the
/// version's label).
#[test]
fn every_version_has_its_row_in_the_docs() {
    let doc = std::fs::read_to_string(
        overcast_integration::package_dir().join("../docs/migrate/machines.md"),
    )
    .unwrap();
    for v in VERSIONS {
        assert!(
            doc.contains(&format!("| `{}` |", v.label)),
            "docs/migrate/machines.md has no row for {}",
            v.label
        );
    }
}
