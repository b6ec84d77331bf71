//! The metric names the Deckhouse dashboards already use.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeValue {
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DiskLabels {
    pub id: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub name: String,
    pub message: String,
}

pub struct Metrics {
    /// 1 while the last request of that type to the cloud failed.
    pub cloud_request_error: Family<TypeValue, Gauge>,
    /// 1 while the last write of a published object failed.
    pub update_resource_error: Gauge,
    pub orphaned_disk_info: Family<DiskLabels, Gauge>,
    pub cloud_conditions_error: Family<ConditionLabels, Gauge>,
    pub cycle_duration: Histogram,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let m = Arc::new(Self {
            cloud_request_error: Family::default(),
            update_resource_error: Gauge::default(),
            orphaned_disk_info: Family::default(),
            cloud_conditions_error: Family::default(),
            cycle_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
        });
        registry.register(
            "cloud_data_discovery_cloud_request_error",
            "A cloud request failed (by type)",
            m.cloud_request_error.clone(),
        );
        registry.register(
            "cloud_data_discovery_update_resource_error",
            "Writing a discovery object failed",
            m.update_resource_error.clone(),
        );
        registry.register(
            "cloud_data_discovery_orphaned_disk_info",
            "A disk the cluster made that no PersistentVolume references",
            m.orphaned_disk_info.clone(),
        );
        registry.register(
            "cloud_data_discovery_cloud_conditions_error",
            "A cloud health check fails",
            m.cloud_conditions_error.clone(),
        );
        registry.register(
            "cloud_data_discovery_cycle_duration_seconds",
            "Duration of a discovery cycle",
            m.cycle_duration.clone(),
        );
        m
    }

    pub fn request(&self, kind: &str, failed: bool) {
        self.cloud_request_error
            .get_or_create(&TypeValue {
                r#type: kind.to_owned(),
            })
            .set(i64::from(failed));
    }
}
