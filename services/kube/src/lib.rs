//! What the controller services share: the Kubernetes client, built the same way from the
//! kubeconfig it was given, or else from the in-cluster service account.

pub mod leader;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::path::Path;

use anyhow::Context as _;
use kube::{Client, Config};

pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    Ok(Client::try_from(config(kubeconfig).await?)?)
}

/// The configuration [`client`] builds its client from (where the API server is, among
/// other things).
pub async fn config(kubeconfig: Option<&Path>) -> anyhow::Result<Config> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("read {}", path.display()))?;
            Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => Config::infer()
            .await
            .context("no kubeconfig and no in-cluster configuration")?,
    };
    Ok(config)
}

/// One kind of request a service makes to the Kubernetes API, in RBAC's terms. Each
/// service keeps the list of its calls next to the code that makes them; the manifests'
/// RBAC rules are tested against these lists (nothing missing, nothing more), and the
/// integration tests check every request the real binaries sent is on their list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiCall {
    /// API group: `""` for the core group.
    pub group: &'static str,
    /// Resource, with its subresource after a slash: `nodes`, `nodes/status`.
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    /// `Some(ns)`: only in that namespace (a Role); `None`: in any namespace or
    /// cluster-scoped (a ClusterRole).
    pub namespace: Option<&'static str>,
    /// The object names the calls are limited to (RBAC `resourceNames`); empty for any.
    pub names: &'static [&'static str],
}

impl ApiCall {
    /// Whether this entry covers one request (`name` is `None` for a list, watch or
    /// create, which RBAC checks without a name).
    pub fn covers(
        &self,
        group: &str,
        resource: &str,
        verb: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> bool {
        self.group == group
            && self.resource == resource
            && self.verbs.contains(&verb)
            && (self.namespace.is_none() || self.namespace == namespace)
            && (self.names.is_empty() || name.is_some_and(|n| self.names.contains(&n)))
    }
}
