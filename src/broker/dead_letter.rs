//! Dead letters: a message that failed too often, republished to a
//! dead-letter topic with its key, payload and attributes plus `rill.dlq.*`
//! attributes saying where it came from and why. Push subscriptions
//! (`subscription/settle.rs`) and pull consumers (`consumer.rs`) write the
//! same attributes; only the last one names the subscriber. A record whose
//! payload does not fit its topic's schema (`OnInvalid::DeadLetter`) is
//! written here by its publish ([`publish_invalid`]), with the reason and
//! the topic only, since it was never appended.

use super::schema::SCHEMA_ATTRIBUTE;
use super::topic::{Topic, Wait};
use crate::error::Result;
use crate::log::{ID_ATTRIBUTE, Record, RecordView};

/// A message given up on.
pub(crate) struct Failed<'a> {
    /// Where it was read.
    pub(crate) topic: &'a str,
    pub(crate) partition: u32,
    pub(crate) record: RecordView<'a>,
    /// How many times it was tried.
    pub(crate) attempts: u32,
    /// Why it was given up on (`rill.dlq.reason`).
    pub(crate) reason: &'a str,
    /// Who gave up on it: the attribute naming the subscriber
    /// (`rill.dlq.subscription`, `rill.dlq.group`) and its value.
    pub(crate) by: (&'static str, &'a str),
}

/// Publishes `failed` to `dlq`; returns its offset there.
pub(crate) fn publish(dlq: &Topic, failed: &Failed<'_>, wait: Wait) -> Result<u64> {
    let record = &failed.record;
    let (partition, offset, attempts) =
        (failed.partition.to_string(), record.offset().to_string(), failed.attempts.to_string());
    let mut attrs: Vec<(&str, &str)> = record.attributes().filter(|(k, _)| !k.starts_with("rill.dlq.")).collect();
    attrs.extend([
        ("rill.dlq.reason", failed.reason),
        ("rill.dlq.topic", failed.topic),
        ("rill.dlq.partition", partition.as_str()),
        ("rill.dlq.offset", offset.as_str()),
        ("rill.dlq.attempts", attempts.as_str()),
        failed.by,
    ]);
    let mut out = Record::new(record.payload()).with_attributes(&attrs);
    if let Some(k) = record.key() {
        out = out.with_key(k);
    }
    Ok(dlq.route(record.key()).publish(&out, wait)?)
}

/// Publishes `record`, refused by `topic`'s schema for `reason`, to `dlq`;
/// returns its partition and offset there. Any `rill.dlq.*` attribute and
/// the schema version the publisher set are dropped.
pub(crate) fn publish_invalid(
    dlq: &Topic,
    topic: &str,
    record: &Record<'_>,
    reason: &str,
    wait: Wait,
) -> Result<(u32, u64)> {
    let mut attrs: Vec<(&str, &str)> = record
        .attributes
        .iter()
        .filter(|(k, _)| !k.starts_with("rill.dlq.") && *k != SCHEMA_ATTRIBUTE)
        .copied()
        .collect();
    if let Some(id) = record.id {
        attrs.push((ID_ATTRIBUTE, id));
    }
    attrs.extend([("rill.dlq.reason", reason), ("rill.dlq.topic", topic)]);
    let out = Record { key: record.key, attributes: &attrs, payload: record.payload, id: None };
    let p = dlq.route(record.key);
    Ok((p.index, p.publish(&out, wait)?))
}
