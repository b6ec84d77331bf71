//! What a resource and a data source do, whatever the cloud: the provider's server
//! ([`crate::server`]) reads the values, plans and calls these.

use std::time::Duration;

use overcast_api::tfplugin6 as tf;
use overcast_cloud::CloudError;

use crate::schema::{Block, Obj};

/// An error for Terraform to show, naming the attribute it is about when there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Diag {
    pub summary: String,
    pub detail: String,
    pub attribute: Option<String>,
}

impl Diag {
    pub fn new(summary: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            detail: detail.into(),
            attribute: None,
        }
    }

    /// About the attribute `name`.
    pub fn at(name: &str, summary: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            attribute: Some(name.to_owned()),
            ..Self::new(summary, detail)
        }
    }

    /// A cloud's failure while doing `what` ("create the VM").
    pub fn cloud(what: &str, e: CloudError) -> Self {
        Self::new(format!("Failed to {what}"), e.to_string())
    }

    pub fn to_proto(&self) -> tf::Diagnostic {
        tf::Diagnostic {
            severity: tf::diagnostic::Severity::Error as i32,
            summary: self.summary.clone(),
            detail: self.detail.clone(),
            attribute: self.attribute.as_ref().map(|a| tf::AttributePath {
                steps: vec![tf::attribute_path::Step {
                    selector: Some(tf::attribute_path::step::Selector::AttributeName(a.clone())),
                }],
            }),
        }
    }
}

pub type Outcome<T> = std::result::Result<T, Diag>;

/// A managed resource on one cloud's client `C`.
#[async_trait::async_trait]
pub trait Resource<C: Send + Sync>: Send + Sync {
    fn schema(&self) -> Block;

    /// What the configuration alone says is wrong (before any cloud call).
    fn validate(&self, _config: &Obj) -> Vec<Diag> {
        Vec::new()
    }

    /// Whether the recorded `prior` and the configured `proposed` value of the attribute
    /// `name` say the same (a state that holds a digest of the text, as the provider it
    /// stands in for wrote it): then a change of it does not replace the object.
    fn same(&self, _name: &str, _prior: &crate::cty::Value, _proposed: &crate::cty::Value) -> bool {
        false
    }

    /// Makes the object `planned` describes; answers its state. An error after the
    /// object exists answers it too (`Err((Some(state), diag))`), so Terraform keeps it
    /// and a re-run finishes or replaces it instead of making a second one.
    async fn create(&self, cloud: &C, planned: &Obj) -> Result<Obj, (Option<Obj>, Diag)>;

    /// The object as the cloud has it now, `None` when it is gone. `state` is what
    /// Terraform last recorded (after an import: the id alone).
    async fn read(&self, cloud: &C, state: &Obj) -> Outcome<Option<Obj>>;

    /// Changes in place what can change (the rest replaces: the schema's `force_new`).
    async fn update(&self, _cloud: &C, _prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        Ok(planned.clone())
    }

    /// The state an import of `id` starts from (then read): the id alone, unless the
    /// resource's id names its parent too (`<vm_id>/<nic_id>`).
    fn import(&self, id: &str) -> Outcome<Obj> {
        Ok(Obj::from([(
            "id".to_owned(),
            crate::cty::Value::String(id.to_owned()),
        )]))
    }

    /// Removes the object; one already gone is not an error.
    async fn delete(&self, cloud: &C, state: &Obj) -> Outcome<()>;
}

/// A resource of a provider standing in for one of the legacy SDK (`Server::legacy`):
/// its schema with every optional attribute of a nested block also computed, since that
/// SDK's states hold each such attribute at its zero value where nobody set it (a
/// planned null there would be a change).
pub struct SdkV2<R>(pub R);

#[async_trait::async_trait]
impl<C: Send + Sync, R: Resource<C>> Resource<C> for SdkV2<R> {
    fn schema(&self) -> Block {
        let mut b = self.0.schema();
        b.keep_nested_optional();
        b
    }
    fn validate(&self, config: &Obj) -> Vec<Diag> {
        self.0.validate(config)
    }
    fn same(&self, name: &str, prior: &crate::cty::Value, proposed: &crate::cty::Value) -> bool {
        self.0.same(name, prior, proposed)
    }
    async fn create(&self, cloud: &C, planned: &Obj) -> Result<Obj, (Option<Obj>, Diag)> {
        self.0.create(cloud, planned).await
    }
    async fn read(&self, cloud: &C, state: &Obj) -> Outcome<Option<Obj>> {
        self.0.read(cloud, state).await
    }
    async fn update(&self, cloud: &C, prior: &Obj, planned: &Obj) -> Outcome<Obj> {
        self.0.update(cloud, prior, planned).await
    }
    fn import(&self, id: &str) -> Outcome<Obj> {
        self.0.import(id)
    }
    async fn delete(&self, cloud: &C, state: &Obj) -> Outcome<()> {
        self.0.delete(cloud, state).await
    }
}

/// A data source on one cloud's client `C`.
#[async_trait::async_trait]
pub trait DataSource<C: Send + Sync>: Send + Sync {
    fn schema(&self) -> Block;

    fn validate(&self, _config: &Obj) -> Vec<Diag> {
        Vec::new()
    }

    /// The data for `config`, its computed attributes filled.
    async fn read(&self, cloud: &C, config: &Obj) -> Outcome<Obj>;
}

/// How long a wait for a cloud lasts (a clone, a start, a removal), and how often it
/// looks.
pub const WAIT: Duration = Duration::from_secs(600);
pub const POLL: Duration = Duration::from_millis(500);

/// Looks with `look` every [`POLL`] until it answers something, for at most [`WAIT`];
/// `what` is what was waited for, said when it never came.
pub async fn until<T, F, Fut>(what: &str, mut look: F) -> Outcome<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Outcome<Option<T>>>,
{
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = look().await? {
            return Ok(v);
        }
        if started.elapsed() > WAIT {
            return Err(Diag::new(
                "Timed out",
                format!("waited {} s for {what}", WAIT.as_secs()),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}
