//! Metrics read back through `metrics-util`'s debugging recorder, for the
//! metrics tests of every engine.

use std::collections::HashMap;

use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, Snapshotter};

/// What the recorder saw, summed over snapshots (a snapshot resets what it
/// reads: counters and gauges to 0, histograms to empty).
#[derive(Default)]
pub struct Seen {
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
    /// Every label name seen.
    pub labels: Vec<String>,
}

/// `name{k=v,...}` with the labels sorted.
fn key_text(key: &metrics::Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Seen {
    /// Adds what the recorder saw since the last read.
    pub fn read(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let (kind, key) = key.into_parts();
            self.labels.extend(key.labels().map(|l| l.key().to_owned()));
            let text = key_text(&key);
            match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => {
                    *self.counters.entry(text).or_default() += n
                }
                (MetricKind::Gauge, DebugValue::Gauge(v)) => {
                    *self.gauges.entry(text).or_default() += v.into_inner()
                }
                (MetricKind::Histogram, DebugValue::Histogram(vs)) => self
                    .histograms
                    .entry(text)
                    .or_default()
                    .extend(vs.into_iter().map(|v| v.into_inner())),
                other => panic!("unexpected metric {other:?}"),
            }
        }
    }

    /// A counter's total (`name{k=v,...}`, labels sorted).
    pub fn counter(&self, key: &str) -> u64 {
        self.counters.get(key).copied().unwrap_or(0)
    }

    /// A gauge's value.
    pub fn gauge(&self, key: &str) -> f64 {
        self.gauges.get(key).copied().unwrap_or(0.0)
    }

    /// How many samples a histogram got.
    pub fn samples(&self, key: &str) -> usize {
        self.histograms.get(key).map_or(0, Vec::len)
    }
}
