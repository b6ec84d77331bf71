//! The Kubernetes client every controller service builds the same way: from the
//! kubeconfig it was given, or else from the in-cluster service account.

use std::path::Path;

use anyhow::Context as _;
use kube::{Client, Config};

pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
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
    Ok(Client::try_from(config)?)
}
