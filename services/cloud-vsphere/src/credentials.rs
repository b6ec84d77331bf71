//! vCenter credentials as cloud-provider-vsphere's credential manager reads them from its
//! Secret's data — `<server>.username` / `<server>.password`, or (for IPv6 servers, whose
//! colons cannot be in a key) `server_<x>` / `username_<x>` / `password_<x>` — from the
//! Secret itself through the Kubernetes API (`secret-name` / `secret-namespace`) or from the
//! files of `secrets-directory` (the Secret mounted as a volume). They are read at each
//! login, so a rotated Secret is used from the next login on. Values are never echoed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use overcast_cloud::CloudError;
use tokio::sync::OnceCell;

/// The credentials Secret upstream's manifests name (`secret-name` /
/// `secret-namespace`), which the vsphere overlay's Role lets the ccm and the
/// discoverer read, and nothing else.
pub const UPSTREAM_SECRET: (&str, &str) = ("kube-system", "vsphere-cloud-secret");

/// What reading it costs in RBAC (`deploy/overlays/vsphere/credentials-rbac.yaml`).
pub const API_CALLS: &[overcast_kube::ApiCall] = &[overcast_kube::ApiCall {
    group: "",
    resource: "secrets",
    verbs: &["get"],
    namespace: Some(UPSTREAM_SECRET.0),
    names: &[UPSTREAM_SECRET.1],
}];

#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Credential {{ user: {:?}, password: <redacted> }}",
            self.user
        )
    }
}

/// Each server's credentials in a Secret's data. Errors name keys, never values.
pub fn parse(data: &BTreeMap<String, Vec<u8>>) -> Result<BTreeMap<String, Credential>, String> {
    let text = |v: &[u8]| String::from_utf8_lossy(v).trim_end_matches('\n').to_owned();
    let mut users: BTreeMap<String, String> = BTreeMap::new();
    let mut passwords: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in data {
        if let Some(server) = key.strip_suffix(".username") {
            users.insert(server.to_owned(), text(value));
        } else if let Some(server) = key.strip_suffix(".password") {
            passwords.insert(server.to_owned(), text(value));
        } else if let Some(id) = key.strip_prefix("server_") {
            if id.is_empty() {
                return Err(format!("key {key:?} has no identifier after server_"));
            }
            let server = text(value);
            let user = data
                .get(&format!("username_{id}"))
                .ok_or_else(|| format!("username_{id} is missing for server_{id}"))?;
            let password = data
                .get(&format!("password_{id}"))
                .ok_or_else(|| format!("password_{id} is missing for server_{id}"))?;
            users.insert(server.clone(), text(user));
            passwords.insert(server, text(password));
        } else if let Some(id) = key
            .strip_prefix("username_")
            .or_else(|| key.strip_prefix("password_"))
        {
            if !data.contains_key(&format!("server_{id}")) {
                return Err(format!("key {key:?} has no server_{id} beside it"));
            }
        }
    }
    let mut out = BTreeMap::new();
    for (server, user) in users {
        let Some(password) = passwords.remove(&server) else {
            return Err(format!(
                "{server}.password is missing beside {server}.username"
            ));
        };
        out.insert(server, Credential { user, password });
    }
    if let Some(server) = passwords.keys().next() {
        return Err(format!(
            "{server}.username is missing beside {server}.password"
        ));
    }
    Ok(out)
}

/// The credentials of `server` among the files of `dir` (subdirectories skipped, as
/// upstream; Kubernetes' `..data` links of a mounted Secret are followed).
pub fn from_directory(dir: &Path, server: &str) -> Result<Credential, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("secrets-directory {}: {e}", dir.display()))?;
    let mut data = BTreeMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            continue;
        }
        if let Ok(bytes) = std::fs::read(&path) {
            data.insert(name, bytes);
        }
    }
    let all = parse(&data).map_err(|e| format!("secrets-directory {}: {e}", dir.display()))?;
    all.get(server).cloned().ok_or_else(|| {
        format!(
            "secrets-directory {}: no {server}.username / {server}.password (or server_<x> naming {server})",
            dir.display()
        )
    })
}

