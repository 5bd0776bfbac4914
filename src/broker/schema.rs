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
//! A publish to a topic without a schema pays a load of the slot's flag
//! and a branch (an `ArcSwap` load would cost two locked instructions, for
//! its debt slot). One that finds the flag raised goes out of line: it
//! loads the slot, holding the `ArcSwap` guard (no count: a debt that a
//! swap pays, see `wait_unused`), and uses that one load for the check,
//! the version it stamps on the record, and what to do with an invalid
//! one. A replacement that lands in between is seen by the next publish. So every record is checked by the schema in force when its
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
//! freed. The swap hands back the old schema as a [`Retired`], and the
//! broker waits on it only once it has let go of every lock the change
//! took (the slot's, the control plane's, `topics.lock`): a validator in
//! flight may itself change another topic's schema, which takes them.
//!
//! # A change made from inside a validator
//!
//! A validator may change another topic's schema (its own would be waiting
//! for itself: it must not). Such a change does not wait for the calls in
//! flight of the schema it replaces. Waiting could never end in two ways:
//! the call it waits for may be its own caller, a few frames up on this
//! thread (topic A's validator publishes to B, whose validator removes A's
//! schema), or a validator on another thread that is waiting for this one
//! (A's validator removes B's schema while B's removes A's). So a thread
//! marks itself for the length of every validator call (`InValidator`,
//! a thread-local depth, as a subscription handler's `InHandler` mark),
//! and a change made while the mark is set swaps the schema out and
//! returns: no publish starts a new call of the old validator, and the
//! calls in flight finish on their own. The old schema is an `Arc`, and
//! each call in flight holds a counted reference to it (the swap turns
//! every guard into one), so whichever lets go last, that call or the
//! change, drops the validator, with its user data (a C validator's
//! `user_free`). Nothing is freed while a call of it runs.
//!
//! # What a record carries
//!
//! A record appended to a topic with a schema carries the reserved
//! attribute [`SCHEMA_ATTRIBUTE`] (`rill.schema`), the version in decimal;
//! any such attribute the publisher set is dropped first, so it cannot claim
//! a version. Records appended before a schema was set carry none (version
//! 0) and are never re-validated, nor do those a process publishes while
//! another process's validator function is the topic's schema (see
//! "Several processes").
//!
//! # Durability
//!
//! A JSON schema of a durable topic is written beside its partitions (the
//! file [`SCHEMA_FILE`], replaced whole by a rename: see
//! `Store::write_topic_file`) when it is set, and read back when the data
//! directory opens. A validator function is code: it lives with the broker
//! handle only, and a durable topic that had one has no schema after a
//! restart. A change that leaves a topic without a JSON schema (a removal,
//! or a function set) writes its version to [`VERSION_FILE`] first, then
//! removes the schema file, so the numbers continue after a restart (a
//! crash in between leaves the old schema in force and the number taken).
//!
//! # Several processes
//!
//! On a data directory shared by processes (`Sharing::Processes`) a topic
//! has one schema for the directory, and each change is the directory's:
//!
//! * **Making a change.** The setter (`change_schema` in
//!   `control/topics.rs`) takes `topics.lock`, the `flock` under which
//!   every process reads and changes the topic list, and under it reads
//!   the last version the directory gave out (the schema file's, or the
//!   version file's, whichever is later), takes the next one, writes the
//!   files, swaps the schema into its own slot, and bumps the topic list's
//!   change counter and rings every doorbell (`Bell::topics_changed`, as a
//!   topic creation does; see "Topics other processes create or delete"
//!   in `doorbell.rs`). Two processes setting a schema at once take turns
//!   under the lock, so each version is given out once and every process
//!   agrees on the number a record carries.
//! * **Following one.** Every other broker's doorbell thread, seeing the
//!   counter move, rereads the topic list (`sync_topics`) and, still under
//!   `topics.lock`, [`Slot::follow`]s each topic it has: one read of its
//!   schema file and, with none there, of its version file (neither there,
//!   for most topics) and, only if what they say differs from what is in
//!   force, a compile and the same swap a local change makes. No polling:
//!   the ring wakes the doorbell (asleep armed or not), so a publish there
//!   is checked by the new schema from the moment its doorbell has looked,
//!   which a test waits for on `Broker::schema_version`. What "Replacing a schema while publishers
//!   run" says holds in each process: every record is checked by the old
//!   schema or the new one. A topic another process created is joined with
//!   the schema its files hold.
//! * **Functions.** A validator function is set as a change like any other
//!   (its version from the directory, the JSON schema it replaces removed
//!   from the files), but only the broker it was set through runs it: the
//!   other processes follow it by dropping their schema, and check nothing
//!   until the next change. They still report its version
//!   (`Broker::schema_version`, from the slot's `elsewhere`), the
//!   directory's, so a process waiting to know it has seen the change has
//!   a number to wait on, as for any other change (a topic that had no
//!   schema would otherwise read 0 before and after). Their records, which
//!   nothing checked, carry none (version 0). The version file says the
//!   change was a function, so `remove_schema` in another process still
//!   removes it (and the setter's doorbell then drops it). The setter's
//!   own slot keeps it while the directory's last change is its own (the
//!   version file holds its number). The function goes with its broker:
//!   another process still reports its version after that broker is
//!   closed, until the next change; the first opener of a directory no
//!   other broker has open (or an `Exclusive` one) rewrites the version
//!   file as a removal of that number (`Slot::restore`), so no process
//!   reports a function none runs once the directory is opened afresh.
//!
//! A change by another process does not wait for this one's publishes: the
//! follower's swap waits for the old schema's checks in flight, in its own
//! process, as a local change does.

