//! Controller metrics: reconciles and their errors by kind, durations, cloud calls.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabel {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCallLabel {
    pub call: String,
}

pub struct Metrics {
    pub reconciles: Family<ControllerLabel, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    pub cloud_calls: Family<CloudCallLabel, Counter>,
    /// NotReady nodes missing from the cloud that the deletion guard kept.
    pub node_deletions_refused: Counter,
    /// 1 while this replica leads (client-go's name, so existing alerts keep working).
    pub leader: Family<LeaseLabel, Gauge>,
    /// Services waiting for a retry after their balancer failed.
    pub service_backoff: Gauge,
    /// Out-of-service taints applied and removed by fencing.
    pub fencing: Family<ActionLabel, Counter>,
    /// Nodes carrying fencing's taint after the last sync.
    pub out_of_service: Gauge,
}

fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let m = Arc::new(Self {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(histogram),
            cloud_calls: Family::default(),
            node_deletions_refused: Counter::default(),
            leader: Family::default(),
            service_backoff: Gauge::default(),
            fencing: Family::default(),
            out_of_service: Gauge::default(),
        });
        // Both series from the start, so that a rate over them is 0, not absent.
        for action in ["applied", "removed"] {
            drop(m.fencing.get_or_create(&ActionLabel {
                action: action.into(),
            }));
        }
        registry.register(
            "leader_election_master_status",
            "1 while this replica holds the leader lease, 0 otherwise",
            m.leader.clone(),
        );
        let r = registry.sub_registry_with_prefix("ccm");
        r.register(
            "reconciles",
            "Reconciles run, by controller",
            m.reconciles.clone(),
        );
        r.register(
            "reconcile_errors",
            "Reconcile errors, by controller and kind",
            m.errors.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Reconcile duration, by controller",
            m.duration.clone(),
        );
        r.register(
            "cloud_calls",
            "Calls made to the cloud, by call",
            m.cloud_calls.clone(),
        );
        r.register(
            "service_retry_waiting",
            "Services whose load balancer failed, waiting for their next try",
            m.service_backoff.clone(),
        );
        r.register(
            "node_deletions_refused",
            "NotReady nodes the cloud no longer lists that the deletion guard kept",
            m.node_deletions_refused.clone(),
        );
        r.register(
            "node_fencing",
            "Out-of-service taints the fencing controller applied and removed, by action",
            m.fencing.clone(),
        );
        r.register(
            "nodes_out_of_service",
            "Nodes carrying the out-of-service taint the fencing controller applied",
            m.out_of_service.clone(),
        );
        m
    }

    /// For tests and tools that do not export metrics.
    pub fn unregistered() -> Arc<Self> {
        Self::register(&mut Registry::default())
    }

    pub fn leading(&self, lease: &str, yes: bool) {
        self.leader
            .get_or_create(&LeaseLabel {
                name: lease.to_owned(),
            })
            .set(i64::from(yes));
    }

    pub fn fenced(&self, action: &str) {
        self.fencing
            .get_or_create(&ActionLabel {
                action: action.to_owned(),
            })
            .inc();
    }

    pub fn cloud_call(&self, call: &str) {
        self.cloud_calls
            .get_or_create(&CloudCallLabel {
                call: call.to_owned(),
            })
            .inc();
    }

    pub fn reconciled(&self, controller: &str, seconds: f64, error: Option<&crate::Error>) {
        let label = ControllerLabel {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&label).inc();
        self.duration.get_or_create(&label).observe(seconds);
        if let Some(e) = error {
            self.errors
                .get_or_create(&ErrorLabels {
                    controller: controller.to_owned(),
                    kind: e.kind().to_owned(),
                })
                .inc();
        }
    }
}
