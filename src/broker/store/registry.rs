//! The subscriptions and pull consumers of every broker on a data
//! directory shared by processes (issue 39), with their counters: for
//! `Broker::directory_subscriptions` and `Broker::directory_consumers`.
//!
//! # The files
//!
//! Each broker opened with `Sharing::Processes` keeps, under
//! `subscribers/`, files named by a stem of its own (`<pid>-<nonce>`):
//!
//! ```text
//! subscribers/<stem>.lock     flock(LOCK_EX) held by the broker for its life
//! subscribers/<stem>.list     its live subscriptions (id, slot, name,
//!                             pattern, kind) and pull consumers (id,
//!                             slot, group, topic), rewritten whole
//! subscribers/<stem>.<c>      chunk c of its counter slots (64 slots of
//!                             16 words), mapped shared by the broker
//! ```
//!
//! # Who writes what
//!
//! Only the owning broker writes its files. When its set of subscriptions
//! changes (a subscribe, a close), it rewrites `.list` whole under its
//! registry mutex: a temporary file renamed over the old one, so a reader
//! reads either the old list or the new one, never a mix, and never a torn
//! string (names and patterns are only ever in `.list`). The counters are
//! in place: a subscription's slot is written by its drainer at the end of
//! each drain round (the `on_round_end` hook), with one plain (`Relaxed`)
//! store per word into the mapping: no system call and no lock, once per
//! round, not per message. A pull consumer's slot is written the same way
//! by the thread that polls it (a `Consumer` is used by one thread at a
//! time), at the end of each `poll` and once when it joins: once per poll,
//! however many messages the poll returns. Each word is a counter on its
//! own, read as a snapshot like `Subscription::stats`, so a reader needs no
//! more than each word's atomicity.
//!
//! A consumer's line in `.list` starts with `c`, and has five fields where
//! a subscription's has seven: a reader that knows only subscriptions skips
//! it as a bad line, so the list's version stays 1.
//!
//! # No slot is reused
//!
//! A slot is given to one subscription for good: its first word is the
//! subscription's id, stored before its `.list` names it, and a slot index
//! is never handed out twice by a broker. A reader that read an old
//! `.list` therefore reads, in the slot it names, that subscription's
//! counters or a later snapshot of them, never another subscription's: no
//! sequence word, no protocol between writer and reader beyond one
//! word's atomicity. A chunk whose 64 slots were all handed out and whose
//! subscriptions are all gone is removed (a reader that has it mapped
//! still reads it), so the files hold what live subscriptions need, plus
//! at most one chunk partly used.
//!
//! # Dead brokers
//!
//! A reader learns which broker is alive, and its pid, from the kernel's
//! lock list (`/proc/locks`, see `holders.rs`), without taking anything. A
//! `.lock` nobody holds is a dead (or closed) broker's: the reader tries
//! its lock, and if it gets it, removes the broker's files. A broker makes
//! its `.lock` under a temporary name, locks it and only then renames it in
//! place, so a reader never takes the lock of a broker being born.
//!
//! Under loom this is built but never run: `Sharing::Processes` is not
//! modelled there.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};

use super::atomic_file::replace;
use super::holders::LockTable;
use super::lock::{LockFile, Locked, flock};
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, Mutex};

/// The folder of the registries, under the data directory.
pub(crate) const REGISTRY_DIR: &str = "subscribers";
/// Words per slot: the id, then `Counts` (room left to grow).
const SLOT_WORDS: usize = 16;
const SLOT_BYTES: usize = SLOT_WORDS * 8;
/// Slots per chunk file.
const CHUNK_SLOTS: u64 = 64;
const CHUNK_BYTES: usize = CHUNK_SLOTS as usize * SLOT_BYTES;

/// The counts a slot holds, after its id word, in this order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) delivered: u64,
    pub(crate) acked: u64,
    pub(crate) filtered: u64,
    pub(crate) retried: u64,
    pub(crate) dead_lettered: u64,
    pub(crate) dropped: u64,
    pub(crate) missed: u64,
    pub(crate) ack_timeouts: u64,
    /// Total lag over its partitions, at the end of its last round.
    pub(crate) lag: u64,
    /// Its state at the end of its last round (0 idle, 1 active, 2
    /// backoff, 3 closed).
    pub(crate) state: u64,
}

const COUNT_WORDS: usize = 10;

