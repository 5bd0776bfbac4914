//! Topic schemas: what a topic's payloads must look like, checked on
//! publish.
//!
//! A topic holds at most one schema at a time, in a [`Slot`]: a JSON Schema
//! (draft 2020-12, compiled once when it is set) or a validator function.
//! Each change (set, replace, remove) takes the next version number, under
//! the slot's mutex, and swaps the compiled schema in with one `ArcSwap`
//! store.
//!
//! # Replacing a schema while publishers run
//!
//! A publish to a topic without a schema pays an `ArcSwap` load (no
//! reference count is touched) and a branch. One that finds a schema takes
//! it out of line: it loads the slot again, holding the `ArcSwap` guard
//! (again no count: a debt that a swap pays, see `wait_unused`), and uses
//! that one load for the check, the version it stamps on the record, and
//! what to do with an invalid one. A replacement that lands in between is seen by the next
//! publish. So every record is checked by the schema in force when its
//! publish started (the old one or the new one) and carries that schema's
//! version; no record is appended unchecked while a schema is set, since
//! the slot is never empty between the old schema and the new one (the swap
//! replaces one with the other in a single store). A batch is checked
//! whole by one schema.
//!
//! A publish holds the schema it loaded (a guard) only while it checks:
//! it copies the version and `OnInvalid` out and lets go before appending.
//! A change waits, after its swap, until no publish holds the old schema
//! (`wait_unused`), so when `set_schema` or `remove_schema` returns the old
//! validator is never called again: a C validator's user data may then be
//! freed. A validator that changes its own topic's schema would wait for
//! itself: it must not.
//!
//! # What a record carries
//!
//! A record appended to a topic with a schema carries the reserved
//! attribute [`SCHEMA_ATTRIBUTE`] (`rill.schema`), the version in decimal;
//! any such attribute the publisher set is dropped first, so it cannot claim
//! a version. Records appended before a schema was set carry none (version
//! 0) and are never re-validated.
//!
//! # Durability
//!
//! A JSON schema of a durable topic is written beside its partitions (see
//! `Store::save_topic_file`) when it is set, and read back when the data
//! directory opens. A validator function is code: it lives with the broker
//! handle only, and a durable topic that had one has no schema after a
//! restart (its version number starts again from the file's, or from 0).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::error::{Error, Result, panic_message};
use crate::sync::{Backoff, Mutex};

/// The reserved attribute holding the version of the schema a record was
/// checked against (decimal); absent on records appended without a schema.
pub const SCHEMA_ATTRIBUTE: &str = "rill.schema";

/// The file, in a durable topic's directory, that holds its JSON schema.
pub(crate) const SCHEMA_FILE: &str = "schema";
/// First line of that file: this, the version, and the `OnInvalid` name.
const SCHEMA_FILE_MAGIC: &str = "rill-schema-1";

/// A validator function: `Ok` for a valid payload, `Err(reason)` otherwise.
pub type ValidatorFn = Arc<dyn Fn(&[u8]) -> std::result::Result<(), String> + Send + Sync>;

/// What a topic's payloads must be.
#[derive(Clone)]
pub enum Schema {
    /// A JSON Schema document (draft 2020-12). Payloads must be JSON that
    /// it accepts. Stored with a durable topic. No `$ref` is fetched from
    /// the network or the disk: a schema is self-contained.
    Json(String),
    /// A function for any other format. It may be called on any publishing
    /// thread, at once on several; a panic in it makes the payload invalid
    /// (reason `validator panicked: <message>`). It lives with the broker
    /// handle only: a durable topic does not keep it across a restart.
    Validator(ValidatorFn),
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schema::Json(doc) => f.debug_tuple("Json").field(doc).finish(),
            Schema::Validator(_) => f.write_str("Validator(..)"),
        }
    }
}

/// What a publish of an invalid payload does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnInvalid {
    /// The publish fails with [`Error::Schema`]; nothing is appended.
    #[default]
    Reject,
    /// The record goes to the topic's dead-letter topic `$dlq/<topic>`,
    /// with the reason in `rill.dlq.reason`; the publish returns its
    /// position there, flagged `Published::dead_lettered`.
    DeadLetter,
}

impl OnInvalid {
    fn name(self) -> &'static str {
        match self {
            OnInvalid::Reject => "reject",
            OnInvalid::DeadLetter => "dead_letter",
        }
    }
}