use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::error::{Error, Result, panic_message};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{Backoff, Mutex};

/// The reserved attribute holding the version of the schema a record was
/// checked against (decimal); absent on records appended without a schema.
/// A publisher's own attribute of this name is dropped, on any topic (see
/// "What a record carries").
pub const SCHEMA_ATTRIBUTE: &str = "rill.schema";

/// The file, in a durable topic's directory, that holds its JSON schema.
pub(crate) const SCHEMA_FILE: &str = "schema";
/// First line of that file: this, the version, and the `OnInvalid` name.
const SCHEMA_FILE_MAGIC: &str = "rill-schema-1";
/// The file, beside [`SCHEMA_FILE`], that keeps the version of the last
/// change that left the topic without a JSON schema (a removal, or a
/// function set), so that no later schema takes that number again.
pub(crate) const VERSION_FILE: &str = "schema.version";
/// Its one line: this, the version, and what cleared the schema.
const VERSION_FILE_MAGIC: &str = "rill-schema-version-1";

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
    /// handle only: a durable topic does not keep it across a restart. It
    /// may publish and change any topic's schema, its own included; a
    /// change made from inside a validator call does not wait for the
    /// replaced validator's calls in flight (see
    /// [`Broker::remove_schema`](crate::Broker::remove_schema)).
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
            Check::Function(f) => {
                // A schema change the function makes must not wait for
                // this call: see "A change made from inside a validator".
                let _inside = InValidator::enter();
                match catch_unwind(AssertUnwindSafe(|| f(payload))) {
                    Ok(r) => r,
                    Err(p) => Err(format!("validator panicked: {}", panic_message(&*p))),
                }
            }
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
    /// Whether `current` holds a schema, for the common publish's branch:
    /// a plain load, where an `ArcSwap` load takes a debt slot with two
    /// locked instructions (its swap in and its payment on the guard's
    /// drop). Set after a schema is swapped in and cleared before the last
    /// one is swapped out (`install`), so a publish that reads it set finds
    /// the schema its writer stored, or a later one, or none (a removal in
    /// between, which `publish_slow` handles as a topic without one).
    set: AtomicBool,
    /// The version of the validator function another process set last
    /// and runs (see "Several processes": this broker checks nothing
    /// meanwhile, but reports its number); 0 if the directory has no such
    /// function in force. Read only while `current` is empty, and every
    /// change that empties `current` stores it first.
    elsewhere: AtomicU64,
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
        // Acquire pairs with `install`'s Release store, so the schema it
        // stored before setting the flag is what `load` then sees (or a
        // later one); x86 gives this with a plain load.
        self.set.load(Ordering::Acquire)
    }

    /// Puts `next` in force and hands back the schema it replaces, for the
    /// caller to wait on once it holds no lock ([`Retired::wait`]); the
    /// flag is raised after a schema arrives and lowered before the last
    /// one goes (see `set`), so between a set and a replacement it stays
    /// raised: no publish skips the check while a schema is in force.
    #[must_use = "the old schema is waited on with `Retired::wait`"]
    fn install(&self, next: Option<Current>) -> Retired {
        let old = match next {
            Some(c) => {
                let old = self.current.swap(Some(Arc::new(c)));
                // Release: a publish that reads the flag set sees the swap.
                self.set.store(true, Ordering::Release);
                old
            }
            None => {
                // Relaxed: no order is needed, as either reading is right
                // for a publish that runs during the removal: unset, it
                // appends unchecked, as one after the removal does; set,
                // it loads the old schema and checks by it, as one before
                // does, or finds `None` and appends unchecked.
                self.set.store(false, Ordering::Relaxed);
                self.current.swap(None)
            }
        };
        Retired(old)
    }

    /// The version in force: the schema's this broker checks by, else the
    /// function's that another process set last and runs, else 0.
    pub(crate) fn version(&self) -> u64 {
        // Relaxed: a change that empties `current` stores `elsewhere`
        // first, and the `ArcSwap` load that finds it empty synchronizes
        // with that change's swap, so this load sees the store.
        self.current.load().as_ref().map_or_else(|| self.elsewhere.load(Ordering::Relaxed), |c| c.version)
    }

    /// Empties the slot, noting `elsewhere` (the version of a function
    /// another process runs, or 0) before the swap, as `version` needs.
    fn clear(&self, elsewhere: u64) -> Retired {
        // Relaxed: published by the swap that follows (see `version`).
        self.elsewhere.store(elsewhere, Ordering::Relaxed);
        self.install(None)
    }

    /// Sets (or replaces) the schema; with `files` (a topic in a data
    /// directory), the compiled one is written there before it takes
    /// effect, and its version is one past the last the directory gave out
    /// as well as this slot (see "Several processes"). Returns its version
    /// and the schema it replaced, to wait on once no lock is held.
    pub(crate) fn set(
        &self,
        schema: Schema,
        on_invalid: OnInvalid,
        files: Option<&dyn Files>,
    ) -> Result<(u64, Retired)> {
        let mut last = self.last_version.lock();
        let version = (*last).max(stored_last(files)?) + 1;
        let current = compile(schema, on_invalid, version)?;
        if let Some(files) = files {
            match current.file_bytes() {
                Some(bytes) => files.write(SCHEMA_FILE, Some(&bytes))?,
                // A function is not stored: the version file keeps its
                // number, and the JSON schema it replaces goes.
                None => {
                    files.write(VERSION_FILE, Some(&version_file_bytes(version, CLEARED_BY_VALIDATOR)))?;
                    files.write(SCHEMA_FILE, None)?;
                }
            }
        }
        *last = version;
        Ok((version, self.install(Some(current))))
    }

    /// Removes the schema (the version still advances, so a later one does
    /// not reuse a number); with `files`, the removal is written there
    /// first. Nothing happens if there is none: none here, and, with
    /// `shared` (a directory shared by processes), none another process
    /// set (a JSON schema, or a function it runs). Returns the schema it
    /// removed, to wait on once no lock is held.
    pub(crate) fn remove(&self, files: Option<&dyn Files>, shared: bool) -> Result<Retired> {
        let mut last = self.last_version.lock();
        let elsewhere = match files {
            Some(files) if shared => stored_in_force(files)?,
            _ => false,
        };
        if self.current.load().is_none() && !elsewhere {
            return Ok(Retired(None));
        }
        let version = (*last).max(stored_last(files)?) + 1;
        if let Some(files) = files {
            files.write(VERSION_FILE, Some(&version_file_bytes(version, CLEARED_BY_REMOVAL)))?;
            files.write(SCHEMA_FILE, None)?;
        }
        *last = version;
        Ok(self.clear(0))
    }

    /// Brings the slot in line with what `files` hold, if they differ from
    /// what is in force here (see "Several processes"): the JSON schema
    /// stored there is compiled and swapped in; with none stored, the one
    /// in force goes unless it is the function this slot set last (the
    /// version file then holds its number), and the slot notes the number
    /// of a function another process set last (`version` reports it).
    /// Costs a read of the schema file and, with none there, one of the
    /// version file (for most topics, neither exists). The schema it
    /// replaced is handed back, to wait on once no lock is held (`None`:
    /// nothing changed).
    pub(crate) fn follow(&self, files: &dyn Files) -> Result<Option<Retired>> {
        let mut last = self.last_version.lock();
        if let Some(bytes) = files.read(SCHEMA_FILE)? {
            let (version, on_invalid, doc) = parse_schema_file(&bytes)?;
            if self.current.load().as_ref().is_some_and(|c| c.version == version) {
                return Ok(None);
            }
            let next = compile(Schema::Json(doc.to_owned()), on_invalid, version)?;
            *last = (*last).max(version);
            return Ok(Some(self.install(Some(next))));
        }
        // No JSON schema: none was ever set, or the last change removed it
        // or set a function (which only its setter runs).
        let (cleared, function) = match read_version_file(files)? {
            Some((version, why)) => (version, why == CLEARED_BY_VALIDATOR),
            None => (0, false),
        };
        *last = (*last).max(cleared);
        let elsewhere = if function { cleared } else { 0 };
        match self.current.load().as_ref() {
            // This slot's own function, still the directory's last change.
            Some(c) if function && c.version == cleared => return Ok(None),
            Some(_) => {}
            // Relaxed: only changes store it, under `last_version`, held here.
            None if self.elsewhere.load(Ordering::Relaxed) == elsewhere => return Ok(None),
            None => {}
        }
        Ok(Some(self.clear(elsewhere)))
    }

    /// Restores the schema a durable topic's files hold, when its data
    /// directory opens or another process's topic is joined: what
    /// [`Slot::follow`] reads, and the last version given out. `fresh`: no
    /// other broker has the directory open (an `Exclusive` open, or the
    /// first `Processes` opener), so a function the files say some process
    /// set last went with its broker: the version file is rewritten as a
    /// removal of the same number, and no process reports it any more.
    pub(crate) fn restore(&self, files: &dyn Files, fresh: bool) -> Result<()> {
        if fresh
            && let Some((version, why)) = read_version_file(files)?
            && why == CLEARED_BY_VALIDATOR
        {
            files.write(VERSION_FILE, Some(&version_file_bytes(version, CLEARED_BY_REMOVAL)))?;
        }
        // A slot being restored is new, with no schema a publish could
        // hold: the wait returns at once.
        if let Some(retired) = self.follow(files)? {
            retired.wait();
        }
        let cleared = read_cleared(files)?;
        let mut last = self.last_version.lock();
        *last = (*last).max(cleared);
        Ok(())
    }
}