impl Counts {
    fn words(&self) -> [u64; COUNT_WORDS] {
        [
            self.delivered,
            self.acked,
            self.filtered,
            self.retried,
            self.dead_lettered,
            self.dropped,
            self.missed,
            self.ack_timeouts,
            self.lag,
            self.state,
        ]
    }

    fn from_words(w: [u64; COUNT_WORDS]) -> Self {
        let [delivered, acked, filtered, retried, dead_lettered, dropped, missed, ack_timeouts, lag, state] = w;
        Self { delivered, acked, filtered, retried, dead_lettered, dropped, missed, ack_timeouts, lag, state }
    }
}

/// The counts a pull consumer's slot holds, after its id word, in this
/// order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ConsumerCounts {
    /// Messages its polls returned.
    pub(crate) delivered: u64,
    /// Messages retention trimmed before it polled them.
    pub(crate) missed: u64,
    /// What the partitions it owned held past its position in them, at the
    /// end of its last poll.
    pub(crate) lag: u64,
}

const CONSUMER_WORDS: usize = 3;

impl ConsumerCounts {
    fn words(&self) -> [u64; CONSUMER_WORDS] {
        [self.delivered, self.missed, self.lag]
    }

    fn from_words(w: [u64; CONSUMER_WORDS]) -> Self {
        let [delivered, missed, lag] = w;
        Self { delivered, missed, lag }
    }
}

/// What `.list` says of a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubDesc {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) pattern: String,
    pub(crate) durable: bool,
    pub(crate) shared: bool,
    pub(crate) priority: u8,
    pub(crate) dead_letter_topic: Option<String>,
}

/// What `.list` says of a pull consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConsumerDesc {
    /// Its id, unique in its process (a group member's id).
    pub(crate) id: u64,
    pub(crate) group: String,
    pub(crate) topic: String,
}

/// What a `.list` line names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Desc {
    Sub(SubDesc),
    Consumer(ConsumerDesc),
}

impl Desc {
    fn id(&self) -> u64 {
        match self {
            Desc::Sub(d) => d.id,
            Desc::Consumer(d) => d.id,
        }
    }
}

/// Another broker's pull consumer, as its files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedConsumer {
    pub(crate) pid: u32,
    pub(crate) desc: ConsumerDesc,
    pub(crate) counts: ConsumerCounts,
}

/// What the other brokers' files list.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Sorted by (pid, name).
    pub(crate) subs: Vec<ListedSub>,
    /// Sorted by (pid, id).
    pub(crate) consumers: Vec<ListedConsumer>,
}

/// Another broker's subscription, as its files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedSub {
    pub(crate) pid: u32,
    pub(crate) desc: SubDesc,
    pub(crate) counts: Counts,
}

fn hex(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

/// `.list`'s text: a line per subscription, `slot id flags priority name
/// pattern dead-letter-topic`, strings in hex (`-`: none), flags bit 0
/// durable, bit 1 shared; and a line per pull consumer, `c slot id group
/// topic`.
fn encode(listed: &BTreeMap<u64, Desc>) -> String {
    let mut text = String::from("rill-subscribers 1\n");
    for (slot, d) in listed {
        match d {
            Desc::Sub(d) => {
                let flags = u8::from(d.durable) | (u8::from(d.shared) << 1);
                let dlt = d.dead_letter_topic.as_deref().map_or_else(|| "-".to_owned(), hex);
                let (name, pattern) = (hex(&d.name), hex(&d.pattern));
                let _ = writeln!(text, "{slot} {} {flags} {} {name} {pattern} {dlt}", d.id, d.priority);
            }
            Desc::Consumer(d) => {
                let _ = writeln!(text, "c {slot} {} {} {}", d.id, hex(&d.group), hex(&d.topic));
            }
        }
    }
    text
}

/// The lines of a `.list` (an unknown version or a bad line: skipped).
fn decode(text: &str) -> Vec<(u64, Desc)> {
    let mut lines = text.lines();
    if lines.next() != Some("rill-subscribers 1") {
        return Vec::new();
    }
    lines
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            if let ["c", slot, id, group, topic] = f.as_slice() {
                let desc = ConsumerDesc { id: id.parse().ok()?, group: unhex(group)?, topic: unhex(topic)? };
                return Some((slot.parse().ok()?, Desc::Consumer(desc)));
            }
            let [slot, id, flags, priority, name, pattern, dlt] = f.as_slice() else { return None };
            let flags: u8 = flags.parse().ok()?;
            let desc = SubDesc {
                id: id.parse().ok()?,
                name: unhex(name)?,
                pattern: unhex(pattern)?,
                durable: flags & 1 != 0,
                shared: flags & 2 != 0,
                priority: priority.parse().ok()?,
                dead_letter_topic: if *dlt == "-" { None } else { Some(unhex(dlt)?) },
            };
            Some((slot.parse().ok()?, Desc::Sub(desc)))
        })
        .collect()
}

