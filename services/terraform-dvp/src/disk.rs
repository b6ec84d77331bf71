//! `dvp_virtual_disk`: a VirtualDisk, blank or from an image; done when `Ready` — or
//! `WaitForFirstConsumer`, which it stays until the VM using it starts (waiting for
//! Ready there would wait for a VM that cannot be made before its disk).

use overcast_cloud_dvp::api;
use serde_json::json;

use super::{
    check_name, create, delete, dynamic, get, labels_of, labels_type, labels_value, name_of, patch,
    strings_at, waiting_for, Cloud,
};
use crate::cty::{Type, Value};
use crate::resource::{until, Diag, Outcome, Resource};
use crate::schema::{computed, id, optional, required, s, string, Block, Obj};

const IMAGE_KINDS: [&str; 2] = ["ClusterVirtualImage", "VirtualImage"];

pub struct VirtualDisk;

/// Bytes of a Kubernetes quantity in binary or decimal units (`20Gi`, `10G`, `1024`).
pub(super) fn bytes(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len());
    let (n, unit) = q.split_at(split);
    let n: u128 = n.parse().ok()?;
    let m: u128 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    Some(n * m)
}

fn disk_api(parent: &Cloud) -> kube::Api<kube::api::DynamicObject> {
    parent.dynamic(&api::virtual_disk(), true)
}

#[async_trait::async_trait]
impl Resource<Cloud> for VirtualDisk {
    fn schema(&self) -> Block {
        Block::new(
            "A VirtualDisk in the parent namespace.",
            vec![
                id("The disk's name."),
                required("name", Type::String, "Its name.").force_new(),
                required(
                    "size",
                    Type::String,
                    "Its size, a quantity (20Gi); grown in place, never shrunk.",
                ),
                optional(
                    "storage_class",
                    Type::String,
                    "The parent's StorageClass (its default when unset).",
                )
                .force_new(),
                optional(
                    "image_kind",
                    Type::String,
                    "ClusterVirtualImage or VirtualImage: the disk is made from it.",
                )
                .force_new(),
                optional("image_name", Type::String, "The image's name.").force_new(),
                optional("labels", labels_type(), "Labels of the disk."),
                computed(
                    "phase",
                    Type::String,
                    "Pending, Provisioning, WaitForFirstConsumer, Ready, …",
                ),
                computed(
                    "capacity",
                    Type::String,
                    "What the disk holds (a quantity).",
                ),
                // DVP gives a disk the serial md5(uid): the guest sees it as
                // /dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_<md5(uid)>.
                computed("uid", Type::String, "The VirtualDisk's uid."),
            ],
        )
    }

    fn validate(&self, c: &Obj) -> Vec<Diag> {
        let mut out = Vec::new();
        check_name(c, "name", &mut out);
        if let Some(sz) = string(c, "size").filter(|sz| bytes(sz).is_none_or(|b| b == 0)) {
            out.push(Diag::at(
                "size",
                "size is not a quantity",
                format!("{sz:?}: write it as 20Gi"),
            ));
        }
        if let Some(k) = string(c, "image_kind").filter(|k| !IMAGE_KINDS.contains(k)) {
            out.push(Diag::at(
                "image_kind",
                "Unknown image_kind",
                format!("{k:?} is not one of {}", IMAGE_KINDS.join(", ")),
            ));
        }
        let given = |k| !matches!(c.get(k), None | Some(Value::Null));
        if given("image_kind") != given("image_name") {
            out.push(Diag::at(
                "image_name",
                "image_kind and image_name go together",
                "set both, or neither for a blank disk",
            ));
        }
        out
    }

    async fn create(&self, parent: &Cloud, p: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        let name = name_of(p, "name").map_err(|d| (None, d))?;
        let mut claim = json!({"size": string(p, "size").unwrap_or_default()});
        if let Some(class) = string(p, "storage_class") {
            claim["storageClassName"] = json!(class);
        }
        let mut spec = json!({"persistentVolumeClaim": claim});
        if let (Some(kind), Some(image)) = (string(p, "image_kind"), string(p, "image_name")) {
            spec["dataSource"] =
                json!({"type": "ObjectRef", "objectRef": {"kind": kind, "name": image}});
        }
        let obj = dynamic("VirtualDisk", &name, labels_of(p), spec).map_err(|d| (None, d))?;
        let disks = disk_api(parent);
        create(parent, "vd_create", &disks, "VirtualDisk", &obj)
            .await
            .map_err(|d| (None, d))?;
        let mut state = p.clone();
        state.insert("id".into(), s(&name));
        match ready(parent, &name).await {
            Ok(d) => {
                observe(&mut state, &d);
                Ok(state)
            }
            Err(d) => {
                state.insert("phase".into(), s("Pending"));
                state.insert("capacity".into(), Value::Null);
                state.insert("uid".into(), Value::Null);
                Err((Some(state), d))
            }
        }
    }

