//! `--schema-cost`: publishes per second to a topic with a JSON Schema
//! (issue 42's speed line: a 200-byte document with 5 fields), beside the
//! `jsonschema` crate's own validation rate in a plain loop, in interleaved
//! pairs.
//!
//! The plain loop is what a user of `jsonschema` writes to accept or refuse
//! payloads: parse each one into a `serde_json::Value` and ask
//! `Validator::is_valid` (the crate's yes-or-no call, which its docs name
//! the fast one; `validate` builds the first error). The broker does the
//! same for a valid payload and looks for the error only for an invalid
//! one, so the two loops validate alike and the ratio is the cost of the
//! publish around the check. Neither loop does work the other does not
//! need: the broker, topic and publisher are made before rill's clock
//! starts, and each loop reads the same document.
//!
//! Each loop's minor page faults (the publishing thread's, from
//! `getrusage(RUSAGE_THREAD)`) are printed beside its rate: a count that
//! does not depend on the machine's load. The topic is new in every pair,
//! so rill's loop is also the first fill of its log; faults there are the
//! first touch of the log's segments, which `log/prefault.rs` moves off
//! the publisher's path.

use std::time::Instant;

use rill::{Broker, BrokerConfig, OnInvalid, Publisher, Record, Schema, TopicOptions};

use crate::fresh::thread_faults;

/// The schema: five typed fields, all required.
pub const SCHEMA: &str = r#"{
    "type": "object",
    "required": ["id", "customer", "status", "amount", "note"],
    "properties": {
        "id": {"type": "integer", "minimum": 0},
        "customer": {"type": "string", "maxLength": 64},
        "status": {"enum": ["new", "paid", "shipped"]},
        "amount": {"type": "number"},
        "note": {"type": "string"}
    }
}"#;

/// Size of the document published.
pub const DOCUMENT_BYTES: usize = 200;

/// A valid document of exactly [`DOCUMENT_BYTES`] bytes (the note pads it).
pub fn document() -> Vec<u8> {
    let head = r#"{"id":1234567,"customer":"customer-000042","status":"paid","amount":1234.5,"note":""#;
    let pad = DOCUMENT_BYTES - head.len() - 2;
    format!("{head}{}\"}}", "n".repeat(pad)).into_bytes()
}

/// One pair: (rill publishes per second, plain validations per second).
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub rill_per_s: f64,
    pub plain_per_s: f64,
    /// Minor page faults of the publishing thread during rill's loop.
    pub rill_faults: u64,
    /// Minor page faults of the thread during the plain loop.
    pub plain_faults: u64,
}

/// `pairs` interleaved pairs of `messages` publishes and validations.
pub fn run(messages: u64, pairs: usize) -> Vec<Pair> {
    let doc = document();
    assert_eq!(doc.len(), DOCUMENT_BYTES);
    let value: serde_json::Value = serde_json::from_str(SCHEMA).expect("the schema is JSON");
    let validator = jsonschema::draft202012::new(&value).expect("the schema compiles");
    (0..pairs)
        .map(|_| {
            let broker = Broker::new(BrokerConfig::default()).expect("a broker");
            let options = TopicOptions { retention_bytes: Some(64 << 20), ..TopicOptions::default() };
            broker.create_topic("orders", &options).expect("a topic");
            broker.set_schema("orders", Schema::Json(SCHEMA.into()), OnInvalid::Reject).expect("the schema");
            let publisher = broker.publisher("orders").expect("a publisher");
            let record = Record::new(&doc);
            let faults = thread_faults();
            let start = Instant::now();
            rill_loop(&publisher, &record, messages);
            let rill_per_s = messages as f64 / start.elapsed().as_secs_f64();
            let rill_faults = thread_faults() - faults;
            let faults = thread_faults();
            let start = Instant::now();
            plain_loop(&validator, &doc, messages);
            let plain_per_s = messages as f64 / start.elapsed().as_secs_f64();
            let plain_faults = thread_faults() - faults;
            Pair { rill_per_s, plain_per_s, rill_faults, plain_faults }
        })
        .collect()
}

/// Rill's loop: `messages` publishes of a valid record. Out of line, as
/// the plain loop is, so that a profile gives each loop's cost as one
/// function's inclusive cost (`valgrind --tool=callgrind --cache-sim=yes
/// rill-bench --schema-cost --pairs 1 --messages 50000`, then
/// `callgrind_annotate --inclusive=yes`: `schema_cost::rill_loop` beside
/// `schema_cost::plain_loop`).
#[inline(never)]
fn rill_loop(publisher: &Publisher, record: &Record<'_>, messages: u64) {
    for _ in 0..messages {
        publisher.publish(record).expect("a valid document");
    }
}

/// The plain loop: parse each document and ask `is_valid`.
#[inline(never)]
fn plain_loop(validator: &jsonschema::Validator, doc: &[u8], messages: u64) {
    for _ in 0..messages {
        let v: serde_json::Value = serde_json::from_slice(std::hint::black_box(doc)).expect("JSON");
        assert!(validator.is_valid(&v));
    }
}

/// The pairs as a table, with the median ratio.
pub fn table(pairs: &[Pair]) -> String {
    let mut out = format!(
        "JSON Schema on a {DOCUMENT_BYTES}-byte document with 5 fields (faults: the loop thread's minor page faults)\n{:>6} {:>16} {:>20} {:>7} {:>12} {:>12}\n",
        "pair", "rill publish/s", "jsonschema alone/s", "ratio", "rill faults", "plain faults"
    );
    let mut ratios = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let ratio = p.rill_per_s / p.plain_per_s;
        ratios.push(ratio);
        out += &format!(
            "{:>6} {:>16.0} {:>20.0} {:>7.2} {:>12} {:>12}\n",
            i + 1,
            p.rill_per_s,
            p.plain_per_s,
            ratio,
            p.rill_faults,
            p.plain_faults
        );
    }
    ratios.sort_by(f64::total_cmp);
    if let Some(m) = ratios.get(ratios.len() / 2) {
        out += &format!("median ratio (rill / jsonschema alone): {m:.2}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_valid_and_200_bytes() {
        let rows = run(10, 1);
        assert_eq!(rows.len(), 1);
        assert!(rows[0].rill_per_s > 0.0 && rows[0].plain_per_s > 0.0);
    }
}