/// A topic's schema files, in its directory in the data directory: each
/// read whole, and replaced whole (by a rename: a reader sees the old file
/// or the new one, never half of one) or removed (`None`).
pub(crate) trait Files {
    /// The file `name`'s bytes; `None` if there is no such file.
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>>;
    /// Replaces the file `name` with `bytes`, or removes it.
    fn write(&self, name: &str, bytes: Option<&[u8]>) -> Result<()>;
}

/// What the version file says cleared the JSON schema: a removal.
const CLEARED_BY_REMOVAL: &str = "removed";
/// What the version file says cleared the JSON schema: a function set in
/// one process (which only that process's broker runs).
const CLEARED_BY_VALIDATOR: &str = "validator";

fn version_file_bytes(version: u64, why: &str) -> Vec<u8> {
    format!("{VERSION_FILE_MAGIC} {version} {why}\n").into_bytes()
}

fn damaged(why: &str) -> Error {
    Error::InvalidArgument(format!("a topic's schema file is damaged: {why}"))
}

/// The schema file's version, `OnInvalid` and JSON document.
fn parse_schema_file(bytes: &[u8]) -> Result<(u64, OnInvalid, &str)> {
    let text = std::str::from_utf8(bytes).map_err(|_| damaged("not UTF-8"))?;
    let (head, doc) = text.split_once('\n').ok_or_else(|| damaged("no header line"))?;
    let mut words = head.split(' ');
    if words.next() != Some(SCHEMA_FILE_MAGIC) {
        return Err(damaged("unknown format"));
    }
    let version: u64 = words.next().and_then(|v| v.parse().ok()).ok_or_else(|| damaged("no version"))?;
    let on_invalid = match words.next() {
        Some("reject") => OnInvalid::Reject,
        Some("dead_letter") => OnInvalid::DeadLetter,
        _ => return Err(damaged("no on_invalid")),
    };
    Ok((version, on_invalid, doc))
}

