//! The `tfplugin6.Provider` service for one cloud: values read and written against the
//! schemas, plans made the same way for every resource (a change to a `force_new`
//! attribute replaces, any other updates in place), and every failure a diagnostic —
//! a malformed request too, never a crash.

use std::collections::BTreeMap;
use std::sync::Arc;

use overcast_api::tfplugin6::{self as tf, provider_server::Provider};
use tokio::sync::RwLock;
use tonic::{Request, Response, Status};

use crate::cty::{self, Type, Value};
use crate::resource::{DataSource, Diag, Outcome, Resource, SdkV2};
use crate::schema::{Block, Nesting, Obj, Use};

/// Makes the cloud's client from the provider block (a DVP kubeconfig is read
/// asynchronously).
pub type Configure<C> = Box<
    dyn Fn(Obj) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome<C>> + Send>>
        + Send
        + Sync,
>;

pub struct Server<C> {
    provider: Block,
    configure: Configure<C>,
    resources: BTreeMap<&'static str, Box<dyn Resource<C>>>,
    data_sources: BTreeMap<&'static str, Box<dyn DataSource<C>>>,
    cloud: RwLock<Option<Arc<C>>>,
    /// Standing in for a provider of the legacy SDK (SDKv2): see [`Server::legacy`].
    legacy: bool,
}

