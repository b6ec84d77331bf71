//! What the node plugin counts beyond its gRPC calls: the calls it served from what is
//! mounted because it had no record, the formats of its own it had to start again, and
//! whether its records were set aside at start. Each is a sign that state was lost,
//! which an operator should hear of even when every call succeeded.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: String,
}

#[derive(Default)]
pub struct NodeMetrics {
    unrecorded: Family<OperationLabels, Counter>,
    formats_resumed: Counter,
    records_set_aside: Gauge,
}

impl NodeMetrics {
    /// The metrics, registered under `csi_node_`.
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Arc::new(Self::default());
        let sub = registry.sub_registry_with_prefix("csi_node");
        sub.register(
            "unrecorded_mount_calls",
            "Node calls served from a mount of the volume's own disk that the node had no record of (records lost, or another plugin's mount), by operation",
            metrics.unrecorded.clone(),
        );
        sub.register(
            "formats_resumed",
            "Formats of this node's own that a crash or a failure had interrupted, made again",
            metrics.formats_resumed.clone(),
        );
        sub.register(
            "records_set_aside",
            "1 when the node's records file did not parse at start and was set aside (volumes.json.damaged-*)",
            metrics.records_set_aside.clone(),
        );
        metrics
    }

    pub fn unrecorded_mount(&self, operation: &str) {
        self.unrecorded
            .get_or_create(&OperationLabels {
                operation: operation.to_owned(),
            })
            .inc();
    }

    pub fn format_resumed(&self) {
        self.formats_resumed.inc();
    }

    pub fn records_set_aside(&self, set_aside: bool) {
        self.records_set_aside.set(i64::from(set_aside));
    }
}