/// How a schema checks a payload.
enum Check {
    Json(Box<jsonschema::Validator>),
    Function(ValidatorFn),
}

/// A schema in force: what was set, compiled, with its version.
pub(crate) struct Current {
    pub(crate) version: u64,
    /// The version in decimal, as records carry it.
    pub(crate) version_text: VersionText,
    pub(crate) on_invalid: OnInvalid,
    /// The JSON document, for a durable topic's file; `None` for a function.
    pub(crate) document: Option<String>,
    check: Check,
}

impl Current {
    /// Checks `payload`: `Err` holds the reason it is invalid.
    pub(crate) fn check(&self, payload: &[u8]) -> std::result::Result<(), String> {
        match &self.check {
            Check::Json(v) => check_json(v, payload),
            Check::Function(f) => match catch_unwind(AssertUnwindSafe(|| f(payload))) {
                Ok(r) => r,
                Err(p) => Err(format!("validator panicked: {}", panic_message(&*p))),
            },
        }
    }

    /// What a durable topic's schema file holds; `None` for a function.
    pub(crate) fn file_bytes(&self) -> Option<Vec<u8>> {
        let doc = self.document.as_ref()?;
        Some(format!("{SCHEMA_FILE_MAGIC} {} {}\n{doc}", self.version, self.on_invalid.name()).into_bytes())
    }
}

fn check_json(v: &jsonschema::Validator, payload: &[u8]) -> std::result::Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| format!("the payload is not JSON: {e}"))?;
    // `is_valid` is jsonschema's yes-or-no path: it builds no error and
    // tracks no location. A valid payload, the common case, pays only it;
    // an invalid one is validated again to say where and why
    // (`rill-bench --schema-cost` measures the valid case).
    if v.is_valid(&value) {
        return Ok(());
    }
    match v.validate(&value) {
        Err(e) => {
            let path = e.instance_path().to_string();
            let at = if path.is_empty() { "/".to_owned() } else { path };
            Err(format!("at {at:?}: {} (keyword {:?})", e, e.kind().keyword()))
        }
        // The two agree; should they not, the payload stays refused.
        Ok(()) => Err("the payload does not match the schema".to_owned()),
    }
}

fn compile(schema: Schema, on_invalid: OnInvalid, version: u64) -> Result<Current> {
    let (check, document) = match schema {
        Schema::Json(doc) => {
            let value: serde_json::Value = serde_json::from_str(&doc)
                .map_err(|e| Error::InvalidArgument(format!("the JSON schema is not JSON: {e}")))?;
            let v = jsonschema::draft202012::new(&value)
                .map_err(|e| Error::InvalidArgument(format!("the JSON schema does not compile: {e}")))?;
            (Check::Json(Box::new(v)), Some(doc))
        }
        Schema::Validator(f) => (Check::Function(f), None),
    };
    Ok(Current { version, version_text: VersionText::new(version), on_invalid, document, check })
}

/// A schema's version in decimal, as records carry it, held inline: a
/// publish copies it out before it lets the schema go (see
/// `publish_slow`), and a copy of this costs no allocation.
#[derive(Clone, Copy)]
pub(crate) struct VersionText {
    /// The digits, from the start; `u64::MAX` has 20.
    digits: [u8; 20],
    len: u8,
}

impl VersionText {
    fn new(version: u64) -> VersionText {
        let text = version.to_string();
        let mut digits = [0; 20];
        digits[..text.len()].copy_from_slice(text.as_bytes());
        VersionText { digits, len: text.len() as u8 }
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.digits[..usize::from(self.len)]).expect("decimal digits are ASCII")
    }
}

/// A publish's hold on the schema in force (or on none); see [`Slot::load`].
pub(crate) type Held = arc_swap::Guard<Option<Arc<Current>>>;

/// A topic's schema: the one in force and the last version given out.
#[derive(Default)]
pub(crate) struct Slot {
    current: ArcSwapOption<Current>,
    /// The last version given out (0: none yet). Changes take it in turn.
    last_version: Mutex<u64>,
}