/// The version file's version and what cleared the schema; `None` if there
/// is no such file (no change has left the topic without a JSON schema).
fn read_version_file(files: &dyn Files) -> Result<Option<(u64, String)>> {
    let Some(bytes) = files.read(VERSION_FILE)? else { return Ok(None) };
    let text = std::str::from_utf8(&bytes).map_err(|_| damaged("a version file not UTF-8"))?;
    let mut words = text.trim_end().split(' ');
    if words.next() != Some(VERSION_FILE_MAGIC) {
        return Err(damaged("a version file of unknown format"));
    }
    let version = words.next().and_then(|v| v.parse().ok()).ok_or_else(|| damaged("a version file's version"))?;
    Ok(Some((version, words.next().unwrap_or_default().to_owned())))
}

/// The version of the last change that left the topic without a JSON
/// schema; 0 if none did.
fn read_cleared(files: &dyn Files) -> Result<u64> {
    Ok(read_version_file(files)?.map_or(0, |(v, _)| v))
}

/// The last version the directory gave out for the topic: its JSON
/// schema's, or that of the change that left it none, whichever is later
/// (a crash between a removal's two writes leaves both). 0 without files.
fn stored_last(files: Option<&dyn Files>) -> Result<u64> {
    let Some(files) = files else { return Ok(0) };
    let json = match files.read(SCHEMA_FILE)? {
        Some(bytes) => parse_schema_file(&bytes)?.0,
        None => 0,
    };
    Ok(json.max(read_cleared(files)?))
}

