//! Record encoding and decoding (src/log/record.rs) through the log: records
//! built from the fuzzer's bytes are appended, alone or as a batch, and read
//! back field by field.
//!
//! Checks: a record the log accepts reads back with the same key (none vs
//! empty kept apart), attributes in order, attribute lookups (the first pair
//! with a key wins), payload and a timestamp; a record it refuses appends
//! nothing.
#![no_main]

use libfuzzer_sys::arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use rill::log::{Log, LogConfig, Record};

#[derive(Debug)]
struct Input {
    key: Option<Vec<u8>>,
    attributes: Vec<(String, String)>,
    payload: Vec<u8>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let key = if u.arbitrary()? { Some(u.arbitrary()?) } else { None };
        let n = u.int_in_range(0..=8)?;
        let mut attributes = Vec::with_capacity(n);
        for _ in 0..n {
            attributes.push((u.arbitrary()?, u.arbitrary()?));
        }
        Ok(Input { key, attributes, payload: u.arbitrary()? })
    }
}

fn log() -> &'static Log {
    static LOG: std::sync::OnceLock<Log> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let config = LogConfig {
            segment_bytes: Some(16 << 10),
            retention_bytes: Some(64 << 10),
            max_record_bytes: Some(4 << 10),
            ..LogConfig::default()
        };
        Log::new(&config).expect("a valid log config")
    })
}

fn check(input: &Input, offset: u64) {
    let mut cursor = log().cursor_at(offset).expect("just appended, so retained");
    let view = cursor.read().expect("no lag").expect("committed");
    assert_eq!(view.offset(), offset);
    assert_eq!(view.key(), input.key.as_deref());
    assert_eq!(view.payload(), &input.payload[..]);
    assert!(view.timestamp_ns() > 0);
    let attrs: Vec<(&str, &str)> = view.attributes().collect();
    let want: Vec<(&str, &str)> = input.attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(attrs, want);
    for (k, _) in &input.attributes {
        let first = input.attributes.iter().find(|(k2, _)| k2 == k).map(|(_, v)| v.as_str());
        assert_eq!(view.attribute(k), first);
    }
}

fuzz_target!(|inputs: Vec<Input>| {
    let inputs = &inputs[..inputs.len().min(8)];
    let owned: Vec<Vec<(&str, &str)>> =
        inputs.iter().map(|i| i.attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()).collect();
    let records: Vec<Record<'_>> = inputs
        .iter()
        .zip(&owned)
        .map(|(i, attrs)| {
            let r = Record::new(&i.payload).with_attributes(attrs);
            match &i.key {
                Some(k) => r.with_key(k),
                None => r,
            }
        })
        .collect();
    for (input, record) in inputs.iter().zip(&records) {
        let before = log().end_offset();
        match log().append(record) {
            Ok(offset) => check(input, offset),
            Err(_) => assert_eq!(log().end_offset(), before, "a refused record appends nothing"),
        }
    }
    let mut offsets = Vec::new();
    let before = log().end_offset();
    match log().append_batch(&records, &mut offsets) {
        Ok(()) => {
            assert_eq!(offsets.len(), records.len());
            for (input, &offset) in inputs.iter().zip(&offsets) {
                check(input, offset);
            }
        }
        Err(_) => assert_eq!(log().end_offset(), before, "a refused batch appends nothing"),
    }
});
