//! Dead letters: a message that failed too often, republished to a
//! dead-letter topic with its key, payload and attributes plus `rill.dlq.*`
//! attributes saying where it came from and why. Push subscriptions
//! (`subscription/settle.rs`) and pull consumers (`consumer.rs`) write the
//! same attributes; only the last one names the subscriber. A record whose
//! payload does not fit its topic's schema (`OnInvalid::DeadLetter`) is
//! written here by its publish ([`publish_invalid`]), with the reason and
//! the topic only, since it was never appended.
//!
//! # Room
//!
//! A dead letter is its message plus attributes, so it is larger: a message
//! at its topic's size limit would not fit a dead-letter topic of the same
//! limit, and was refused there (`MessageTooLarge` to a schema's publisher,
//! a dropped message for a subscription). So the `rill.dlq.*` attributes
//! are bounded ([`MAX_REASON_BYTES`] of reason, and names and numbers that
//! are bounded already), and a dead-letter topic the broker creates itself
//! (`$dlq/<name>`, or one named in the options that does not exist yet)
//! takes messages [`DEAD_LETTER_ROOM`] bytes larger than its source's
//! limit ([`topic_options`]). A dead-letter topic the user created keeps
//! the limits the user gave it.

use super::schema::SCHEMA_ATTRIBUTE;
use super::topic::{Topic, TopicOptions, Wait};
use crate::error::Result;
use crate::log::{DEFAULT_MAX_RECORD_BYTES, DEFAULT_SEGMENT_BYTES, ID_ATTRIBUTE, Record, RecordView};

/// Longest `rill.dlq.reason` written, in bytes: a longer reason (a
/// handler's error text, a validator's) is cut at a character boundary.
pub(crate) const MAX_REASON_BYTES: usize = 1024;

/// How much larger than its source's messages a dead-letter topic the
/// broker creates takes them: room for every `rill.dlq.*` attribute at its
/// longest (the unit test `the_attributes_fit_the_room` checks it).
pub(crate) const DEAD_LETTER_ROOM: usize = 4096;

/// `reason` cut to [`MAX_REASON_BYTES`] at a character boundary.
fn bounded(reason: &str) -> &str {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// The options of a dead-letter topic the broker creates for messages of
/// topics whose limit is `source_max` bytes (`None`: unknown, the default
/// limit): `default` (the broker's topic defaults) taking messages
/// [`DEAD_LETTER_ROOM`] bytes larger, with segments (and a size retention)
/// large enough to hold one. `default` itself if that is no valid topic.
pub(crate) fn topic_options(default: &TopicOptions, source_max: Option<usize>) -> TopicOptions {
    let base = source_max.unwrap_or(0).max(default.max_message_bytes.unwrap_or(DEFAULT_MAX_RECORD_BYTES));
    let max = base.saturating_add(DEAD_LETTER_ROOM);
    // The segment size is left as it is unless a message would not fit.
    let segment_bytes = match default.segment_bytes {
        Some(s) => Some(s.max(max)),
        None if max > DEFAULT_SEGMENT_BYTES => Some(max),
        None => None,
    };
    // A size retention of two segments at least, if the segment grew.
    let retention_bytes = match segment_bytes {
        Some(segment) => default.retention_bytes.map(|r| r.max(2 * segment as u64)),
        None => default.retention_bytes,
    };
    let options = TopicOptions { max_message_bytes: Some(max), segment_bytes, retention_bytes, ..default.clone() };
    if options.validate().is_ok() { options } else { default.clone() }
}

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
        ("rill.dlq.reason", bounded(failed.reason)),
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
    attrs.extend([("rill.dlq.reason", bounded(reason)), ("rill.dlq.topic", topic)]);
    let out = Record { key: record.key, attributes: &attrs, payload: record.payload, id: None };
    let p = dlq.route(record.key);
    Ok((p.index, p.publish(&out, wait)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `rill.dlq.*` attribute at its longest adds at most
    /// [`DEAD_LETTER_ROOM`] bytes to a message's encoding.
    #[test]
    fn the_attributes_fit_the_room() {
        let name = "n".repeat(crate::broker::names::MAX_NAME_LEN);
        let reason = "é".repeat(MAX_REASON_BYTES);
        let (partition, offset, attempts) = (u32::MAX.to_string(), u64::MAX.to_string(), u32::MAX.to_string());
        let attrs = [
            ("rill.dlq.reason", bounded(&reason)),
            ("rill.dlq.topic", name.as_str()),
            ("rill.dlq.partition", partition.as_str()),
            ("rill.dlq.offset", offset.as_str()),
            ("rill.dlq.attempts", attempts.as_str()),
            ("rill.dlq.subscription", name.as_str()),
        ];
        assert!(bounded(&reason).len() <= MAX_REASON_BYTES && bounded(&reason).len() > MAX_REASON_BYTES - 2);
        let payload = vec![7u8; 1000];
        let bare = Record::new(&payload).with_key(b"k").encoded_len().unwrap();
        let lettered = Record::new(&payload).with_key(b"k").with_attributes(&attrs).encoded_len().unwrap();
        assert!(lettered - bare <= DEAD_LETTER_ROOM, "{} bytes added", lettered - bare);
    }

    #[test]
    fn a_dead_letter_topic_takes_its_sources_largest_message_and_the_room() {
        let default = TopicOptions::default();
        let o = topic_options(&default, None);
        assert_eq!(o.max_message_bytes, Some(DEFAULT_MAX_RECORD_BYTES + DEAD_LETTER_ROOM));
        assert_eq!(o.segment_bytes, None);
        // A source of larger messages: segments that hold one.
        let o = topic_options(&default, Some(8 << 20));
        assert_eq!(o.max_message_bytes, Some((8 << 20) + DEAD_LETTER_ROOM));
        assert!(o.segment_bytes.is_some_and(|s| s >= (8 << 20) + DEAD_LETTER_ROOM));
        assert!(o.validate().is_ok());
        // Defaults with which it cannot be done: the defaults.
        let tiny = TopicOptions { retention_bytes: Some(1 << 20), ..TopicOptions::default() };
        assert_eq!(topic_options(&tiny, None), tiny);
    }
}