/// The word at `word` of slot `slot` of a chunk mapped at `base`.
///
/// # Safety
/// `base` must point at a live mapping of at least `CHUNK_BYTES` bytes,
/// page-aligned, used only through atomics, that outlives the reference.
unsafe fn word_at<'a>(base: *const u8, slot: usize, word: usize) -> &'a AtomicU64 {
    debug_assert!(slot < CHUNK_SLOTS as usize && word < SLOT_WORDS);
    // SAFETY: in bounds (asserted above, the caller's mapping is a whole
    // chunk), 8-aligned (a page-aligned base, offsets in words), and the
    // caller keeps the mapping alive and uses it only as atomics.
    unsafe { &*base.add(slot * SLOT_BYTES + word * 8).cast::<AtomicU64>() }
}

/// A subscription's slot, held by its round-end hook, or a pull
/// consumer's, held by the consumer.
pub(crate) struct Slot {
    registry: Arc<Registry>,
    /// Keeps the chunk's mapping alive while the slot is written.
    map: Arc<MmapMut>,
    index: u64,
    id: u64,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("index", &self.index).field("id", &self.id).finish()
    }
}

impl Slot {
    /// Publishes a subscription's `counts` into the slot: plain stores, no
    /// system call.
    pub(crate) fn publish(&self, counts: &Counts) {
        self.store(&counts.words());
    }

    /// Publishes a pull consumer's `counts` into the slot, as `publish`.
    pub(crate) fn publish_consumer(&self, counts: &ConsumerCounts) {
        self.store(&counts.words());
    }

    fn store(&self, words: &[u64]) {
        debug_assert!(words.len() < SLOT_WORDS);
        let at = (self.index % CHUNK_SLOTS) as usize;
        for (i, &w) in words.iter().enumerate() {
            // SAFETY: `self.map` is a whole chunk, kept alive by the Arc, and
            // only ever used through atomics.
            let word = unsafe { word_at(self.map.as_ptr(), at, 1 + i) };
            // Relaxed: each word is a statistic on its own (see "Who writes what").
            word.store(w, Ordering::Relaxed);
        }
    }

    /// Names the subscription in `.list` (once its subscribe succeeded).
    pub(crate) fn list(&self, desc: SubDesc) -> Result<()> {
        self.registry.list(self.index, Desc::Sub(desc))
    }

    /// Names the pull consumer in `.list` (once it joined its group).
    pub(crate) fn list_consumer(&self, desc: ConsumerDesc) -> Result<()> {
        self.registry.list(self.index, Desc::Consumer(desc))
    }

    /// Takes the subscription out of `.list` (at its close).
    pub(crate) fn unlist(&self) -> Result<()> {
        self.registry.unlist(self.index)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Errors are left: the files go with the broker's at its close.
        let _ = self.registry.let_go(self.index);
    }
}

struct State {
    /// The lock held for the broker's life; `None` once closed.
    lock: Option<Locked>,
    next_slot: u64,
    chunks: HashMap<u64, (Arc<MmapMut>, u64)>,
    listed: BTreeMap<u64, Desc>,
}

/// A broker's registry (see the module docs).
pub(crate) struct Registry {
    dir: PathBuf,
    stem: String,
    state: Mutex<State>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("dir", &self.dir).field("stem", &self.stem).finish()
    }
}