impl<C: Send + Sync + 'static> Server<C> {
    pub fn new(provider: Block, configure: Configure<C>) -> Self {
        Self {
            provider,
            configure,
            resources: BTreeMap::new(),
            data_sources: BTreeMap::new(),
            cloud: RwLock::new(None),
            legacy: false,
        }
    }

    /// This provider stands in for one built on the legacy SDK (terraform-provider-
    /// openstack), whose states it must read as its own: they are at schema version 0,
    /// and hold every attribute of a nested block, the ones nobody set at their zero
    /// value — so such attributes are optional and computed here ([`SdkV2`]), a state
    /// holding `""` then plans no change where the configuration says nothing. (The
    /// protocol's `legacy_type_system`, which makes Terraform overlook such differences
    /// for the SDK itself, is not honoured by Terraform 1.0 on protocol 6: the plans and
    /// results here are exact.) Call before adding resources.
    pub fn legacy(mut self) -> Self {
        self.legacy = true;
        self
    }

    /// The data sources served, by name.
    pub fn data_source_names(&self) -> Vec<&'static str> {
        self.data_sources.keys().copied().collect()
    }

    /// The schema version of the states this provider writes: the upstream's 0 for one
    /// standing in for a legacy-SDK provider (so its states stay that provider's, both
    /// ways), else this release's [`crate::upgrade::STATE_VERSION`].
    pub fn state_version(&self) -> i64 {
        if self.legacy {
            0
        } else {
            crate::upgrade::STATE_VERSION
        }
    }

    pub fn resource(mut self, name: &'static str, r: impl Resource<C> + 'static) -> Self {
        if self.legacy {
            self.resources.insert(name, Box::new(SdkV2(r)));
        } else {
            self.resources.insert(name, Box::new(r));
        }
        self
    }

    pub fn data_source(mut self, name: &'static str, d: impl DataSource<C> + 'static) -> Self {
        self.data_sources.insert(name, Box::new(d));
        self
    }

    /// Every resource's state type (`schema_version`'s discipline: `upgrade.rs`; the
    /// provider binary's test records them).
    pub fn state_types(&self) -> serde_json::Value {
        self.resources
            .iter()
            .map(|(name, r)| ((*name).to_owned(), r.schema().ty().to_json()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    fn resource_of(&self, name: &str) -> Outcome<&dyn Resource<C>> {
        self.resources.get(name).map(|r| r.as_ref()).ok_or_else(|| {
            Diag::new(
                format!("No resource type {name:?}"),
                "this provider has none of that name",
            )
        })
    }

    fn data_of(&self, name: &str) -> Outcome<&dyn DataSource<C>> {
        self.data_sources
            .get(name)
            .map(|d| d.as_ref())
            .ok_or_else(|| {
                Diag::new(
                    format!("No data source {name:?}"),
                    "this provider has none of that name",
                )
            })
    }

    async fn cloud(&self) -> Outcome<Arc<C>> {
        self.cloud.read().await.clone().ok_or_else(|| {
            Diag::new(
                "The provider is not configured",
                "Terraform called the cloud before ConfigureProvider",
            )
        })
    }
}

/// The object in a DynamicValue (null when absent or null).
fn decode(v: Option<&tf::DynamicValue>, ty: &Type) -> Outcome<Option<Obj>> {
    let Some(v) = v else { return Ok(None) };
    let value = if !v.msgpack.is_empty() {
        cty::decode(&v.msgpack, ty)
    } else if !v.json.is_empty() {
        serde_json::from_slice(&v.json)
            .map_err(|e| e.to_string())
            .and_then(|j| cty::from_json(&j, ty))
    } else {
        return Ok(None);
    }
    .map_err(|e| Diag::new("Malformed value from Terraform", e))?;
    match value {
        Value::Null => Ok(None),
        Value::Map(m) => Ok(Some(m)),
        other => Err(Diag::new(
            "Malformed value from Terraform",
            format!("an object was expected, not {other:?}"),
        )),
    }
}

fn encode(o: Option<&Obj>, ty: &Type) -> tf::DynamicValue {
    let v = o.map(|o| Value::Map(o.clone())).unwrap_or(Value::Null);
    tf::DynamicValue {
        msgpack: cty::encode(&v, ty),
        json: Vec::new(),
    }
}

fn diags(d: impl IntoIterator<Item = Diag>) -> Vec<tf::Diagnostic> {
    d.into_iter().map(|d| d.to_proto()).collect()
}

/// What a refresh keeps: the provider's attributes as the cloud has them; the user's
/// where Terraform recorded a value (drift shows) or where nothing but the id is known
/// (an import), else as recorded — the cloud's defaults never show as changes the user
/// did not make. An attribute recorded null that the cloud reads as what this release
/// writes for "none" ([`crate::schema::Attr::absent`]: an earlier release's layouts passed
/// null where today's pass an empty map — 1c81bb4's DVP VM `node_selector`) takes that
/// value: the same object, said as this release says it. For a legacy SDK's stand-in
/// (`sdk`) an optional and computed attribute is the provider's too, as that SDK's Read
/// writes it whatever the state held.
fn refreshed(block: &Block, state: &Obj, seen: Obj, sdk: bool) -> Obj {
    let known = |name: &str| !matches!(state.get(name), None | Some(Value::Null));
    let imported = block.attrs.iter().all(|a| a.name == "id" || !known(a.name));
    let mut out = state.clone();
    for (k, v) in seen {
        let attr = block.attr(&k);
        let computed = attr.is_some_and(|a| a.usage == Use::Computed || (sdk && a.kept));
        let none_as_today = attr.is_some_and(|a| a.absent.as_ref() == Some(&v));
        if computed || (v != Value::Null && (imported || known(&k) || none_as_today)) {
            out.insert(k, v);
        }
    }
    out
}

/// `new` (what the resource answered) with every value the plan knew as planned:
/// Terraform takes from an apply only what the plan left unknown, and refuses any other
/// difference ("Provider produced inconsistent result"). A value the cloud holds otherwise
/// (an empty description for one nobody set) shows at the next refresh, as drift where it
/// is the user's to set. Inside a nested block given as many times as planned, element by
/// element; a set's elements, once they hold no unknown, as planned.
pub fn conform(block: &Block, planned: &Obj, mut new: Obj) -> Obj {
    for a in &block.attrs {
        match planned.get(a.name) {
            Some(Value::Unknown) | None => {}
            Some(v) if !v.has_unknown() => {
                new.insert(a.name.to_owned(), v.clone());
            }
            Some(_) => {}
        }
    }
    for n in &block.nested {
        let (Some(p), Some(v)) = (planned.get(n.name), new.get_mut(n.name)) else {
            continue;
        };
        let conformed = match (p, &*v) {
            (Value::List(ps), Value::List(vs)) if ps.len() == vs.len() => {
                if n.nesting == Nesting::Set && !p.has_unknown() {
                    p.clone()
                } else {
                    Value::List(
                        ps.iter()
                            .zip(vs)
                            .map(|(pe, ve)| match (pe, ve) {
                                (Value::Map(pm), Value::Map(vm)) => {
                                    Value::Map(conform(&n.block, pm, vm.clone()))
                                }
                                _ => ve.clone(),
                            })
                            .collect(),
                    )
                }
            }
            (Value::Map(pm), Value::Map(vm)) => Value::Map(conform(&n.block, pm, vm.clone())),
            (p, _) if !p.has_unknown() => p.clone(),
            _ => continue,
        };
        *v = conformed;
    }
    new
}

#[tonic::async_trait]
impl<C: Send + Sync + 'static> Provider for Server<C> {
    async fn get_provider_schema(
        &self,
        _r: Request<tf::get_provider_schema::Request>,
    ) -> Result<Response<tf::get_provider_schema::Response>, Status> {
        Ok(Response::new(tf::get_provider_schema::Response {
            provider: Some(self.provider.schema()),
            resource_schemas: self
                .resources
                .iter()
                .map(|(k, r)| {
                    let mut schema = r.schema().schema();
                    schema.version = self.state_version();
                    (k.to_string(), schema)
                })
                .collect(),
            data_source_schemas: self
                .data_sources
                .iter()
                .map(|(k, d)| (k.to_string(), d.schema().schema()))
                .collect(),
            server_capabilities: Some(tf::ServerCapabilities {
                plan_destroy: false,
                get_provider_schema_optional: false,
            }),
            ..Default::default()
        }))
    }

    async fn validate_provider_config(
        &self,
        r: Request<tf::validate_provider_config::Request>,
    ) -> Result<Response<tf::validate_provider_config::Response>, Status> {
        let d = decode(r.get_ref().config.as_ref(), &self.provider.ty()).err();
        Ok(Response::new(tf::validate_provider_config::Response {
            diagnostics: diags(d),
        }))
    }

    async fn validate_resource_config(
        &self,
        r: Request<tf::validate_resource_config::Request>,
    ) -> Result<Response<tf::validate_resource_config::Response>, Status> {
        let r = r.into_inner();
        let out = self.resource_of(&r.type_name).and_then(|res| {
            let config = decode(r.config.as_ref(), &res.schema().ty())?.unwrap_or_default();
            Ok(res.validate(&config))
        });
        Ok(Response::new(tf::validate_resource_config::Response {
            diagnostics: diags(out.unwrap_or_else(|d| vec![d])),
        }))
    }

    async fn validate_data_resource_config(
        &self,
        r: Request<tf::validate_data_resource_config::Request>,
    ) -> Result<Response<tf::validate_data_resource_config::Response>, Status> {
        let r = r.into_inner();
        let out = self.data_of(&r.type_name).and_then(|d| {
            let config = decode(r.config.as_ref(), &d.schema().ty())?.unwrap_or_default();
            Ok(d.validate(&config))
        });
        Ok(Response::new(tf::validate_data_resource_config::Response {
            diagnostics: diags(out.unwrap_or_else(|d| vec![d])),
        }))
    }

    async fn upgrade_resource_state(
        &self,
        r: Request<tf::upgrade_resource_state::Request>,
    ) -> Result<Response<tf::upgrade_resource_state::Response>, Status> {
        let r = r.into_inner();
        let out = self.resource_of(&r.type_name).and_then(|res| {
            let block = res.schema();
            let ty = block.ty();
            let json = r.raw_state.map(|s| s.json).unwrap_or_default();
            let state = crate::upgrade::upgraded_to(
                self.state_version(),
                &r.type_name,
                r.version,
                &json,
                &block,
            )?;
            Ok(encode(state.as_ref(), &ty))
        });
        Ok(Response::new(match out {
            Ok(v) => tf::upgrade_resource_state::Response {
                upgraded_state: Some(v),
                diagnostics: Vec::new(),
            },
            Err(d) => tf::upgrade_resource_state::Response {
                upgraded_state: None,
                diagnostics: diags([d]),
            },
        }))
    }

    async fn configure_provider(
        &self,
        r: Request<tf::configure_provider::Request>,
    ) -> Result<Response<tf::configure_provider::Response>, Status> {
        let out = match decode(r.get_ref().config.as_ref(), &self.provider.ty()) {
            Ok(c) => (self.configure)(c.unwrap_or_default()).await,
            Err(d) => Err(d),
        };
        let d = match out {
            Ok(cloud) => {
                *self.cloud.write().await = Some(Arc::new(cloud));
                None
            }
            Err(d) => Some(d),
        };
        Ok(Response::new(tf::configure_provider::Response {
            diagnostics: diags(d),
        }))
    }

    async fn read_resource(
        &self,
        r: Request<tf::read_resource::Request>,
    ) -> Result<Response<tf::read_resource::Response>, Status> {
        let r = r.into_inner();
        let out: Outcome<tf::DynamicValue> = async {
            let res = self.resource_of(&r.type_name)?;
            let block = res.schema();
            let ty = block.ty();
            let Some(state) = decode(r.current_state.as_ref(), &ty)? else {
                return Ok(encode(None, &ty));
            };
            let cloud = self.cloud().await?;
            let seen = res.read(&cloud, &state).await?;
            let out = seen.map(|s| {
                let mut o = refreshed(&block, &state, s, self.legacy);
                block.fill_blocks(&mut o);
                o
            });
            Ok(encode(out.as_ref(), &ty))
        }
        .await;
        Ok(Response::new(match out {
            Ok(v) => tf::read_resource::Response {
                new_state: Some(v),
                diagnostics: Vec::new(),
                private: r.private,
            },
            Err(d) => tf::read_resource::Response {
                new_state: r.current_state,
                diagnostics: diags([d]),
                private: r.private,
            },
        }))
    }

    async fn plan_resource_change(
        &self,
        r: Request<tf::plan_resource_change::Request>,
    ) -> Result<Response<tf::plan_resource_change::Response>, Status> {
        let r = r.into_inner();
        let out: Outcome<tf::plan_resource_change::Response> = (|| {
            let res = self.resource_of(&r.type_name)?;
            let block = res.schema();
            let ty = block.ty();
            let prior = decode(r.prior_state.as_ref(), &ty)?;
            let config = decode(r.config.as_ref(), &ty)?.unwrap_or_default();
            let proposed = decode(r.proposed_new_state.as_ref(), &ty)?
                .map(|p| block.with_defaults(&config, p));
            let (planned, replace) = match (&prior, proposed) {
                (_, None) => (None, Vec::new()),
                (None, Some(p)) => (Some(block.plan_create(&p)), Vec::new()),
                (Some(prior), Some(p)) => {
                    let replace = block
                        .replacing(prior, &p)
                        .into_iter()
                        .filter(|name| {
                            let at = |o: &Obj| o.get(*name).cloned().unwrap_or(Value::Null);
                            !res.same(name, &at(prior), &at(&p))
                        })
                        .collect::<Vec<_>>();
                    if replace.is_empty() {
                        (Some(p), replace)
                    } else {
                        // A new object: what the provider sets is not known yet — its
                        // computed attributes, and those the configuration leaves to it.
                        let mut fresh = p.clone();
                        let unset =
                            |name: &str| matches!(config.get(name), None | Some(Value::Null));
                        for a in block
                            .attrs
                            .iter()
                            .filter(|a| a.usage == Use::Computed || (a.kept && unset(a.name)))
                        {
                            fresh.insert(a.name.to_owned(), Value::Null);
                        }
                        (Some(block.plan_create(&fresh)), replace)
                    }
                }
            };
            Ok(tf::plan_resource_change::Response {
                planned_state: Some(encode(planned.as_ref(), &ty)),
                requires_replace: replace
                    .into_iter()
                    .map(|name| tf::AttributePath {
                        steps: vec![tf::attribute_path::Step {
                            selector: Some(tf::attribute_path::step::Selector::AttributeName(
                                name.to_owned(),
                            )),
                        }],
                    })
                    .collect(),
                planned_private: r.prior_private.clone(),
                diagnostics: Vec::new(),
            })
        })();
        Ok(Response::new(out.unwrap_or_else(|d| {
            tf::plan_resource_change::Response {
                diagnostics: diags([d]),
                ..Default::default()
            }
        })))
    }

    async fn apply_resource_change(
        &self,
        r: Request<tf::apply_resource_change::Request>,
    ) -> Result<Response<tf::apply_resource_change::Response>, Status> {
        let r = r.into_inner();
        let res = match self.resource_of(&r.type_name) {
            Ok(res) => res,
            Err(d) => {
                return Ok(Response::new(tf::apply_resource_change::Response {
                    diagnostics: diags([d]),
                    ..Default::default()
                }))
            }
        };
        let block = res.schema();
        let ty = block.ty();
        let out: Result<Option<Obj>, (Option<Obj>, Diag)> = async {
            let prior = decode(r.prior_state.as_ref(), &ty).map_err(|d| (None, d))?;
            let planned = decode(r.planned_state.as_ref(), &ty).map_err(|d| (prior.clone(), d))?;
            let cloud = self.cloud().await.map_err(|d| (prior.clone(), d))?;
            match (&prior, planned) {
                (None, None) => Ok(None),
                (None, Some(p)) => {
                    let as_planned = |s: Obj| conform(&block, &p, s);
                    res.create(&cloud, &p)
                        .await
                        .map(|s| Some(as_planned(s)))
                        .map_err(|(s, d)| (s.map(as_planned), d))
                }
                (Some(old), None) => res
                    .delete(&cloud, old)
                    .await
                    .map(|()| None)
                    .map_err(|d| (prior.clone(), d)),
                (Some(old), Some(p)) => res
                    .update(&cloud, old, &p)
                    .await
                    .map(|s| Some(conform(&block, &p, s)))
                    .map_err(|d| (prior.clone(), d)),
            }
        }
        .await;
        let (mut state, d) = match out {
            Ok(s) => (s, None),
            Err((s, d)) => (s, Some(d)),
        };
        // A value left unknown by the plan that the cloud did not report (a kept
        // attribute the engine leaves out, one inside a block, say) is null once applied:
        // Terraform takes no unknown after an apply.
        for v in state.iter_mut().flat_map(|s| s.values_mut()) {
            v.forget_unknown();
        }
        Ok(Response::new(tf::apply_resource_change::Response {
            new_state: Some(encode(state.as_ref(), &ty)),
            private: r.planned_private,
            diagnostics: diags(d),
        }))
    }

    async fn import_resource_state(
        &self,
        r: Request<tf::import_resource_state::Request>,
    ) -> Result<Response<tf::import_resource_state::Response>, Status> {
        let r = r.into_inner();
        Ok(Response::new(
            match self.resource_of(&r.type_name).and_then(|res| {
                let mut state = res.import(&r.id)?;
                res.schema().fill_blocks(&mut state);
                Ok((res, state))
            }) {
                Ok((res, state)) => tf::import_resource_state::Response {
                    imported_resources: vec![tf::import_resource_state::ImportedResource {
                        type_name: r.type_name,
                        state: Some(encode(Some(&state), &res.schema().ty())),
                        private: Vec::new(),
                    }],
                    diagnostics: Vec::new(),
                },
                Err(d) => tf::import_resource_state::Response {
                    imported_resources: Vec::new(),
                    diagnostics: diags([d]),
                },
            },
        ))
    }

    async fn read_data_source(
        &self,
        r: Request<tf::read_data_source::Request>,
    ) -> Result<Response<tf::read_data_source::Response>, Status> {
        let r = r.into_inner();
        let out: Outcome<tf::DynamicValue> = async {
            let d = self.data_of(&r.type_name)?;
            let ty = d.schema().ty();
            let config = decode(r.config.as_ref(), &ty)?.unwrap_or_default();
            let cloud = self.cloud().await?;
            Ok(encode(Some(&d.read(&cloud, &config).await?), &ty))
        }
        .await;
        Ok(Response::new(match out {
            Ok(v) => tf::read_data_source::Response {
                state: Some(v),
                diagnostics: Vec::new(),
            },
            Err(d) => tf::read_data_source::Response {
                state: None,
                diagnostics: diags([d]),
            },
        }))
    }

    async fn stop_provider(
        &self,
        _r: Request<tf::stop_provider::Request>,
    ) -> Result<Response<tf::stop_provider::Response>, Status> {
        Ok(Response::new(tf::stop_provider::Response::default()))
    }
}

#[cfg(test)]
mod tests;