impl Slot {
    /// The schema in force, if any, held until the guard is dropped: an
    /// `ArcSwap` load, which counts no reference (a publish per check would
    /// otherwise pay two atomic read-modify-writes on the schema's count,
    /// shared by every publisher of the topic), yet a change still waits
    /// for it to go: its swap turns the guards of the old schema into
    /// counted references (see `wait_unused`).
    #[inline(always)]
    pub(crate) fn load(&self) -> Held {
        self.current.load()
    }

    /// Whether a schema is set: the branch a publish pays without one.
    #[inline(always)]
    pub(crate) fn is_set(&self) -> bool {
        self.current.load().is_some()
    }

    /// The version in force: 0 without a schema.
    pub(crate) fn version(&self) -> u64 {
        self.current.load().as_ref().map_or(0, |c| c.version)
    }

    /// Sets (or replaces) the schema; `save` persists the compiled one
    /// before it takes effect. Returns its version.
    pub(crate) fn set(
        &self,
        schema: Schema,
        on_invalid: OnInvalid,
        save: impl FnOnce(&Current) -> Result<()>,
    ) -> Result<u64> {
        let mut last = self.last_version.lock();
        let current = compile(schema, on_invalid, *last + 1)?;
        save(&current)?;
        *last += 1;
        let old = self.current.swap(Some(Arc::new(current)));
        wait_unused(old);
        Ok(*last)
    }

    /// Removes the schema (the version still advances, so a later one does
    /// not reuse a number); `save` persists the removal first.
    pub(crate) fn remove(&self, save: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut last = self.last_version.lock();
        if self.current.load().is_none() {
            return Ok(());
        }
        save()?;
        *last += 1;
        let old = self.current.swap(None);
        wait_unused(old);
        Ok(())
    }

    /// Restores a schema read from a durable topic's file.
    pub(crate) fn restore(&self, bytes: &[u8]) -> Result<()> {
        let bad = |why: &str| Error::InvalidArgument(format!("a topic's schema file is damaged: {why}"));
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let (head, doc) = text.split_once('\n').ok_or_else(|| bad("no header line"))?;
        let mut words = head.split(' ');
        if words.next() != Some(SCHEMA_FILE_MAGIC) {
            return Err(bad("unknown format"));
        }
        let version: u64 = words.next().and_then(|v| v.parse().ok()).ok_or_else(|| bad("no version"))?;
        let on_invalid = match words.next() {
            Some("reject") => OnInvalid::Reject,
            Some("dead_letter") => OnInvalid::DeadLetter,
            _ => return Err(bad("no on_invalid")),
        };
        let mut last = self.last_version.lock();
        let current = compile(Schema::Json(doc.to_owned()), on_invalid, version)?;
        *last = version;
        self.current.store(Some(Arc::new(current)));
        Ok(())
    }
}

/// Waits until no publish uses `old`, a schema just swapped out: then its
/// validator is never called again (a C validator's `user` pointer may be
/// freed once `rill_topic_set_validator` or `rill_topic_remove_schema`
/// returns). A publish holds the schema only while it checks payloads
/// (it lets go before appending, which may wait for subscribers), so this
/// waits for validator calls in flight, no longer. The swap pays the
/// readers' `ArcSwap` debts (`arc_swap`'s `wait_for_readers` turns each
/// guard of `old` into a counted reference before the swap returns), so
/// the strong count includes every publish that loaded `old`.
fn wait_unused(old: Option<Arc<Current>>) {
    let Some(old) = old else { return };
    let mut backoff = Backoff::new();
    while Arc::strong_count(&old) > 1 {
        backoff.snooze();
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot").field("version", &self.version()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_schema_round_trips_through_its_file() {
        let slot = Slot::default();
        let doc = r#"{"type":"object","required":["id"]}"#;
        slot.set(Schema::Json(doc.into()), OnInvalid::DeadLetter, |_| Ok(())).unwrap();
        let bytes = slot.load().as_deref().unwrap().file_bytes().unwrap();
        let back = Slot::default();
        back.restore(&bytes).unwrap();
        let held = back.load();
        let c = held.as_deref().unwrap();
        assert_eq!((c.version, c.on_invalid, c.document.as_deref()), (1, OnInvalid::DeadLetter, Some(doc)));
        assert!(c.check(br#"{"id":1}"#).is_ok());
        assert!(c.check(b"{}").unwrap_err().contains("required"));
        assert!(back.restore(b"rill-schema-9 1 reject\n{}").is_err());
    }
}