impl Registry {
    /// Makes this broker's registry under `root`, its `.lock` held.
    pub(crate) fn open(root: &Path) -> Result<Arc<Registry>> {
        let dir = root.join(REGISTRY_DIR);
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, &e))?;
        let nonce = crate::clock::now_ns() ^ (crate::sync::unique_id() << 48);
        let stem = format!("{}-{nonce:016x}", std::process::id());
        let tmp = dir.join(format!("{stem}.lock.tmp"));
        let file = LockFile::open(OpenOptions::new().read(true).write(true).create_new(true), &tmp)?;
        if !flock(&file, &tmp, libc::LOCK_EX | libc::LOCK_NB)? {
            return Err(Error::Busy(format!("the new registry file {tmp:?} is locked by another process")));
        }
        let lock = Locked::new(file);
        let path = dir.join(format!("{stem}.lock"));
        fs::rename(&tmp, &path).map_err(|e| Error::io(&path, &e))?;
        let registry = Registry {
            dir,
            stem,
            state: Mutex::new(State {
                lock: Some(lock),
                next_slot: 0,
                chunks: HashMap::new(),
                listed: BTreeMap::new(),
            }),
        };
        registry.write_list(&BTreeMap::new())?;
        Ok(Arc::new(registry))
    }

    fn chunk_path(&self, chunk: u64) -> PathBuf {
        self.dir.join(format!("{}.{chunk}", self.stem))
    }

    fn write_list(&self, listed: &BTreeMap<u64, Desc>) -> Result<()> {
        // Never synced: a registry describes live processes, not what
        // survives a crash.
        replace(&self.dir, &format!("{}.list", self.stem), encode(listed).as_bytes(), false)
    }

    /// Hands subscription (or pull consumer) `id` a slot of its own, its
    /// counts zero.
    pub(crate) fn slot(this: &Arc<Registry>, id: u64) -> Result<Slot> {
        let mut st = this.state.lock();
        if st.lock.is_none() {
            return Err(Error::broker_closed());
        }
        let index = st.next_slot;
        let chunk = index / CHUNK_SLOTS;
        let map = match st.chunks.get_mut(&chunk) {
            Some((map, live)) => {
                *live += 1;
                map.clone()
            }
            None => {
                let path = this.chunk_path(chunk);
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
                    .map_err(|e| Error::io(&path, &e))?;
                file.set_len(CHUNK_BYTES as u64).map_err(|e| Error::io(&path, &e))?;
                // SAFETY: a file only this broker writes, and only through
                // atomics (see "Who writes what"); its length is set above
                // and never changes.
                let map =
                    unsafe { MmapOptions::new().len(CHUNK_BYTES).map_mut(&file) }.map_err(|e| Error::io(&path, &e))?;
                let map = Arc::new(map);
                st.chunks.insert(chunk, (map.clone(), 1));
                map
            }
        };
        st.next_slot += 1;
        drop(st);
        // SAFETY: a whole chunk, kept alive by `map`, used only as atomics.
        let first = unsafe { word_at(map.as_ptr(), (index % CHUNK_SLOTS) as usize, 0) };
        // Relaxed: a reader looks at the slot only once `.list` names it,
        // which a rename after this store does (a system call between).
        first.store(id, Ordering::Relaxed);
        Ok(Slot { registry: this.clone(), map, index, id })
    }

    fn list(&self, index: u64, desc: Desc) -> Result<()> {
        let mut st = self.state.lock();
        if st.lock.is_none() {
            return Ok(());
        }
        st.listed.insert(index, desc);
        self.write_list(&st.listed)
    }

    fn unlist(&self, index: u64) -> Result<()> {
        let mut st = self.state.lock();
        if st.lock.is_none() || st.listed.remove(&index).is_none() {
            return Ok(());
        }
        self.write_list(&st.listed)
    }

    /// A slot's subscription is gone: out of `.list`, and its chunk removed
    /// once every slot of it was handed out and let go.
    fn let_go(&self, index: u64) -> Result<()> {
        self.unlist(index)?;
        let mut st = self.state.lock();
        let chunk = index / CHUNK_SLOTS;
        let full = st.next_slot >= (chunk + 1) * CHUNK_SLOTS;
        let Some((_, live)) = st.chunks.get_mut(&chunk) else { return Ok(()) };
        *live -= 1;
        if *live == 0 && full {
            st.chunks.remove(&chunk);
            if st.lock.is_some() {
                let path = self.chunk_path(chunk);
                fs::remove_file(&path).map_err(|e| Error::io(&path, &e))?;
            }
        }
        Ok(())
    }

    /// At the broker's close: removes its files and lets go of its lock.
    pub(crate) fn close(&self) {
        let mut st = self.state.lock();
        let Some(lock) = st.lock.take() else { return };
        st.listed.clear();
        remove_files(&self.dir, &self.stem);
        drop(lock);
    }

    /// Every other live broker's subscriptions and pull consumers on the
    /// directory `root` (this one's are left out: its caller has them
    /// live). Dead brokers' files are removed on the way.
    pub(crate) fn others(&self, root: &Path) -> Result<Listing> {
        read_others(&root.join(REGISTRY_DIR), Some(&self.stem), &LockTable::read()?)
    }
}