    async fn read(&self, parent: &Cloud, state: &Obj) -> Outcome<Option<Obj>> {
        let name = name_of(state, "id")?;
        let Some(d) = get(parent, "vd_get", &disk_api(parent), &name).await? else {
            return Ok(None);
        };
        let mut seen = Obj::from([("id".to_owned(), s(&name)), ("name".to_owned(), s(&name))]);
        observe(&mut seen, &d);
        let spec = &d.data["spec"];
        if let Some(sz) = spec["persistentVolumeClaim"]["size"].as_str() {
            seen.insert("size".into(), s(sz));
        }
        if let Some(c) = spec["persistentVolumeClaim"]["storageClassName"].as_str() {
            seen.insert("storage_class".into(), s(c));
        }
        if let Some(r) = spec["dataSource"]["objectRef"].as_object() {
            seen.insert(
                "image_kind".into(),
                s(r["kind"].as_str().unwrap_or_default()),
            );
            seen.insert(
                "image_name".into(),
                s(r["name"].as_str().unwrap_or_default()),
            );
        }
        seen.insert(
            "labels".into(),
            labels_value(state, d.metadata.labels.as_ref()),
        );
        Ok(Some(seen))
    }

    /// A larger size grows the disk (DVP resizes it, VM running or not); labels change
    /// in place. A smaller size is refused: a disk is never shrunk.
    async fn update(&self, parent: &Cloud, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        let name = name_of(prior, "id")?;
        let (old, new) = (
            string(prior, "size").and_then(bytes).unwrap_or(0),
            string(planned, "size").and_then(bytes).unwrap_or(0),
        );
        if new < old {
            return Err(Diag::at(
                "size",
                "A disk is never shrunk",
                format!(
                    "{name} is {} and stays so",
                    string(prior, "size").unwrap_or("?")
                ),
            ));
        }
        let body = json!({
            "metadata": {"labels": labels_patch(prior, planned)},
            "spec": {"persistentVolumeClaim": {"size": string(planned, "size")}},
        });
        patch(parent, "vd_update", &disk_api(parent), &name, body).await?;
        let mut state = planned.clone();
        if new > old {
            let d = until(
                &format!(
                    "VirtualDisk {name} grown to {}",
                    string(planned, "size").unwrap_or("?")
                ),
                || async {
                    let d = get(parent, "vd_get", &disk_api(parent), &name).await?;
                    Ok(d.filter(|d| {
                        d.data["status"]["capacity"]
                            .as_str()
                            .and_then(bytes)
                            .unwrap_or(0)
                            >= new
                            && d.data["status"]["phase"] == "Ready"
                    }))
                },
            )
            .await?;
            observe(&mut state, &d);
        }
        Ok(state)
    }

    async fn delete(&self, parent: &Cloud, state: &Obj) -> Outcome<()> {
        let name = name_of(state, "id")?;
        delete(parent, "vd_delete", "vd_get", &disk_api(parent), &name).await
    }
}

/// Labels to set, and those dropped as null (a merge patch removes them).
pub(super) fn labels_patch(prior: &Obj, planned: &Obj) -> serde_json::Value {
    map_patch(prior, planned, "labels")
}

/// A merge patch of the map `attr` (labels, annotations) from `prior` to `planned`: the
/// keys `prior` held and `planned` does not, removed; what `planned` holds, set. Keys
/// neither names (a person's, a controller's) are left alone.
pub(super) fn map_patch(prior: &Obj, planned: &Obj, attr: &str) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for k in strings_at(prior, attr).keys() {
        out.insert(k.clone(), serde_json::Value::Null);
    }
    out.extend(strings_at(planned, attr));
    serde_json::Value::Object(out)
}

fn observe(state: &mut Obj, d: &kube::api::DynamicObject) {
    let st = &d.data["status"];
    state.insert("phase".into(), s(st["phase"].as_str().unwrap_or("Pending")));
    state.insert(
        "capacity".into(),
        st["capacity"].as_str().map(s).unwrap_or(Value::Null),
    );
    state.insert(
        "uid".into(),
        d.metadata.uid.as_deref().map(s).unwrap_or(Value::Null),
    );
}

/// Waits until the disk is Ready (or WaitForFirstConsumer); a Failed disk is an error
/// naming why.
async fn ready(parent: &Cloud, name: &str) -> Outcome<kube::api::DynamicObject> {
    let last = std::sync::Mutex::new(String::new());
    let out = until(&format!("VirtualDisk {name} Ready"), || async {
        let Some(d) = get(parent, "vd_get", &disk_api(parent), name).await? else {
            return Err(Diag::new(
                "The disk is gone",
                format!("VirtualDisk {name} was deleted while it was made"),
            ));
        };
        *last.lock().unwrap_or_else(|e| e.into_inner()) = waiting_for(&d);
        match d.data["status"]["phase"].as_str() {
            Some("Ready" | "WaitForFirstConsumer") => Ok(Some(d)),
            Some("Failed") => Err(Diag::new(
                format!("VirtualDisk {name} failed"),
                waiting_for(&d),
            )),
            _ => Ok(None),
        }
    })
    .await;
    let last = last.into_inner().unwrap_or_else(|e| e.into_inner());
    out.map_err(|d| Diag::new(d.summary, format!("{}; last seen: {last}", d.detail)))
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(bytes("20Gi"), Some(20 << 30));
        assert_eq!(bytes("10G"), Some(10_000_000_000));
        assert_eq!(bytes("512"), Some(512));
        assert_eq!(bytes("1.5Gi"), None);
        assert_eq!(bytes("Gi"), None);
        assert_eq!(bytes("3Xi"), None);
    }
}