/// Whether the directory holds a schema for the topic: a JSON schema, or
/// a function some process set last (which a removal anywhere clears).
fn stored_in_force(files: &dyn Files) -> Result<bool> {
    if files.read(SCHEMA_FILE)?.is_some() {
        return Ok(true);
    }
    Ok(read_version_file(files)?.is_some_and(|(_, why)| why == CLEARED_BY_VALIDATOR))
}

/// A schema just swapped out of its slot, which publishes may still be
/// checking payloads with. [`Retired::wait`] lets go of it.
#[must_use = "the old schema is waited on with `Retired::wait`"]
pub(crate) struct Retired(Option<Arc<Current>>);

impl Retired {
    /// Waits until no publish uses the old schema, then its validator is
    /// never called again (a C validator's `user` pointer may be freed once
    /// `rill_topic_set_validator` or `rill_topic_remove_schema` returns),
    /// except from inside a validator call: then it only lets go (see "A
    /// change made from inside a validator"), and the last call in flight
    /// drops the validator. The caller holds no lock: a validator in flight
    /// may be changing another topic's schema, which takes them.
    ///
    /// A publish holds the schema only while it checks payloads (it lets go
    /// before appending, which may wait for subscribers), so this waits for
    /// validator calls in flight, no longer. The swap paid the readers'
    /// `ArcSwap` debts (`arc_swap`'s `wait_for_readers` turns each guard of
    /// the old schema into a counted reference before the swap returns),
    /// so the strong count includes every publish that loaded it.
    pub(crate) fn wait(self) {
        let Some(old) = self.0 else { return };
        if InValidator::inside() {
            return;
        }
        let mut backoff = Backoff::new();
        while Arc::strong_count(&old) > 1 {
            backoff.snooze();
        }
    }
}

