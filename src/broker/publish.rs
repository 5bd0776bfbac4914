//! Publishing, under the public calls of [`Broker`](super::Broker) and
//! [`Publisher`](super::Publisher): what a publish returns ([`Position`],
//! [`Published`]), and the paths off the common one, kept out of line so
//! the common publish pays a branch for each: a topic with a schema (the
//! check, the version stamped on the record, an invalid record refused or
//! dead-lettered), a record with an id on a topic with a dedupe window, and
//! batches (checked whole, then grouped by partition).

use super::control::BrokerInner;
use super::schema::{self, OnInvalid, SCHEMA_ATTRIBUTE};
use super::topic::{self, Topic, Wait};
use super::{dead_letter, names};
use crate::error::{Error, Result};
use crate::log::{Measured, Record};

/// Where a published message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// Partition index.
    pub partition: u32,
    /// Offset in that partition.
    pub offset: u64,
}

/// What a publish did: where the message is, and how it got there. Returned
/// by the `publish_outcome` calls
/// ([`Broker::publish_outcome`](super::Broker::publish_outcome),
/// [`Publisher::publish_outcome`](super::Publisher::publish_outcome) and the
/// batch ones); the plain publish calls return its `position` alone. More
/// outcomes may be added, so it cannot be built outside rill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Published {
    /// Where the message is. For a duplicate, the first record's position.
    pub position: Position,
    /// The record carried an id (`Record::with_id`) that the topic had
    /// appended within its `dedupe_window_ms`: nothing was appended.
    pub duplicate: bool,
    /// The payload did not fit the topic's schema, whose `OnInvalid` is
    /// `DeadLetter`: the record went to `$dlq/<topic>` (with the reason in
    /// `rill.dlq.reason`), and `position` is its position there.
    pub dead_lettered: bool,
}

impl Published {
    fn of((partition, offset, duplicate): topic::Outcome) -> Published {
        Published { position: Position { partition, offset }, duplicate, dead_lettered: false }
    }

    pub(super) fn appended(position: Position) -> Published {
        Published { position, duplicate: false, dead_lettered: false }
    }
}

/// A batch to `t`, checked by its schema if it has one.
pub(super) fn publish_batch_to(
    inner: &BrokerInner,
    t: &Topic,
    records: &[Record<'_>],
    wait: Wait,
) -> Result<Vec<Position>> {
    if let Some(held) = schema_in_force(t) {
        let done = publish_batch_checked(inner, t, held, records, wait).map_err(|e| t.batch_failed(e))?;
        return Ok(done.into_iter().map(|p| p.position).collect());
    }
    if records.iter().any(claims_a_version) {
        let attributes = unclaimed(records);
        return publish_batch_parts(t, &with_attributes(records, &attributes), wait).map_err(|e| t.batch_failed(e));
    }
    // A failure that raced a delete of the topic reports the delete.
    publish_batch_parts(t, records, wait).map_err(|e| t.batch_failed(e))
}

/// The schema `t` has in force, held, or `None` without one: the slot's
/// flag first, so that a topic without a schema, and a record with an id
/// on one, pay a load and not an `ArcSwap` guard (see `schema::Slot`).
#[inline]
fn schema_in_force(t: &Topic) -> Option<schema::Held> {
    if !t.schema.is_set() {
        return None;
    }
    // The flag raised and the slot empty is a removal in between: the
    // publish then goes as to a topic without a schema.
    let held = t.schema.load();
    held.is_some().then_some(held)
}

/// Whether a record sets [`SCHEMA_ATTRIBUTE`] itself, which only the
/// broker may (a record without attributes pays one branch).
#[inline]
fn claims_a_version(r: &Record<'_>) -> bool {
    !r.attributes.is_empty() && r.attributes.iter().any(|(k, _)| *k == SCHEMA_ATTRIBUTE)
}

/// Each record's attributes without [`SCHEMA_ATTRIBUTE`].
#[cold]
fn unclaimed<'a>(records: &[Record<'a>]) -> Vec<Vec<(&'a str, &'a str)>> {
    records.iter().map(|r| r.attributes.iter().filter(|(k, _)| *k != SCHEMA_ATTRIBUTE).copied().collect()).collect()
}

/// `records` with their attributes replaced by `attributes`.
fn with_attributes<'a>(records: &[Record<'a>], attributes: &'a [Vec<(&'a str, &'a str)>]) -> Vec<Record<'a>> {
    records.iter().zip(attributes).map(|(r, a)| Record { attributes: a, ..*r }).collect()
}

