//! The servers of the cluster's nodes, read one by one as OCCM reads them
//! (`InstancesV2`: `GET /servers/{id}` for a node with a providerID, a `name` search
//! anchored `^…$` for one without): a sync's cost follows the cluster, not the project.
//!
//! Each answer is about one server: a 404 for a server GET is Nova saying that server is
//! gone, which is what the ccm needs before it deletes a Node; anything else that is not
//! the server is an error ("unknown"). A name search's answer is filtered again by the
//! exact name: Nova takes `name` as a regular expression, and a deployment that drops an
//! unknown filter would answer every server.

use std::sync::atomic::Ordering;

use futures::stream::{self, StreamExt, TryStreamExt};
use http::Method;
use overcast_cloud::instances::{Instances, NodeRef};
use overcast_cloud::{CloudError, Result};
use serde::Deserialize;

use super::model::Server;
use super::NovaInstances;
use crate::client::{json, Microversion, Service};

/// Server GETs in flight at once: a node sync of a large cluster stays a few round trips
/// long without a burst Nova's rate limits would refuse.
const IN_FLIGHT: usize = 8;

impl NovaInstances {
    /// The servers the providerIDs of `nodes` name, and every server named as a node
    /// without one. A server gone (404) is left out; a providerID this cloud cannot read
    /// (another region's, malformed) is skipped — the ccm leaves such a node alone.
    pub(super) async fn servers_of(&self, nodes: &[NodeRef<'_>]) -> Result<Vec<Server>> {
        let version = self.server_version().await?;
        let mut ids: Vec<String> = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for node in nodes {
            match node.provider_id {
                Some(pid) => {
                    if let Ok(keys) = self.instance_keys(pid) {
                        ids.extend(keys.into_iter().next().map(|k| k.0));
                    }
                }
                None => names.push(node.name),
            }
        }
        ids.sort();
        ids.dedup();
        names.sort_unstable();
        names.dedup();
        let asked = ids.len();
        let mut out: Vec<Server> = stream::iter(ids)
            .map(|id| async move { self.server(&id, version).await })
            .buffer_unordered(IN_FLIGHT)
            .try_filter_map(|s| async move { Ok(s) })
            .try_collect()
            .await?;
        if asked > 0 && out.is_empty() {
            self.confirm_every_server_gone(asked).await?;
        }
        for name in names {
            let query = format!("^{}$", regex_escape(name));
            let found: Vec<Server> = self
                .list(
                    Service::Compute,
                    "server_list",
                    &format!("/servers/detail?name={}", crate::volumes::encode(&query)),
                    "servers",
                    |s: &Server| &s.id,
                    Some(version),
                )
                .await?;
            out.extend(found.into_iter().filter(|s| s.name == name));
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.dedup_by(|a, b| a.id == b.id);
        Ok(out)
    }

    /// Every node's server answered 404: true when the cluster's servers are gone, and
    /// also what a token for another project (an edited secret) or a proxy answering for
    /// another cloud reads as. The listing's guard holds here too: a project that lists
    /// no server at all, where servers were seen before, is a wrong answer, not a cluster
    /// gone — no node is deleted on it. One call of one server at most.
    async fn confirm_every_server_gone(&self, asked: usize) -> Result<()> {
        let before = self.last_count.load(Ordering::Relaxed);
        if before == 0 {
            return Ok(());
        }
        let resp = self
            .os
            .call(
                Service::Compute,
                "server_list",
                Method::GET,
                "/servers?limit=1",
                None,
                None,
            )
            .await?;
        if resp.status.as_u16() != 200 {
            return Err(overcast_cloud_http::status_error(
                "openstack",
                "server_list",
                &resp,
            ));
        }
        #[derive(Deserialize)]
        struct Ids {
            servers: Option<Vec<serde_json::Value>>,
        }
        let listed = json::<Ids>("server_list", &resp)?.servers.ok_or_else(|| {
            CloudError::Unavailable("openstack: server_list: the answer has no \"servers\"".into())
        })?;
        if listed.is_empty() {
            return Err(CloudError::Unavailable(format!(
                "openstack: Nova answered 404 for each of the {asked} nodes' servers and lists no server where {before} were seen: taken as a wrong answer (another project?), not as every server gone"
            )));
        }
        Ok(())
    }

    /// `GET /servers/{id}`: the server, or `None` when Nova answers 404 for it.
    async fn server(&self, id: &str, version: Microversion) -> Result<Option<Server>> {
        let resp = self
            .os
            .call(
                Service::Compute,
                "server_get",
                Method::GET,
                &format!("/servers/{}", crate::volumes::encode(id)),
                None,
                Some(version),
            )
            .await?;
        match resp.status.as_u16() {
            200 => {}
            404 => return Ok(None),
            _ => {
                return Err(overcast_cloud_http::status_error(
                    "openstack",
                    "server_get",
                    &resp,
                ))
            }
        }
        #[derive(Deserialize)]
        struct One {
            server: Option<Server>,
        }
        let server = json::<One>("server_get", &resp)?.server.ok_or_else(|| {
            CloudError::Unavailable("openstack: server_get: the answer has no \"server\"".into())
        })?;
        // An answer about another server is no answer about this one.
        if server.id != id {
            return Err(CloudError::Unavailable(format!(
                "openstack: server_get: asked for server {id}, answered {}",
                server.id
            )));
        }
        Ok(Some(server))
    }
}

/// `s` as a regular expression matching itself: Go's `regexp.QuoteMeta`, which OCCM
/// applies to a node's name before it searches Nova by it. Python's `re` (Nova on
/// SQLite) and MySQL's REGEXP read these escapes alike.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::regex_escape;

    /// Go's `regexp.QuoteMeta` examples (src/regexp/all_test.go, `metaTests`).
    #[test]
    fn names_are_escaped_as_go_s_quote_meta_does() {
        assert_eq!(regex_escape(""), "");
        assert_eq!(regex_escape("foo"), "foo");
        assert_eq!(regex_escape(r"foo\.\$"), r"foo\\\.\\\$",);
        assert_eq!(regex_escape("foo.\\$"), r"foo\.\\\$");
        assert_eq!(
            regex_escape(r"!@#$%^&*()_+-=[{]}\|,<.>/?~"),
            r"!@#\$%\^&\*\(\)_\+-=\[\{\]\}\\\|,<\.>/\?~",
        );
        assert_eq!(regex_escape("node-1.example"), r"node-1\.example");
    }
}