// The depth is set and restored around every validator call, so it is a
// `const` thread-local where it can be (a plain TLS access, as
// `InHandler`'s mark).
#[cfg(not(loom))]
crate::sync::thread::thread_local! {
    /// How many validator calls this thread is inside (one may publish,
    /// which calls another topic's).
    static IN_VALIDATOR: Cell<u32> = const { Cell::new(0) };
}
#[cfg(loom)]
crate::sync::thread::thread_local! {
    /// As above; loom's `thread_local!` does not accept `const { .. }`.
    #[allow(clippy::missing_const_for_thread_local)]
    static IN_VALIDATOR: Cell<u32> = Cell::new(0);
}

/// Marks this thread as inside a validator call until dropped.
struct InValidator;

impl InValidator {
    fn enter() -> InValidator {
        IN_VALIDATOR.with(|d| d.set(d.get() + 1));
        InValidator
    }

    /// Whether this thread is inside a validator call.
    fn inside() -> bool {
        IN_VALIDATOR.with(Cell::get) > 0
    }
}

impl Drop for InValidator {
    fn drop(&mut self) {
        IN_VALIDATOR.with(|d| d.set(d.get() - 1));
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
    use std::collections::HashMap;

    /// A topic directory's files, in memory.
    #[derive(Default)]
    struct MemFiles(Mutex<HashMap<String, Vec<u8>>>);

    impl Files for MemFiles {
        fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
            Ok(self.0.lock().get(name).cloned())
        }
        fn write(&self, name: &str, bytes: Option<&[u8]>) -> Result<()> {
            let mut files = self.0.lock();
            match bytes {
                Some(b) => files.insert(name.to_owned(), b.to_vec()),
                None => files.remove(name),
            };
            Ok(())
        }
    }

