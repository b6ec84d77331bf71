//! Reading many objects' properties in one call: a ContainerView over the inventory and
//! the PropertyCollector's `RetrievePropertiesEx` (continued while it hands back a
//! token). The view lives in the session; it is made once and made again when the
//! vCenter no longer knows it (a new session after an expiry).

use std::collections::BTreeMap;
use std::sync::Arc;

use overcast_cloud::CloudError;
use tokio::sync::Mutex;

use crate::session::{Endpoint, Vcenter};
use crate::soap::{el, Moref};
use crate::xml::Element;

/// One object's properties: each path's `val` element (absent when the object lacks
/// it), and the paths the vCenter could not read (`missingSet`: no permission, an
/// inaccessible VM).
#[derive(Debug, Clone)]
pub struct Props {
    pub obj: Moref,
    pub values: BTreeMap<String, Element>,
    pub missing: Vec<String>,
}

impl Props {
    pub fn get(&self, path: &str) -> Option<&Element> {
        self.values.get(path)
    }

    pub fn text(&self, path: &str) -> Option<&str> {
        self.get(path).map(|e| e.text.as_str())
    }
}

/// A view over every object of some types below the root folder.
pub struct View {
    vc: Arc<Vcenter>,
    types: Vec<&'static str>,
    view: Mutex<Option<Moref>>,
}

/// At most this many objects an answer (the vCenter may send fewer and a token).
const PAGE: usize = 1000;

