//! The data directory's on-disk encodings: the frame every metadata file
//! is (magic, format version, length, CRC32C, body; see "Never
//! half-written" in `mod.rs`), the bodies of `topics.list` (formats 1 to
//! 3) and of the offsets slots, and one topic as the list and the journal
//! hold it. Nothing here chooses a file or a moment to write: that is the
//! I/O beside it (`topics.rs`, `offsets.rs`). Every format a rill ever
//! wrote is still read; a change here keeps the old readers and says which
//! format number it adds.

use std::fs::File;
use std::io::{ErrorKind as IoKind, Read};
use std::path::Path;

use crate::broker::topic::{Cleanup, TopicOptions};
use crate::error::{Error, Result};

/// First bytes of every metadata frame.
const MAGIC: &[u8; 8] = b"rill-md\0";
/// Format of the frame and its bodies; a newer one is refused, not guessed at.
pub(super) const VERSION: u32 = 1;
/// The format of `topics.list`: 2 puts the list's generation before the
/// topics (see `journal.rs`); 1, the topics alone, is still read. 3 appends
/// the options newer than format 2 to each topic (`dedupe_window_ms`,
/// `priority`; see [`encode_topic`]); 4 appends compaction's after them
/// (`cleanup`, `delete_retention_ms`, `min_compaction_lag_ms`).
pub(super) const TOPICS_VERSION: u32 = 4;
/// The first `topics.list` format whose topics hold the appended options.
const TOPICS_APPENDED_OPTIONS: u32 = 3;
/// The first `topics.list` format whose topics hold compaction's options.
const TOPICS_COMPACTION_OPTIONS: u32 = 4;
/// The format of a named subscription's own slots (`named.rs`): 2 stores
/// each position with its topic's directory number ([`NamedSlot`]); 1, the
/// offsets encoding (by topic name alone), is still read. An older rill,
/// which reads frames of format 1 only, refuses a slot of format 2 as
/// `Corrupt` rather than misread it (see "Positions and directory numbers"
/// in `named.rs`).
pub(super) const NAMED_VERSION: u32 = 2;
/// The format of a group's or a shared subscription's own slots
/// (`membership.rs`): 2 puts the directory number of the topic the
/// committed offset is in before the offsets encoding ([`MemberSlot`]); 1,
/// the offsets encoding alone, is still read. An older rill refuses a slot
/// of format 2 as `Corrupt`, as for [`NAMED_VERSION`] (see "Commits and
/// directory numbers" in `membership.rs`).
pub(super) const MEMBER_VERSION: u32 = 2;
/// The directory number of a position read from a named slot of format 1,
/// which held none: checked by its topic's name alone.
pub(super) const UNKNOWN_DIR: u64 = u64::MAX;
/// Magic, version, body length (u64), CRC32C of the body (u32).
pub(super) const FRAME_HEADER: usize = 8 + 4 + 8 + 4;

/// A topic as the data directory lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicMeta {
    pub(crate) name: String,
    /// Its directory is `topics/<dir>`.
    pub(crate) dir: u64,
    pub(crate) options: TopicOptions,
}

/// Everything committed that is not a message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Offsets {
    /// (group, topic, committed offset per partition).
    pub(crate) groups: Vec<(String, String, Vec<Option<u64>>)>,
    /// (subscription name, its positions).
    pub(crate) durable: Vec<(String, Positions)>,
}

/// A durable subscription's positions: (topic, partition, next offset).
pub(crate) type Positions = Vec<(String, u32, u64)>;

/// A durable subscription's positions with their topics' directory
/// numbers: (topic, partition, next offset, `topics/<dir>` of the topic
/// the offset is in, or [`UNKNOWN_DIR`]).
pub(crate) type DirPositions = Vec<(String, u32, u64, u64)>;

/// What a named subscription's own slots hold (format [`NAMED_VERSION`]):
/// (subscription name, its positions), at most one entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NamedSlot {
    pub(crate) durable: Vec<(String, DirPositions)>,
}