    #[test]
    fn a_json_schema_round_trips_through_its_file() {
        let files = MemFiles::default();
        let slot = Slot::default();
        let doc = r#"{"type":"object","required":["id"]}"#;
        slot.set(Schema::Json(doc.into()), OnInvalid::DeadLetter, Some(&files)).unwrap().1.wait();
        let back = Slot::default();
        back.restore(&files, true).unwrap();
        let held = back.load();
        let c = held.as_deref().unwrap();
        assert_eq!((c.version, c.on_invalid, c.document.as_deref()), (1, OnInvalid::DeadLetter, Some(doc)));
        assert!(c.check(br#"{"id":1}"#).is_ok());
        assert!(c.check(b"{}").unwrap_err().contains("required"));
        files.write(SCHEMA_FILE, Some(b"rill-schema-9 1 reject\n{}")).unwrap();
        assert!(Slot::default().restore(&files, true).is_err());
    }

    #[test]
    fn two_slots_on_one_directory_take_turns_with_versions_and_follow_each_other() {
        // Two processes' slots of one topic, on its one directory.
        let files = MemFiles::default();
        let (a, b) = (Slot::default(), Slot::default());
        assert_eq!(a.set(Schema::Json("true".into()), OnInvalid::Reject, Some(&files)).unwrap().0, 1);
        assert!(b.follow(&files).unwrap().is_some());
        assert_eq!(b.version(), 1);
        assert!(b.follow(&files).unwrap().is_none(), "nothing changed: nothing read but the file");
        // B's turn: the number comes from the directory, not from B's own count.
        assert_eq!(b.set(Schema::Json("false".into()), OnInvalid::Reject, Some(&files)).unwrap().0, 2);
        assert!(a.follow(&files).unwrap().is_some());
        assert!(a.load().as_deref().unwrap().check(b"1").is_err(), "A checks with B's schema");
        // A function set in A: B checks nothing any more, but reports the
        // function's number, the directory's; A keeps its own.
        let f: ValidatorFn = Arc::new(|p| if p.is_empty() { Err("empty".into()) } else { Ok(()) });
        assert_eq!(a.set(Schema::Validator(f), OnInvalid::Reject, Some(&files)).unwrap().0, 3);
        assert!(b.follow(&files).unwrap().is_some());
        assert!(b.load().is_none(), "B has no check of its own");
        assert_eq!(b.version(), 3);
        assert!(b.follow(&files).unwrap().is_none(), "nothing changed since");
        assert!(a.follow(&files).unwrap().is_none(), "A's own function stays");
        assert_eq!(a.version(), 3);
        // A slot joining now (another process opening) follows it the same way.
        let joined = Slot::default();
        joined.restore(&files, false).unwrap();
        assert_eq!((joined.load().is_none(), joined.version()), (true, 3));
        // B removes it (B checks nothing, but the directory says A has one).
        b.remove(Some(&files), true).unwrap().wait();
        assert_eq!(b.version(), 0);
        assert!(a.follow(&files).unwrap().is_some());
        assert_eq!(a.version(), 0);
        // Nothing to remove: nothing happens, the version does not move.
        a.remove(Some(&files), true).unwrap().wait();
        assert_eq!(a.set(Schema::Json("true".into()), OnInvalid::Reject, Some(&files)).unwrap().0, 5);
        // A slot opened afresh (a restart) continues the numbers.
        a.remove(Some(&files), true).unwrap().wait();
        let c = Slot::default();
        c.restore(&files, true).unwrap();
        assert_eq!(c.version(), 0);
        assert_eq!(c.set(Schema::Json("true".into()), OnInvalid::Reject, None).unwrap().0, 7);
    }

    #[test]
    fn a_function_set_in_another_process_is_reported_there_until_the_directory_opens_afresh() {
        let files = MemFiles::default();
        let (a, b) = (Slot::default(), Slot::default());
        // B follows a function set where it had no schema: the number moves.
        let f: ValidatorFn = Arc::new(|_| Ok(()));
        assert_eq!(a.set(Schema::Validator(f.clone()), OnInvalid::Reject, Some(&files)).unwrap().0, 1);
        assert!(b.follow(&files).unwrap().is_some());
        assert_eq!(b.version(), 1);
        // Replaced by a JSON schema in B, then by a function in B: A follows both.
        assert_eq!(b.set(Schema::Json("true".into()), OnInvalid::Reject, Some(&files)).unwrap().0, 2);
        assert!(a.follow(&files).unwrap().is_some());
        assert_eq!((a.version(), a.load().is_some()), (2, true));
        assert_eq!(b.set(Schema::Validator(f), OnInvalid::Reject, Some(&files)).unwrap().0, 3);
        assert!(a.follow(&files).unwrap().is_some());
        assert_eq!((a.version(), a.load().is_none()), (3, true));
        // Every process gone, the first opener finds the function gone too:
        // a removal of its number, which no later joiner reports either.
        let first = Slot::default();
        first.restore(&files, true).unwrap();
        assert_eq!(first.version(), 0);
        let joiner = Slot::default();
        joiner.restore(&files, false).unwrap();
        assert_eq!(joiner.version(), 0);
        assert_eq!(joiner.set(Schema::Json("true".into()), OnInvalid::Reject, Some(&files)).unwrap().0, 4);
    }
}