/// [`publish_batch_to`], with each record's [`Published`] outcome.
pub(super) fn publish_batch_outcome_to(
    inner: &BrokerInner,
    t: &Topic,
    records: &[Record<'_>],
    wait: Wait,
) -> Result<Vec<Published>> {
    if let Some(held) = schema_in_force(t) {
        return publish_batch_checked(inner, t, held, records, wait).map_err(|e| t.batch_failed(e));
    }
    if records.iter().any(claims_a_version) {
        let attributes = unclaimed(records);
        return publish_batch_outcome_unchecked(t, &with_attributes(records, &attributes), wait);
    }
    publish_batch_outcome_unchecked(t, records, wait)
}

fn publish_batch_outcome_unchecked(t: &Topic, records: &[Record<'_>], wait: Wait) -> Result<Vec<Published>> {
    // A failure that raced a delete of the topic reports the delete.
    let mut lens = Vec::new();
    let batch = measure(t, records, &mut lens).map_err(|e| t.batch_failed(e))?;
    if t.dedupe.is_some() && records.iter().any(claims_an_id) {
        return publish_identified_batch(t, records, wait).map_err(|e| t.batch_failed(e));
    }
    let positions = publish_measured(t, batch, wait).map_err(|e| t.batch_failed(e))?;
    Ok(positions.into_iter().map(Published::appended).collect())
}

/// One record that may carry an id, or to a topic that may have a schema:
/// out of line, so the common publish pays two branches for both. The
/// schema is loaded once and used for the check, the version the record
/// carries and what an invalid one does (see `schema.rs`).
#[cold]
#[inline(never)]
pub(super) fn publish_slow(inner: &BrokerInner, t: &Topic, record: &Record<'_>, wait: Wait) -> Result<Published> {
    let Some(held) = schema_in_force(t) else {
        if claims_a_version(record) {
            let attributes = unclaimed(std::slice::from_ref(record));
            return Ok(Published::of(t.publish_identified(&Record { attributes: &attributes[0], ..*record }, wait)?));
        }
        return Ok(Published::of(t.publish_identified(record, wait)?));
    };
    let s = held.as_deref().expect("schema_in_force holds one");
    // The schema is let go before the append, which may wait for room:
    // a replacement waits for the publishes using the old one (see
    // `schema.rs`), and must not wait for subscribers too.
    let (verdict, version, on_invalid) = (s.check(record.payload), s.version_text, s.on_invalid);
    drop(held);
    match verdict {
        Ok(()) => {
            // A record without attributes of its own, the common case,
            // carries the version from the stack, not from a `Vec`.
            let (one, many);
            let attributes: &[(&str, &str)] = if record.attributes.is_empty() {
                one = [(SCHEMA_ATTRIBUTE, version.as_str())];
                &one
            } else {
                many = stamped(record, version.as_str());
                &many
            };
            let stamped = Record { attributes, ..*record };
            Ok(Published::of(t.publish_identified(&stamped, wait)?))
        }
        Err(reason) => match on_invalid {
            OnInvalid::Reject => Err(Error::Schema(reason)),
            OnInvalid::DeadLetter => dead_letter_invalid(inner, t, record, &reason, wait),
        },
    }
}

/// A record's attributes with the schema's version as [`SCHEMA_ATTRIBUTE`]
/// (any the publisher set is dropped: a record cannot claim a version).
fn stamped<'a>(record: &Record<'a>, version: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&str, &str)> =
        record.attributes.iter().filter(|(k, _)| *k != SCHEMA_ATTRIBUTE).copied().collect();
    out.push((SCHEMA_ATTRIBUTE, version));
    out
}

/// Sends an invalid record to `$dlq/<topic>` (created if absent, as the
/// subscriptions' dead letters are).
fn dead_letter_invalid(
    inner: &BrokerInner,
    t: &Topic,
    record: &Record<'_>,
    reason: &str,
    wait: Wait,
) -> Result<Published> {
    let source_max = t.partitions[0].log.max_record_bytes();
    let dlq = inner.dead_letter_topic_or_create(&names::default_dead_letter_topic(&t.name), Some(source_max))?;
    let (partition, offset) = dead_letter::publish_invalid(&dlq, &t.name, record, reason, wait)?;
    Ok(Published { position: Position { partition, offset }, duplicate: false, dead_lettered: true })
}