/// The Secret named by `secret-name` / `secret-namespace`, read through the Kubernetes API
/// at each login (upstream watches it through an informer; a login is rare enough that one
/// GET is cheaper than a watch held open).
pub struct SecretSource {
    pub namespace: String,
    pub name: String,
    /// The binary's `--kubeconfig`; in-cluster configuration when `None`.
    kubeconfig: Option<PathBuf>,
    client: OnceCell<kube::Client>,
    /// The credentials last read: upstream keeps using them when the Secret is deleted
    /// (a deleted Secret must not take the cluster's cloud access down with it).
    last: std::sync::Mutex<BTreeMap<String, Credential>>,
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret {{ {}/{} }}", self.namespace, self.name)
    }
}

impl SecretSource {
    pub fn new(namespace: String, name: String, kubeconfig: Option<PathBuf>) -> Self {
        Self {
            namespace,
            name,
            kubeconfig,
            client: OnceCell::new(),
            last: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The credentials of `server` in the Secret as it is now. A Secret not found falls
    /// back to the last read (as upstream's cache); any other API failure is Unavailable
    /// (retried: nothing is decided on it); a Secret without `server` is Unauthenticated.
    pub async fn credential(&self, server: &str) -> Result<Credential, CloudError> {
        let what = format!("vsphere: secret {}/{}", self.namespace, self.name);
        let client = self
            .client
            .get_or_try_init(|| overcast_kube::client(self.kubeconfig.as_deref()))
            .await
            .map_err(|e| CloudError::Unavailable(format!("{what}: the Kubernetes API: {e:#}")))?;
        let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &self.namespace);
        let all = match api.get_opt(&self.name).await {
            Ok(Some(secret)) => {
                let data: BTreeMap<String, Vec<u8>> = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                let all = parse(&data)
                    .map_err(|e| CloudError::Unauthenticated(format!("{what}: {e}")))?;
                *self.last.lock().unwrap_or_else(|p| p.into_inner()) = all.clone();
                all
            }
            Ok(None) => {
                let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if last.is_empty() {
                    return Err(CloudError::Unauthenticated(format!("{what} not found")));
                }
                tracing::warn!(secret = %format!("{}/{}", self.namespace, self.name), "the credentials Secret is gone: the credentials last read from it are used");
                last
            }
            Err(e) => return Err(CloudError::Unavailable(format!("{what}: {e}"))),
        };
        all.get(server).cloned().ok_or_else(|| {
            CloudError::Unauthenticated(format!(
                "{what}: no {server}.username / {server}.password (or server_<x> naming {server})"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn both_key_forms_are_read_and_incomplete_sets_refused() {
        let c = parse(&data(&[
            ("vc1.example.com.username", "admin\n"),
            ("vc1.example.com.password", "s3cret\n"),
            ("server_b", "fd01::1"),
            ("username_b", "u6"),
            ("password_b", "p6"),
        ]))
        .unwrap();
        assert_eq!(c["vc1.example.com"].user, "admin");
        assert_eq!(c["vc1.example.com"].password, "s3cret");
        assert_eq!(c["fd01::1"].user, "u6");
        assert!(!format!("{c:?}").contains("s3cret"));
        for bad in [
            &[("vc.username", "u")][..],
            &[("vc.password", "p")],
            &[("server_a", "vc"), ("username_a", "u")],
            &[("username_x", "u")],
            &[("server_", "vc")],
        ] {
            let e = parse(&data(bad)).unwrap_err();
            assert!(!e.contains("\"u\"") && !e.contains("\"p\""), "{e}");
        }
    }

    #[test]
    fn a_mounted_secret_directory_is_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("10.0.0.1.username"), "admin").unwrap();
        std::fs::write(dir.path().join("10.0.0.1.password"), "pw").unwrap();
        std::fs::create_dir(dir.path().join("..2026_11_25")).unwrap();
        let c = from_directory(dir.path(), "10.0.0.1").unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("admin", "pw"));
        let e = from_directory(dir.path(), "other").unwrap_err();
        assert!(e.contains("other.username"), "{e}");
        assert!(from_directory(&dir.path().join("absent"), "x").is_err());
    }
}