/// Removes every file of the registry `stem` in `dir` (errors ignored: a
/// file another reader removed first, say).
fn remove_files(dir: &Path, stem: &str) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.strip_prefix(stem).is_some_and(|rest| rest.starts_with('.') && rest != ".lock.tmp") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The subscriptions and pull consumers of every live registry in `dir`
/// but `own`.
fn read_others(dir: &Path, own: Option<&str>, locks: &LockTable) -> Result<Listing> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == IoKind::NotFound => return Ok(Listing::default()),
        Err(e) => return Err(Error::io(dir, &e)),
    };
    let mut out = Listing::default();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, &e))?;
        let file = entry.file_name();
        let Some(stem) = file.to_str().and_then(|f| f.strip_suffix(".lock")) else { continue };
        if Some(stem) == own {
            continue;
        }
        let lock_path = entry.path();
        let Some(pid) = locks.holder(&lock_path) else {
            sweep_if_dead(dir, stem, &lock_path);
            continue;
        };
        read_registry(dir, stem, pid, &mut out)?;
    }
    out.subs.sort_by(|a, b| (a.pid, &a.desc.name).cmp(&(b.pid, &b.desc.name)));
    out.consumers.sort_by_key(|c| (c.pid, c.desc.id));
    Ok(out)
}

/// Removes the files of registry `stem` if its lock can be taken (its
/// broker is gone); leaves them otherwise (a broker the lock table was read
/// too early to list).
fn sweep_if_dead(dir: &Path, stem: &str, lock_path: &Path) {
    let Ok(file) = LockFile::open(OpenOptions::new().read(true), lock_path) else { return };
    if let Ok(true) = flock(&file, lock_path, libc::LOCK_EX | libc::LOCK_NB) {
        let lock = Locked::new(file);
        remove_files(dir, stem);
        drop(lock);
    }
}