/// What a group's or a shared subscription's own slots hold (format
/// [`MEMBER_VERSION`]): one partition's committed offset, as the offsets
/// encoding with one group, and the directory number of its topic
/// (`topics/<dir>`, or [`UNKNOWN_DIR`] if read from a slot of format 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberSlot {
    pub(crate) offsets: Offsets,
    pub(crate) dir: u64,
}

impl Default for MemberSlot {
    fn default() -> Self {
        MemberSlot { offsets: Offsets::default(), dir: UNKNOWN_DIR }
    }
}

impl SlotBody for MemberSlot {
    const VERSION: u32 = MEMBER_VERSION;
    fn encode(&self, w: &mut Writer) {
        w.u64(self.dir);
        encode_offsets(w, &self.offsets);
    }
    fn decode(r: &mut Reader<'_>, version: u32) -> Result<Self> {
        let dir = if version == 1 { UNKNOWN_DIR } else { r.u64()? };
        Ok(MemberSlot { offsets: decode_offsets(r)?, dir })
    }
}

/// The body of a pair of slots written by a `GroupCommit` (`offsets.rs`):
/// the frame format it writes, and how it reads each format it knows.
pub(crate) trait SlotBody: Clone + PartialEq + Default + std::fmt::Debug {
    /// The format it writes (and the newest it reads).
    const VERSION: u32;
    fn encode(&self, w: &mut Writer);
    /// Reads a body of format `version` (1 to `VERSION`).
    fn decode(r: &mut Reader<'_>, version: u32) -> Result<Self>;
}

impl SlotBody for Offsets {
    const VERSION: u32 = VERSION;
    fn encode(&self, w: &mut Writer) {
        encode_offsets(w, self);
    }
    fn decode(r: &mut Reader<'_>, _version: u32) -> Result<Self> {
        decode_offsets(r)
    }
}

impl SlotBody for NamedSlot {
    const VERSION: u32 = NAMED_VERSION;
    fn encode(&self, w: &mut Writer) {
        w.u32(self.durable.len() as u32);
        for (name, positions) in &self.durable {
            w.str(name);
            w.u32(positions.len() as u32);
            for (topic, partition, offset, dir) in positions {
                w.str(topic);
                w.u32(*partition);
                w.u64(*offset);
                w.u64(*dir);
            }
        }
    }
    fn decode(r: &mut Reader<'_>, version: u32) -> Result<Self> {
        if version == 1 {
            // The offsets encoding, positions by name alone.
            let durable = decode_offsets(r)?
                .durable
                .into_iter()
                .map(|(name, positions)| {
                    (name, positions.into_iter().map(|(t, p, o)| (t, p, o, UNKNOWN_DIR)).collect())
                })
                .collect();
            return Ok(NamedSlot { durable });
        }
        let mut durable = Vec::new();
        for _ in 0..r.u32()? {
            let name = r.str()?;
            let n = r.u32()?;
            let positions = (0..n).map(|_| Ok((r.str()?, r.u32()?, r.u64()?, r.u64()?))).collect::<Result<Vec<_>>>()?;
            durable.push((name, positions));
        }
        r.end()?;
        Ok(NamedSlot { durable })
    }
}

/// A frame around `body` (see the module docs) of format `version`.
pub(super) fn frame_of(version: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Reads the frame in `path`: `None` if there is no such file, the version
/// (1 to `newest`) and body if it is whole, `Corrupt` if it is not.
pub(super) fn read_frame(path: &Path, newest: u32) -> Result<Option<(u32, Vec<u8>)>> {
    let mut bytes = Vec::new();
    match File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)) {
        Ok(_) => {}
        Err(e) if e.kind() == IoKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, &e)),
    }
    let corrupt = |offset: u64, reason: &str| Error::Corrupt { file: path.to_owned(), offset, reason: reason.into() };
    if bytes.len() < FRAME_HEADER {
        return Err(corrupt(0, "shorter than a metadata header"));
    }
    if &bytes[..8] != MAGIC {
        return Err(corrupt(0, "not a rill metadata file"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if !(1..=newest).contains(&version) {
        return Err(corrupt(8, &format!("metadata format {version}, this rill reads 1 to {newest}")));
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    let body = &bytes[FRAME_HEADER..];
    if body.len() as u64 != len {
        return Err(corrupt(FRAME_HEADER as u64, "the body is not as long as its header says"));
    }
    if crc32c::crc32c(body) != crc {
        return Err(corrupt(FRAME_HEADER as u64, "the body fails its CRC"));
    }
    Ok(Some((version, body.to_vec())))
}

/// A `topics.list` body of format `TOPICS_VERSION`.
pub(super) fn encode_topics(generation: u64, list: &[TopicMeta]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(generation);
    w.u32(list.len() as u32);
    for t in list {
        encode_topic(&mut w, t);
    }
    w.0
}

/// One topic, as the list and the journal hold it.
pub(super) fn encode_topic(w: &mut Writer, t: &TopicMeta) {
    encode_topic_before_appended(w, t);
    let o = &t.options;
    // Appended options: read from `topics.list` of format
    // TOPICS_APPENDED_OPTIONS and later, and from journal entries that go on
    // past the fields above; missing, they take their defaults.
    w.u64(o.dedupe_window_ms);
    w.opt(o.priority.map(u64::from));
    // Compaction's (format 4), read the same way after those.
    w.u32(match o.cleanup {
        Cleanup::Delete => 0,
        Cleanup::Compact => 1,
        Cleanup::CompactAndDelete => 2,
    });
    w.u64(o.delete_retention_ms);
    w.u64(o.min_compaction_lag_ms);
}

/// One topic's fields of list format 2 (and of journal entries without
/// the appended options).
pub(super) fn encode_topic_before_appended(w: &mut Writer, t: &TopicMeta) {
    w.str(&t.name);
    w.u64(t.dir);
    let o = &t.options;
    w.u32(o.partitions);
    w.opt(o.retention_bytes);
    w.opt(o.retention_messages);
    w.opt(o.segment_bytes.map(|n| n as u64));
    w.opt(o.max_message_bytes.map(|n| n as u64));
    w.opt(o.retention_ms);
}

/// A `topics.list` body of format `version`: its generation (0 for
/// format 1, which had none) and topics.
pub(super) fn decode_topics(path: &Path, version: u32, body: &[u8]) -> Result<(u64, Vec<TopicMeta>)> {
    let mut r = Reader::new(path, body);
    let generation = if version >= 2 { r.u64()? } else { 0 };
    let n = r.u32()?;
    let mut list = Vec::new();
    for _ in 0..n {
        let appended = if version >= TOPICS_COMPACTION_OPTIONS {
            Appended::Yes
        } else if version >= TOPICS_APPENDED_OPTIONS {
            Appended::BeforeCompaction
        } else {
            Appended::No
        };
        list.push(decode_topic(&mut r, appended)?);
    }
    r.end()?;
    Ok((generation, list))
}

/// Whether a topic's encoding holds the options [`encode_topic`] appends.
#[derive(Debug, Clone, Copy)]
pub(super) enum Appended {
    /// It does not (`topics.list` before format `TOPICS_APPENDED_OPTIONS`).
    No,
    /// It does, all of them (`topics.list` of `TOPICS_COMPACTION_OPTIONS`
    /// or later).
    Yes,
    /// It does, but for compaction's (`topics.list` of format 3).
    BeforeCompaction,
    /// It does if bytes follow the older fields (a journal entry, one topic
    /// alone, written by a rill with or without them).
    IfAny,
}

impl From<bool> for Appended {
    fn from(yes: bool) -> Appended {
        if yes { Appended::Yes } else { Appended::No }
    }
}

/// Reads what [`encode_topic`] wrote; a journal entry must hold exactly one.
/// Options missing from an older encoding take their defaults.
pub(super) fn decode_topic(r: &mut Reader<'_>, appended: impl Into<Appended>) -> Result<TopicMeta> {
    let name = r.str()?;
    let dir = r.u64()?;
    let mut options = TopicOptions {
        partitions: r.u32()?,
        retention_bytes: r.opt()?,
        retention_messages: r.opt()?,
        segment_bytes: r.opt()?.map(|n| n as usize),
        max_message_bytes: r.opt()?.map(|n| n as usize),
        retention_ms: r.opt()?,
        // Before format 4 a data directory's topics were never compacted.
        ..TopicOptions::default()
    };
    let appended = appended.into();
    let (first, compaction) = match appended {
        Appended::IfAny => (r.at < r.bytes.len(), false),
        Appended::Yes => (true, true),
        Appended::BeforeCompaction => (true, false),
        Appended::No => (false, false),
    };
    if first {
        options.dedupe_window_ms = r.u64()?;
        options.priority = match r.opt()? {
            None => None,
            Some(p) if p < u64::from(crate::broker::dispatch::PRIORITIES) => Some(p as u8),
            Some(_) => return Err(r.corrupt("a topic priority out of range")),
        };
    }
    // A journal entry holds compaction's options if bytes follow those.
    if compaction || (matches!(appended, Appended::IfAny) && first && r.at < r.bytes.len()) {
        options.cleanup = match r.u32()? {
            0 => Cleanup::Delete,
            1 => Cleanup::Compact,
            2 => Cleanup::CompactAndDelete,
            _ => return Err(r.corrupt("a topic cleanup policy out of range")),
        };
        options.delete_retention_ms = r.u64()?;
        options.min_compaction_lag_ms = r.u64()?;
    }
    Ok(TopicMeta { name, dir, options })
}

pub(super) fn encode_offsets(w: &mut Writer, o: &Offsets) {
    w.u32(o.groups.len() as u32);
    for (group, topic, committed) in &o.groups {
        w.str(group);
        w.str(topic);
        w.u32(committed.len() as u32);
        for c in committed {
            w.opt(*c);
        }
    }
    w.u32(o.durable.len() as u32);
    for (name, positions) in &o.durable {
        w.str(name);
        w.u32(positions.len() as u32);
        for (topic, partition, offset) in positions {
            w.str(topic);
            w.u32(*partition);
            w.u64(*offset);
        }
    }
}

pub(super) fn decode_offsets(r: &mut Reader<'_>) -> Result<Offsets> {
    let mut o = Offsets::default();
    for _ in 0..r.u32()? {
        let (group, topic) = (r.str()?, r.str()?);
        let n = r.u32()?;
        let committed = (0..n).map(|_| r.opt()).collect::<Result<Vec<_>>>()?;
        o.groups.push((group, topic, committed));
    }
    for _ in 0..r.u32()? {
        let name = r.str()?;
        let n = r.u32()?;
        let positions = (0..n).map(|_| Ok((r.str()?, r.u32()?, r.u64()?))).collect::<Result<Vec<_>>>()?;
        o.durable.push((name, positions));
    }
    r.end()?;
    Ok(o)
}

/// Little-endian fields, strings as a u32 length and their bytes.
#[derive(Default)]
pub(crate) struct Writer(pub(super) Vec<u8>);

impl Writer {
    pub(super) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    /// A presence byte, then the value if present.
    pub(super) fn opt(&mut self, v: Option<u64>) {
        self.0.push(v.is_some() as u8);
        if let Some(v) = v {
            self.u64(v);
        }
    }
}

/// Reads what [`Writer`] wrote; running short or a bad value is `Corrupt`
/// (a frame that passed its CRC but does not decode was written by a bug or
/// a different program: refused, not guessed at).
pub(crate) struct Reader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(path: &'a Path, bytes: &'a [u8]) -> Self {
        Reader { path, bytes, at: 0 }
    }
    pub(super) fn corrupt(&self, reason: &str) -> Error {
        Error::Corrupt { file: self.path.to_owned(), offset: (FRAME_HEADER + self.at) as u64, reason: reason.into() }
    }
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() - self.at < n {
            return Err(self.corrupt("the metadata ends inside a field"));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub(super) fn str(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.corrupt("a name is not UTF-8"))
    }
    pub(super) fn opt(&mut self) -> Result<Option<u64>> {
        match self.take(1)?[0] {
            0 => Ok(None),
            1 => self.u64().map(Some),
            _ => Err(self.corrupt("a presence byte is neither 0 nor 1")),
        }
    }
    pub(super) fn end(&self) -> Result<()> {
        if self.at == self.bytes.len() { Ok(()) } else { Err(self.corrupt("trailing bytes after the metadata")) }
    }
}
