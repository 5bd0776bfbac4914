//! The filter parser and evaluator on arbitrary text.
//!
//! Input: the filter on the first line; the lines after it are attributes
//! (`key=value`) of a record the filter is evaluated against. Checks: a parse
//! error is `InvalidFilter` at a position inside the text; a filter that parses
//! re-parses from its own text to the same filter; `NOT (f)` (when it parses)
//! says the opposite of `f`; evaluation never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rill::log::{Log, LogConfig, Record};
use rill::{Error, Filter};

fn log() -> &'static Log {
    static LOG: std::sync::OnceLock<Log> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let config =
            LogConfig { segment_bytes: Some(64 << 10), retention_bytes: Some(256 << 10), ..LogConfig::default() };
        Log::new(&config).expect("a valid log config")
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (filter_text, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let filter = match Filter::parse(filter_text) {
        Ok(f) => f,
        Err(Error::InvalidFilter { position, .. }) => {
            assert!(position <= filter_text.len(), "error position {position} past the end");
            return;
        }
        Err(e) => panic!("a bad filter must be InvalidFilter, got {e:?}"),
    };
    assert_eq!(filter.as_str(), filter_text);
    assert!(Filter::parse(filter.as_str()).expect("re-parses") == filter);

    let attributes: Vec<(&str, &str)> = rest.lines().take(16).map(|l| l.split_once('=').unwrap_or((l, ""))).collect();
    let record = Record::new(b"payload").with_attributes(&attributes);
    let Ok(offset) = log().append(&record) else { return };
    let Ok(mut cursor) = log().cursor_at(offset) else { return };
    let Ok(Some(view)) = cursor.read() else { return };
    let verdict = filter.matches(view.attributes());
    if let Ok(negated) = Filter::parse(&format!("NOT ({filter_text})")) {
        assert_eq!(negated.matches(view.attributes()), !verdict, "NOT ({filter_text})");
    }
});