/// A batch to a topic with a schema, checked whole by the one `held`
/// before anything is appended. Under `Reject` one invalid record refuses
/// the batch (the error names its index). Under `DeadLetter` the invalid
/// records go to `$dlq/<topic>` first, in input order, then the valid ones
/// are appended as one batch, in input order; the results are in input
/// order. A failure appending the valid ones leaves the dead letters
/// written.
#[cold]
#[inline(never)]
fn publish_batch_checked(
    inner: &BrokerInner,
    t: &Topic,
    held: schema::Held,
    records: &[Record<'_>],
    wait: Wait,
) -> Result<Vec<Published>> {
    let s = held.as_deref().expect("called with a schema");
    let verdicts: Vec<std::result::Result<(), String>> = records.iter().map(|r| s.check(r.payload)).collect();
    // Let go of the schema before appending, as `publish_slow` does.
    let (version, on_invalid) = (s.version_text, s.on_invalid);
    drop(held);
    if on_invalid == OnInvalid::Reject
        && let Some((i, Err(reason))) = verdicts.iter().enumerate().find(|(_, v)| v.is_err())
    {
        return Err(Error::Schema(format!("record {i} of the batch: {reason}")));
    }
    let attributes: Vec<Vec<(&str, &str)>> = records.iter().map(|r| stamped(r, version.as_str())).collect();
    let stamped = with_attributes(records, &attributes);
    let valid: Vec<Record<'_>> = stamped.iter().zip(&verdicts).filter(|(_, v)| v.is_ok()).map(|(r, _)| *r).collect();
    check_batch(t, &valid)?;
    let mut out = Vec::with_capacity(records.len());
    for (r, v) in records.iter().zip(&verdicts) {
        if let Err(reason) = v {
            out.push(Some(dead_letter_invalid(inner, t, r, reason, wait)?));
        } else {
            out.push(None);
        }
    }
    let mut appended = publish_batch_outcome_unchecked(t, &valid, wait)?.into_iter();
    Ok(out.into_iter().map(|p| p.or_else(|| appended.next()).expect("one result per valid record")).collect())
}

/// Checks every record of a batch, so an error publishes nothing.
fn check_batch(t: &Topic, records: &[Record<'_>]) -> Result<()> {
    measure(t, records, &mut Vec::new()).map(|_| ())
}

/// Measures every record of a batch against the topic's size limit (every
/// partition's log has the same), each length kept in `lens`, so an error
/// publishes nothing and the logs append the batch without measuring it
/// again (see `Measured`).
fn measure<'r, 'a>(t: &Topic, records: &'r [Record<'a>], lens: &'r mut Vec<usize>) -> Result<Measured<'r, 'a>> {
    t.partitions[0].log.measure(records, lens)
}

/// A checked batch on a topic with a dedupe window, some of whose records
/// carry ids: one record at a time, in input order, each through the window
/// (so an id repeated within the batch is appended once; in Processes
/// mode, in one turn of the topic's lock: see `Topic::publish_identified_batch`).
#[cold]
fn publish_identified_batch(t: &Topic, records: &[Record<'_>], wait: Wait) -> Result<Vec<Published>> {
    Ok(t.publish_identified_batch(records, wait)?.into_iter().map(Published::of).collect())
}

/// True if a record of a batch goes through the dedupe window: it carries
/// an id, or attributes whose id is malformed (the window's path reports
/// that). A batch whose records only have other attributes is appended in
/// one reservation, as one without attributes is; the single-record path
/// keeps the cheaper test (`Record::may_have_id`), since it goes out of
/// line once either way.
fn claims_an_id(record: &Record<'_>) -> bool {
    record.may_have_id() && !matches!(record.id(), Ok(None))
}

fn publish_batch_parts(t: &Topic, records: &[Record<'_>], wait: Wait) -> Result<Vec<Position>> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let mut lens = Vec::new();
    let batch = measure(t, records, &mut lens)?;
    if t.dedupe.is_some() && records.iter().any(claims_an_id) {
        return Ok(publish_identified_batch(t, records, wait)?.into_iter().map(|p| p.position).collect());
    }
    publish_measured(t, batch, wait)
}

/// Appends a measured batch, grouped by partition.
fn publish_measured(t: &Topic, batch: Measured<'_, '_>, wait: Wait) -> Result<Vec<Position>> {
    let records = batch.records();
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let mut offsets = Vec::with_capacity(records.len());
    if t.partitions.len() == 1 {
        let p = &t.partitions[0];
        p.publish_batch(batch, &mut offsets, wait)?;
        return Ok(offsets.into_iter().map(|offset| Position { partition: 0, offset }).collect());
    }
    // Group by partition, keeping input order within each group.
    let targets: Vec<u32> = records.iter().map(|r| t.route(r.key).index).collect();
    let mut positions = vec![Position { partition: 0, offset: 0 }; records.len()];
    let mut group: Vec<Record<'_>> = Vec::new();
    let mut group_lens: Vec<usize> = Vec::new();
    let mut indexes: Vec<usize> = Vec::new();
    for p in t.partitions.iter() {
        indexes.clear();
        indexes.extend((0..records.len()).filter(|&i| targets[i] == p.index));
        if indexes.is_empty() {
            continue;
        }
        let part = batch.select(|i| targets[i] == p.index, &mut group, &mut group_lens);
        p.publish_batch(part, &mut offsets, wait)?;
        for (&i, &offset) in indexes.iter().zip(&offsets) {
            positions[i] = Position { partition: p.index, offset };
        }
    }
    Ok(positions)
}
