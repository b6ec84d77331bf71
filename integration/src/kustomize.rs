//! A small kustomize for the tests of `deploy/`: `resources` (files and directories) and
//! `patches` (strategic merge patches and JSON 6902 patches, from a file or inline), the
//! subset our manifests use. Anything else in a kustomization is refused rather than
//! ignored, so a manifest can never use a feature this renderer would silently skip.
//! When `kubectl` is on the machine, a test renders with it too and compares.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// One rendered object and the file it came from (for error messages).
#[derive(Debug, Clone)]
pub struct Rendered {
    pub object: Value,
    pub source: PathBuf,
}

impl Rendered {
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.object["metadata"]["namespace"].as_str()
    }

    /// kustomize's resource id: group/version, kind, namespace, name.
    pub fn id(&self) -> String {
        id_of(&self.object)
    }
}

pub fn id_of(object: &Value) -> String {
    format!(
        "{}|{}|{}|{}",
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Parses a YAML stream of objects, skipping empty documents.
pub fn parse_stream(text: &str, source: &Path) -> Result<Vec<Value>, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)
        .map_err(|e| format!("{}: not YAML: {e}", source.display()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Renders the kustomization in `dir`.
pub fn render(dir: &Path) -> Result<Vec<Rendered>, String> {
    let file = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let k: Value = serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let Value::Object(fields) = &k else {
        return Err(format!("{}: not a map", file.display()));
    };
    for key in fields.keys() {
        if !["apiVersion", "kind", "resources", "patches"].contains(&key.as_str()) {
            return Err(format!(
                "{}: `{key}` is not supported by the test renderer",
                file.display()
            ));
        }
    }
    let mut out: Vec<Rendered> = Vec::new();
    for r in k["resources"].as_array().into_iter().flatten() {
        let path = dir.join(r.as_str().ok_or("a resource entry is not a string")?);
        let items = if path.is_dir() {
            render(&path)?
        } else {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            parse_stream(&text, &path)?
                .into_iter()
                .map(|object| Rendered {
                    object,
                    source: path.clone(),
                })
                .collect()
        };
        for item in items {
            if out.iter().any(|o| o.id() == item.id()) {
                return Err(format!("{}: {} defined twice", dir.display(), item.id()));
            }
            out.push(item);
        }
    }
    for p in k["patches"].as_array().into_iter().flatten() {
        apply_patch_entry(dir, p, &mut out)?;
    }
    Ok(out)
}

fn apply_patch_entry(dir: &Path, entry: &Value, out: &mut [Rendered]) -> Result<(), String> {
    let (text, source) = match (entry["path"].as_str(), entry["patch"].as_str()) {
        (Some(p), None) => {
            let path = dir.join(p);
            (
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?,
                path.display().to_string(),
            )
        }
        (None, Some(inline)) => (
            inline.to_owned(),
            format!("{}: inline patch", dir.display()),
        ),
        _ => return Err(format!("{}: a patch needs path or patch", dir.display())),
    };
    let patch: Value = serde_saphyr::from_str(&text).map_err(|e| format!("{source}: {e}"))?;
    let target = &entry["target"];
    let matches = |o: &Rendered, kind: &str, name: &str, ns: Option<&str>| {
        o.kind() == kind && o.name() == name && (ns.is_none() || o.namespace() == ns)
    };
    match &patch {
        Value::Array(ops) => {
            let kind = target["kind"]
                .as_str()
                .ok_or(format!("{source}: JSON patch without target.kind"))?;
            let name = target["name"]
                .as_str()
                .ok_or(format!("{source}: JSON patch without target.name"))?;
            let ns = target["namespace"].as_str();
            let ops: json_patch::Patch = serde_json::from_value(Value::Array(ops.clone()))
                .map_err(|e| format!("{source}: {e}"))?;
            let mut hit = 0;
            for o in out.iter_mut().filter(|o| matches(o, kind, name, ns)) {
                json_patch::patch(&mut o.object, &ops).map_err(|e| format!("{source}: {e}"))?;
                hit += 1;
            }
            if hit == 0 {
                return Err(format!("{source}: no {kind} {name} to patch"));
            }
        }
        Value::Object(_) => {
            let kind = target["kind"]
                .as_str()
                .or(patch["kind"].as_str())
                .unwrap_or_default();
            let name = target["name"]
                .as_str()
                .or(patch["metadata"]["name"].as_str())
                .unwrap_or_default();
            let ns = target["namespace"]
                .as_str()
                .or(patch["metadata"]["namespace"].as_str());
            let mut hit = 0;
            for o in out.iter_mut().filter(|o| matches(o, kind, name, ns)) {
                strategic_merge(&mut o.object, &patch, "");
                hit += 1;
            }
            if hit != 1 {
                return Err(format!(
                    "{source}: {hit} objects match {kind} {name}, want 1"
                ));
            }
        }
        _ => return Err(format!("{source}: a patch is a map or a list")),
    }
    Ok(())
}

/// The merge key of the lists in the objects we patch (from the Kubernetes API's
/// `x-kubernetes-patch-merge-key`); other lists are replaced whole, as the API does for
/// lists without a merge strategy (args, command, tolerations).
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers" | "initContainers" | "volumes" | "env" | "imagePullSecrets" => Some("name"),
        "volumeMounts" | "volumeDevices" => Some("mountPath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// A strategic merge patch: maps merge, `null` deletes, lists with a merge key merge
/// item by item, other lists are replaced.
pub fn strategic_merge(target: &mut Value, patch: &Value, field: &str) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                    continue;
                }
                match t.get_mut(k) {
                    Some(existing) => strategic_merge(existing, v, k),
                    None => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(t), Value::Array(p)) => match merge_key(field) {
            Some(key) => {
                // The patch's items come first, in the patch's order (merged into their
                // counterparts where those exist), then the items the patch does not
                // name, in their order — what `kubectl kustomize` gives.
                let mut rest = std::mem::take(t);
                for item in p {
                    let at = rest
                        .iter()
                        .position(|x| x[key] == item[key] && !item[key].is_null());
                    let merged = match at {
                        Some(i) => {
                            let mut existing = rest.remove(i);
                            strategic_merge(&mut existing, item, "");
                            existing
                        }
                        None => item.clone(),
                    };
                    t.push(merged);
                }
                t.append(&mut rest);
            }
            None => *t = p.clone(),
        },
        (t, p) => *t = p.clone(),
    }
}

/// Objects keyed by their id, for comparing two renderings regardless of order.
pub fn by_id(objects: &[Value]) -> Map<String, Value> {
    objects.iter().map(|o| (id_of(o), o.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The expected order is what `kubectl kustomize` (kustomize v5.5) printed for this
    /// very base and patch: patch items first in the patch's order, then the rest.
    #[test]
    fn merge_lists_order_like_kustomize() {
        let mut base = json!({"spec": {"containers": [
            {"name": "c1", "image": "i", "env": [
                {"name": "A", "value": "a"}, {"name": "B", "value": "b"},
                {"name": "C", "value": "c"}, {"name": "D", "value": "d"}]},
            {"name": "c2", "image": "i"}],
            "tolerations": [{"key": "t1"}, {"key": "t2"}]}});
        let patch = json!({"spec": {"containers": [
            {"name": "c1", "env": [
                {"name": "C", "value": "cc"}, {"name": "X", "value": "x"},
                {"name": "A", "value": "aa"}]},
            {"name": "c3", "image": "j"}],
            "tolerations": [{"key": "t3"}]}});
        strategic_merge(&mut base, &patch, "");
        assert_eq!(
            base,
            json!({"spec": {"containers": [
                {"name": "c1", "image": "i", "env": [
                    {"name": "C", "value": "cc"}, {"name": "X", "value": "x"},
                    {"name": "A", "value": "aa"}, {"name": "B", "value": "b"},
                    {"name": "D", "value": "d"}]},
                {"name": "c3", "image": "j"},
                {"name": "c2", "image": "i"}],
                // No merge key: replaced whole.
                "tolerations": [{"key": "t3"}]}})
        );
    }
}