impl View {
    pub fn new(vc: Arc<Vcenter>, types: &[&'static str]) -> Self {
        Self {
            vc,
            types: types.to_vec(),
            view: Mutex::new(None),
        }
    }

    pub fn vcenter(&self) -> &Arc<Vcenter> {
        &self.vc
    }

    async fn view(&self) -> Result<Moref, CloudError> {
        let mut held = self.view.lock().await;
        if let Some(v) = held.as_ref() {
            return Ok(v.clone());
        }
        let content = self.vc.content().await?;
        let mut params = content.view_manager.xml("_this") + &content.root_folder.xml("container");
        for t in &self.types {
            params.push_str(&el("type", t));
        }
        params.push_str(&el("recursive", "true"));
        let r = self
            .vc
            .call(Endpoint::Vim, "CreateContainerView", &params, false)
            .await?;
        let view = r.child("returnval").and_then(Moref::of).ok_or_else(|| {
            CloudError::Unavailable(format!(
                "vsphere: {}: CreateContainerView answered no view",
                self.vc.server()
            ))
        })?;
        *held = Some(view.clone());
        Ok(view)
    }

    /// Every object of the view's types with the given properties, per type. A view
    /// the vCenter lost (its session was replaced) is made again once.
    pub async fn retrieve(&self, specs: &[(&str, &[&str])]) -> Result<Vec<Props>, CloudError> {
        let view = self.view().await?;
        match self.retrieve_in(&view, specs).await {
            Err(CloudError::NotFound { id, .. }) if id == view.to_string() => {
                self.view.lock().await.take();
                let view = self.view().await?;
                self.retrieve_in(&view, specs).await
            }
            other => other,
        }
    }

    async fn retrieve_in(
        &self,
        view: &Moref,
        specs: &[(&str, &[&str])],
    ) -> Result<Vec<Props>, CloudError> {
        let collector = self.vc.content().await?.property_collector.clone();
        let mut spec = String::from("<specSet>");
        for (kind, paths) in specs {
            spec.push_str("<propSet>");
            spec.push_str(&el("type", kind));
            for p in *paths {
                spec.push_str(&el("pathSet", p));
            }
            spec.push_str("</propSet>");
        }
        spec.push_str("<objectSet>");
        spec.push_str(&view.xml("obj"));
        spec.push_str("<skip>true</skip><selectSet xsi:type=\"TraversalSpec\">");
        spec.push_str(
            "<name>view</name><type>ContainerView</type><path>view</path><skip>false</skip>",
        );
        spec.push_str("</selectSet></objectSet></specSet>");
        let params = format!(
            "{}{spec}<options><maxObjects>{PAGE}</maxObjects></options>",
            collector.xml("_this")
        );
        let mut out = Vec::new();
        let r = self
            .vc
            .call(Endpoint::Vim, "RetrievePropertiesEx", &params, true)
            .await?;
        // Every page or none: a continuation that fails fails the whole read (a listing
        // short of a page would make its VMs' nodes look gone). Tested through a front
        // that pages (vcsim answers everything at once).
        let mut token = read_page(r.child("returnval"), &mut out);
        while let Some(t) = token {
            let params = collector.xml("_this") + &el("token", &t);
            let r = self
                .vc
                .call(Endpoint::Vim, "ContinueRetrievePropertiesEx", &params, true)
                .await?;
            token = read_page(r.child("returnval"), &mut out);
        }
        Ok(out)
    }
}

/// One page's objects into `out`; the token for the next page, if any.
fn read_page(returnval: Option<&Element>, out: &mut Vec<Props>) -> Option<String> {
    let rv = returnval?;
    for o in rv.all("objects") {
        let Some(obj) = o.child("obj").and_then(Moref::of) else {
            continue;
        };
        let mut values = BTreeMap::new();
        for p in o.all("propSet") {
            if let (Some(name), Some(val)) = (p.text_at(&["name"]), p.child("val")) {
                values.insert(name.to_owned(), val.clone());
            }
        }
        let missing = o
            .all("missingSet")
            .filter_map(|m| m.text_at(&["path"]).map(str::to_owned))
            .collect();
        out.push(Props {
            obj,
            values,
            missing,
        });
    }
    rv.text_at(&["token"])
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

/// One object's properties (a task's `info`, a datastore's `summary`). An object the
/// vCenter does not know is `NotFound`.
pub async fn properties(vc: &Vcenter, obj: &Moref, paths: &[&str]) -> Result<Props, CloudError> {
    let collector = vc.content().await?.property_collector.clone();
    let mut spec = String::from("<specSet><propSet>");
    spec.push_str(&el("type", &obj.kind));
    for p in paths {
        spec.push_str(&el("pathSet", p));
    }
    spec.push_str("</propSet><objectSet>");
    spec.push_str(&obj.xml("obj"));
    spec.push_str("</objectSet></specSet>");
    let params = format!("{}{spec}<options></options>", collector.xml("_this"));
    let r = vc
        .call(Endpoint::Vim, "RetrievePropertiesEx", &params, true)
        .await?;
    let mut out = Vec::new();
    read_page(r.child("returnval"), &mut out);
    out.into_iter().next().ok_or_else(|| CloudError::NotFound {
        kind: "object",
        id: obj.to_string(),
    })
}

/// Several objects' properties in one call (the VMs that hold some volumes). An object the
/// vCenter does not know fails the call as `NotFound`, naming it.
pub async fn properties_of(
    vc: &Vcenter,
    objs: &[Moref],
    paths: &[&str],
) -> Result<Vec<Props>, CloudError> {
    let Some(first) = objs.first() else {
        return Ok(Vec::new());
    };
    let collector = vc.content().await?.property_collector.clone();
    let mut spec = String::from("<specSet><propSet>");
    spec.push_str(&el("type", &first.kind));
    for p in paths {
        spec.push_str(&el("pathSet", p));
    }
    spec.push_str("</propSet>");
    for obj in objs {
        spec.push_str("<objectSet>");
        spec.push_str(&obj.xml("obj"));
        spec.push_str("</objectSet>");
    }
    spec.push_str("</specSet>");
    let params = format!(
        "{}{spec}<options><maxObjects>{PAGE}</maxObjects></options>",
        collector.xml("_this")
    );
    let r = vc
        .call(Endpoint::Vim, "RetrievePropertiesEx", &params, true)
        .await?;
    let mut out = Vec::new();
    let mut token = read_page(r.child("returnval"), &mut out);
    while let Some(t) = token {
        let params = collector.xml("_this") + &el("token", &t);
        let r = vc
            .call(Endpoint::Vim, "ContinueRetrievePropertiesEx", &params, true)
            .await?;
        token = read_page(r.child("returnval"), &mut out);
    }
    Ok(out)
}