/// Adds to `out` the subscriptions and pull consumers registry `stem` (of
/// process `pid`) lists, each with its counts; one whose slot holds
/// another id (or whose chunk is gone: it went meanwhile) is left out.
fn read_registry(dir: &Path, stem: &str, pid: u32, out: &mut Listing) -> Result<()> {
    let list_path = dir.join(format!("{stem}.list"));
    let text = match fs::read_to_string(&list_path) {
        Ok(text) => text,
        Err(e) if e.kind() == IoKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(&list_path, &e)),
    };
    let mut maps: HashMap<u64, Option<Mmap>> = HashMap::new();
    for (slot, desc) in decode(&text) {
        let chunk = slot / CHUNK_SLOTS;
        let map = maps.entry(chunk).or_insert_with(|| {
            let file = fs::File::open(dir.join(format!("{stem}.{chunk}"))).ok()?;
            if file.metadata().ok()?.len() < CHUNK_BYTES as u64 {
                return None;
            }
            // SAFETY: a whole chunk (its length checked above; its owner
            // never shrinks it), read only through atomics below.
            unsafe { MmapOptions::new().len(CHUNK_BYTES).map(&file) }.ok()
        });
        let Some(map) = map else { continue };
        let at = (slot % CHUNK_SLOTS) as usize;
        // SAFETY: `map` is a whole chunk, alive for this loop, read only as atomics.
        let word = |w: usize| unsafe { word_at(map.as_ptr(), at, w) }.load(Ordering::Relaxed);
        // Relaxed: `.list` named the slot after its id was stored (a rename
        // between), and the counts are statistics.
        if word(0) != desc.id() {
            continue;
        }
        match desc {
            Desc::Sub(desc) => {
                let counts = Counts::from_words(std::array::from_fn(|i| word(1 + i)));
                out.subs.push(ListedSub { pid, desc, counts });
            }
            Desc::Consumer(desc) => {
                let counts = ConsumerCounts::from_words(std::array::from_fn(|i| word(1 + i)));
                out.consumers.push(ListedConsumer { pid, desc, counts });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(id: u64, name: &str) -> SubDesc {
        SubDesc {
            id,
            name: name.into(),
            pattern: "orders.*".into(),
            durable: true,
            shared: false,
            priority: 3,
            dead_letter_topic: Some("dlq ü".into()),
        }
    }

    #[test]
    fn a_list_reads_back_as_written() {
        let mut listed = BTreeMap::new();
        listed.insert(4, Desc::Sub(desc(9, "a b\nc")));
        listed
            .insert(70, Desc::Sub(SubDesc { dead_letter_topic: None, shared: true, durable: false, ..desc(10, "x") }));
        let consumer = ConsumerDesc { id: 11, group: "billing ü".into(), topic: "orders".into() };
        listed.insert(71, Desc::Consumer(consumer));
        let text = encode(&listed);
        let back: BTreeMap<u64, Desc> = decode(&text).into_iter().collect();
        assert_eq!(back, listed);
        assert!(decode("rill-subscribers 2\n4 9 1 3 61 61 -\n").is_empty());
        // A reader that knows only subscriptions' seven fields skips a
        // consumer's line as a bad one (see "Who writes what").
        let consumer_line = text.lines().find(|l| l.starts_with("c ")).unwrap();
        assert_eq!(consumer_line.split(' ').count(), 5);
    }

    #[test]
    fn a_registry_lists_its_slots_to_others_and_a_closed_one_is_swept() {
        let root =
            std::env::temp_dir().join(format!("rill-registry-{}-{}", std::process::id(), crate::sync::unique_id()));
        let owner = Registry::open(&root).unwrap();
        let dir = root.join(REGISTRY_DIR);
        // Slots beyond a chunk; the first chunk's go, so its file does.
        let slots: Vec<Slot> = (0..CHUNK_SLOTS + 2).map(|i| Registry::slot(&owner, 100 + i).unwrap()).collect();
        for (i, s) in slots.iter().enumerate() {
            s.list(desc(100 + i as u64, &format!("s{i:03}"))).unwrap();
        }
        let last = slots.last().unwrap();
        last.publish(&Counts { delivered: 7, acked: 6, lag: 2, ..Counts::default() });
        // A pull consumer's slot beside them, in the same chunks.
        let consumer = Registry::slot(&owner, 500).unwrap();
        consumer.list_consumer(ConsumerDesc { id: 500, group: "billing".into(), topic: "orders".into() }).unwrap();
        consumer.publish_consumer(&ConsumerCounts { delivered: 5, missed: 1, lag: 3 });
        let pid = std::process::id();
        // This process holds the owner's lock: the kernel lists it as ours.
        let table = LockTable::read().unwrap();
        let listed = read_others(&dir, None, &table).unwrap();
        assert_eq!(listed.subs.len(), slots.len());
        let seen = listed.subs.iter().find(|l| l.desc.id == last.id).unwrap();
        assert_eq!((seen.pid, seen.counts.delivered, seen.counts.acked, seen.counts.lag), (pid, 7, 6, 2));
        assert_eq!(listed.consumers.len(), 1);
        let c = &listed.consumers[0];
        assert_eq!((c.pid, c.desc.id, c.desc.group.as_str(), c.desc.topic.as_str()), (pid, 500, "billing", "orders"));
        assert_eq!(c.counts, ConsumerCounts { delivered: 5, missed: 1, lag: 3 });
        drop(consumer);
        assert!(read_others(&dir, None, &table).unwrap().consumers.is_empty(), "a dropped slot is unlisted");
        let none = read_others(&dir, Some(&owner.stem), &table).unwrap();
        assert!(none.subs.is_empty() && none.consumers.is_empty());
        let mut slots = slots;
        let tail = slots.split_off(CHUNK_SLOTS as usize);
        drop(slots);
        assert!(!owner.chunk_path(0).exists(), "a chunk wholly let go is removed");
        assert_eq!(read_others(&dir, None, &table).unwrap().subs.len(), tail.len());
        tail[0].unlist().unwrap();
        assert_eq!(read_others(&dir, None, &table).unwrap().subs.len(), 1);
        // Closed: its lock let go, a reader sweeps whatever is left.
        owner.close();
        assert!(read_others(&dir, None, &LockTable::default()).unwrap().subs.is_empty());
        drop(tail);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        fs::remove_dir_all(&root).unwrap();
    }
}
