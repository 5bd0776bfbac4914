//! The byte layout of one record inside a segment, and the borrowed views
//! readers get of it.
//!
//! Why it is long: over a third of it is the public types' docs and their
//! examples; the code is one byte layout, written by `Record` and read by
//! `RecordView`, which must agree on every byte.
//!
//! A record starts on an 8-byte boundary and is laid out as:
//!
//! ```text
//!  0..4   u32  LEN_AT         record length in bytes, header included, padding excluded
//!  4..8   u32  KEY_LEN_AT     key length, or NO_KEY when the record has no key
//!  8..12  u32  ATTRS_LEN_AT   length of the attribute block in bytes
//! 12..14  u16  ATTR_COUNT_AT  number of attributes
//! 14..16  u16  FLAGS_AT       flags: 0, FLAG_SKIP (a skip record) or FLAG_COMPACTED
//! 16..24  u64  TIMESTAMP_AT   publish timestamp, nanoseconds since the Unix epoch
//! 24..         HEADER_LEN     key bytes, then the attribute block, then the payload
//! ```
//!
//! The code reads and writes the fields only through the named constants
//! (compile-time checks keep them in this order). The attribute block holds
//! each pair as `u16 key length (ATTR_KEY_LEN_AT), u32 value length
//! (ATTR_VALUE_LEN_AT), key bytes, value bytes`. A filter walks it without allocating. All integers
//! are little-endian. The payload length is what is left of the record length.
//!
//! # Skip records
//!
//! A record whose flags are `FLAG_SKIP` holds an offset that no record was
//! ever completed for: recovery writes one in place of each record a crash
//! left unwritten between complete ones (a *hole*; see `recovery.rs`), so
//! offsets stay dense and stay what they were handed out as. A skip record
//! has no key and no attributes; its body, zeros, only fills the room the
//! lost record had (most are a bare header, `SKIP_LEN` bytes). It is never
//! delivered: every reader passes over it (`cursor.rs`). It is
//! a record kind of the log's format, not a recovery detail: anything that
//! must give up an offset it reserved writes one.
//!
//! # Compacted-away records
//!
//! A record whose flags are `FLAG_COMPACTED` stands for offsets log
//! compaction removed (`log/compact.rs`): a bare header (`COMPACTED_LEN`
//! bytes), no key, no attributes, no payload. A merged compacted segment
//! (in memory) holds one, at the start of its region, and its index names
//! it for every offset it removed (see "A merged compacted segment" in
//! `segment.rs`); readers pass over it exactly as over a skip record
//! ([`RecordView::is_skip`] is true for both). It is a kind of its own, not
//! a skip record, because it means something else: the offset held a record
//! that a newer one of the same key replaced, not an offset nobody completed.
//!
//! In a durable segment (a segment file) each run of removed offsets has a
//! compacted-away record of its own, in offset order among the kept ones,
//! whose 8-byte body is the run's length (`COMPACTED_RUN_LEN` bytes in
//! all): recovery, which reads a file's records in order and gives each
//! the next offset, thus knows how many offsets it stands for (see
//! `log/file/rebuild.rs`).

use std::fmt;

use crate::error::Error;

/// Where each header field starts (the table above); each is followed by the next.
/// `u32` record length, header included, padding excluded.
const LEN_AT: usize = 0;
/// `u32` key length, or `NO_KEY`.
const KEY_LEN_AT: usize = 4;
/// `u32` length of the attribute block.
const ATTRS_LEN_AT: usize = 8;
/// `u16` number of attributes.
const ATTR_COUNT_AT: usize = 12;
/// `u16` flags: 0 for a record, `FLAG_SKIP` for a skip record.
const FLAGS_AT: usize = 14;
/// Flag bit of a skip record: an offset given up, delivered to no one.
const FLAG_SKIP: u16 = 1;
/// Flag bit of a compacted-away record: offsets whose records compaction
/// removed (see "Compacted-away records" above), delivered to no one.
const FLAG_COMPACTED: u16 = 2;
/// Flags of the records no reader is handed.
const FLAGS_PASSED_OVER: u16 = FLAG_SKIP | FLAG_COMPACTED;
/// Bytes a compacted-away record takes: a bare header.
pub(crate) const COMPACTED_LEN: usize = HEADER_LEN;
/// Bytes a skip record takes, padding included: a bare header.
pub(crate) const SKIP_LEN: usize = HEADER_LEN;
const _: () = assert!(SKIP_LEN.is_multiple_of(RECORD_ALIGN));
/// `u64` publish timestamp in nanoseconds since the Unix epoch.
const TIMESTAMP_AT: usize = 16;
/// Size of the fixed record header: the key starts here.
pub(crate) const HEADER_LEN: usize = 24;
const _: () = assert!(KEY_LEN_AT == LEN_AT + 4 && ATTRS_LEN_AT == KEY_LEN_AT + 4 && ATTR_COUNT_AT == ATTRS_LEN_AT + 4);
const _: () = assert!(FLAGS_AT == ATTR_COUNT_AT + 2 && TIMESTAMP_AT == FLAGS_AT + 2 && HEADER_LEN == TIMESTAMP_AT + 8);
/// In an attribute's framing: `u16` key length.
const ATTR_KEY_LEN_AT: usize = 0;
/// In an attribute's framing: `u32` value length.
const ATTR_VALUE_LEN_AT: usize = 2;
/// Records start on multiples of this, so headers are aligned.
pub(crate) const RECORD_ALIGN: usize = 8;
/// Key-length value that means "no key" (distinct from an empty key).
const NO_KEY: u32 = u32::MAX;
/// Bytes of framing in front of each attribute: u16 key length + u32 value length.
const ATTR_FRAME: usize = 6;
const _: () = assert!(ATTR_VALUE_LEN_AT == ATTR_KEY_LEN_AT + 2 && ATTR_FRAME == ATTR_VALUE_LEN_AT + 4);

/// Longest attribute key, in bytes.
pub const MAX_ATTRIBUTE_KEY_LEN: usize = u16::MAX as usize;
/// Most attributes one record may carry.
pub const MAX_ATTRIBUTES: usize = u16::MAX as usize;
/// The reserved attribute holding a record's id ([`Record::with_id`]): a
/// topic with a dedupe window appends a record whose id it has seen within
/// the window only once. Set either with `with_id` or as an attribute of
/// this name (the C and Python faces do the latter); a record holds at most
/// one.
pub const ID_ATTRIBUTE: &str = "rill.id";
/// Longest record id, in bytes (an id is 1 to this many bytes of UTF-8).
pub const MAX_ID_LEN: usize = 128;

/// A record to append: what a publisher hands to the log.
///
/// Built with [`Record::new`] and the builder methods; it only borrows its
/// parts, which the log copies into the segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record<'a> {
    /// Optional key. `Some(&[])` is an empty key, which is not the same as no key.
    pub key: Option<&'a [u8]>,
    /// String key/value pairs, in the order given.
    pub attributes: &'a [(&'a str, &'a str)],
    /// The message body.
    pub payload: &'a [u8],
    /// The record's id ([`Record::with_id`]), stored as the attribute
    /// [`ID_ATTRIBUTE`] in front of `attributes`.
    pub id: Option<&'a str>,
}

impl<'a> Record<'a> {
    /// A record with this payload, no key and no attributes.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::Record;
    ///
    /// let record = Record::new(b"hello");
    /// assert_eq!((record.payload, record.key, record.attributes.len()), (&b"hello"[..], None, 0));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn new(payload: &'a [u8]) -> Self {
        Record { key: None, attributes: &[], payload, id: None }
    }

    /// Sets the record's id: on a topic with a dedupe window
    /// (`TopicOptions::dedupe_window_ms`), a second record with the same id
    /// within the window is not appended, and its publish returns the first
    /// one's position. Stored as the attribute [`ID_ATTRIBUTE`]; 1 to
    /// [`MAX_ID_LEN`] bytes, else publishing fails with `InvalidArgument`.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{ID_ATTRIBUTE, Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"o-1").with_id("order-1"))?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("record 0 is committed");
    /// assert_eq!(record.attribute(ID_ATTRIBUTE), Some("order-1"));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn with_id(mut self, id: &'a str) -> Self {
        self.id = Some(id);
        self
    }

    /// The record's id: [`Record::id`] or its [`ID_ATTRIBUTE`] attribute;
    /// `InvalidArgument` if it has two, or one that is empty or longer than
    /// [`MAX_ID_LEN`] bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::Record;
    ///
    /// assert_eq!(Record::new(b"a").with_id("x").id()?, Some("x"));
    /// assert_eq!(Record::new(b"a").with_attributes(&[("rill.id", "y")]).id()?, Some("y"));
    /// assert_eq!(Record::new(b"a").id()?, None);
    /// assert!(Record::new(b"a").with_id(&"z".repeat(129)).id().is_err());
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn id(&self) -> Result<Option<&'a str>, Error> {
        // A record without attributes, the common one with an id included
        // (`with_id`), is answered here; attributes, which may name an id
        // too, and every error, out of line.
        if self.attributes.is_empty() {
            match self.id {
                None => return Ok(None),
                Some(id) if !id.is_empty() && id.len() <= MAX_ID_LEN => return Ok(Some(id)),
                Some(_) => {}
            }
        }
        self.id_checked()
    }

    #[cold]
    #[inline(never)]
    fn id_checked(&self) -> Result<Option<&'a str>, Error> {
        let mut found = self.id;
        for (k, v) in self.attributes {
            if *k == ID_ATTRIBUTE {
                if found.is_some() {
                    return Err(Error::InvalidArgument(format!("a record carries at most one id ({ID_ATTRIBUTE})")));
                }
                found = Some(v);
            }
        }
        match found {
            Some(id) if id.is_empty() || id.len() > MAX_ID_LEN => Err(Error::InvalidArgument(format!(
                "a record id ({ID_ATTRIBUTE}) is 1 to {MAX_ID_LEN} bytes, not {}",
                id.len()
            ))),
            found => Ok(found),
        }
    }

    /// True if the record may carry an id: one branch for the common record
    /// (no id, no attributes), before any look at the attributes.
    #[inline(always)]
    pub(crate) fn may_have_id(&self) -> bool {
        self.id.is_some() || !self.attributes.is_empty()
    }

    /// The number of attributes encoded: the id counts as one.
    fn attribute_count(&self) -> usize {
        self.attributes.len() + self.id.is_some() as usize
    }

    /// Sets the key.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::Record;
    ///
    /// assert_eq!(Record::new(b"o-1").with_key(b"customer-7").key, Some(&b"customer-7"[..]));
    /// // An empty key is a key: not the same record as one without.
    /// assert_ne!(Record::new(b"o-1").with_key(b""), Record::new(b"o-1"));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn with_key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }

    /// Sets the attributes.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let attrs = [("region", "IN"), ("tier", "gold")];
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"o-1").with_attributes(&attrs))?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("record 0 is committed");
    /// assert_eq!(record.attributes().collect::<Vec<_>>(), attrs);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn with_attributes(mut self, attributes: &'a [(&'a str, &'a str)]) -> Self {
        self.attributes = attributes;
        self
    }

    /// The number of bytes this record occupies in a segment, padding
    /// included; or why it cannot be encoded at all.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::Record;
    ///
    /// // A 24-byte header, then key, attributes and payload, padded to 8 bytes.
    /// assert_eq!(Record::new(b"hello").encoded_len()?, 32);
    /// assert_eq!(Record::new(&[0; 100]).with_key(b"k").encoded_len()?, 128);
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn encoded_len(&self) -> Result<usize, Error> {
        // The common record (no attributes, key and payload under 4 GiB) in a
        // few instructions; everything else, errors included, out of line.
        let key_len = self.key.map_or(0, <[u8]>::len);
        if !self.may_have_id() && key_len < NO_KEY as usize && self.payload.len() <= u32::MAX as usize {
            // Both terms are below 2^32, so the sum cannot overflow a u64.
            let raw = HEADER_LEN as u64 + key_len as u64 + self.payload.len() as u64;
            if raw <= u32::MAX as u64 {
                return Ok(align_up(raw as usize));
            }
        }
        self.encoded_len_attributed()
    }

    /// [`Record::encoded_len`] off its common path: a record with an id or
    /// attributes that fits is measured in one pass
    /// ([`Record::attributed_len`]); anything else, and every error, goes on
    /// to [`Record::encoded_len_checked`], which says what is wrong. Out of
    /// line and `#[cold]` as the checked length was, so the common path
    /// inlines one call and is laid out as before (its callers, such as the
    /// log's measure of a batch, stay inlined in theirs; `batch_cost
    /// plain`, an example of rill-ffi, counts that path under callgrind),
    /// though a batch of records with attributes comes here once a record
    /// (the batch is measured once, see [`Measured`]; `batch_cost attrs`).
    #[cold]
    #[inline(never)]
    fn encoded_len_attributed(&self) -> Result<usize, Error> {
        match self.attributed_len() {
            Some(len) => Ok(len),
            None => self.encoded_len_checked(),
        }
    }

    /// The encoded length, padding included, of a record that
    /// [`Record::encoded_len_checked`] accepts, in one pass over its
    /// attributes that builds no error and calls nothing; `None` for every
    /// record it would refuse (it then says why). The same checks: a key
    /// under `NO_KEY` bytes, at most [`MAX_ATTRIBUTES`] attributes (the id
    /// counting as one), each key at most [`MAX_ATTRIBUTE_KEY_LEN`] bytes and
    /// value at most `u32::MAX`, at most one id, of 1 to [`MAX_ID_LEN`]
    /// bytes ([`Record::id`]), and all of it at most `u32::MAX` bytes.
    #[inline]
    fn attributed_len(&self) -> Option<usize> {
        let key_len = self.key.map_or(0, <[u8]>::len);
        if let (Some(id), []) = (self.id, self.attributes) {
            // An id alone (`with_id`), as a publish with an id mostly is: no
            // loop. Each term is below 2^32, the sum below 2^34.
            let raw = (HEADER_LEN + ATTR_FRAME + ID_ATTRIBUTE.len()) as u64
                + u64::from(key_len as u32)
                + id.len().min(u32::MAX as usize) as u64
                + self.payload.len().min(u32::MAX as usize) as u64;
            let fits = key_len < NO_KEY as usize && (1..=MAX_ID_LEN).contains(&id.len()) && raw <= u32::MAX as u64;
            return fits.then(|| align_up(raw as usize));
        }
        if key_len >= NO_KEY as usize || self.attribute_count() > MAX_ATTRIBUTES {
            return None;
        }
        // Every term is below 2^33 (a length over its limit is truncated, and
        // then refused below), and there are at most 2^16 of them: the sum
        // cannot overflow a u64.
        let mut attrs_len = 0u64;
        let mut too_long = false;
        let (mut ids, mut id_len) = (0u32, 0usize);
        if let Some(id) = self.id {
            (ids, id_len) = (1, id.len());
            attrs_len += (ATTR_FRAME + ID_ATTRIBUTE.len()) as u64 + u64::from(id.len() as u32);
            too_long |= id.len() > MAX_ID_LEN;
        }
        for (k, v) in self.attributes {
            too_long |= k.len() > MAX_ATTRIBUTE_KEY_LEN || v.len() > u32::MAX as usize;
            // The length first: most keys are not the id's, and then no bytes are compared.
            if k.len() == ID_ATTRIBUTE.len() && *k == ID_ATTRIBUTE {
                ids += 1;
                id_len = v.len();
            }
            attrs_len += (ATTR_FRAME + k.len() as u16 as usize) as u64 + u64::from(v.len() as u32);
        }
        let id_ok = match ids {
            0 => true,
            1 => (1..=MAX_ID_LEN).contains(&id_len),
            _ => false,
        };
        let raw = HEADER_LEN as u64 + key_len as u64 + attrs_len + self.payload.len() as u64;
        (!too_long && id_ok && attrs_len <= u32::MAX as u64 && raw <= u32::MAX as u64).then(|| align_up(raw as usize))
    }

    /// [`Record::encoded_len`] with every check spelled out: records with
    /// attributes, and the ones that do not fit.
    #[cold]
    #[inline(never)]
    fn encoded_len_checked(&self) -> Result<usize, Error> {
        let key_len = self.key.map_or(0, <[u8]>::len);
        if key_len >= NO_KEY as usize {
            return Err(Error::InvalidArgument(format!("key of {key_len} bytes is too long")));
        }
        if self.attribute_count() > MAX_ATTRIBUTES {
            return Err(Error::InvalidArgument(format!(
                "{} attributes given (an id counts as one); at most {MAX_ATTRIBUTES} are allowed",
                self.attribute_count()
            )));
        }
        self.id()?;
        let mut attrs_len = self.id.map_or(0, |id| ATTR_FRAME + ID_ATTRIBUTE.len() + id.len());
        for (k, v) in self.attributes {
            if k.len() > MAX_ATTRIBUTE_KEY_LEN {
                return Err(Error::InvalidArgument(format!(
                    "attribute key of {} bytes is longer than {MAX_ATTRIBUTE_KEY_LEN}",
                    k.len()
                )));
            }
            if v.len() > u32::MAX as usize {
                return Err(Error::InvalidArgument("attribute value longer than 4 GiB".into()));
            }
            attrs_len += ATTR_FRAME + k.len() + v.len();
        }
        if attrs_len > u32::MAX as usize {
            return Err(Error::InvalidArgument("attributes take more than 4 GiB".into()));
        }
        let raw = HEADER_LEN
            .checked_add(key_len)
            .and_then(|n| n.checked_add(attrs_len))
            .and_then(|n| n.checked_add(self.payload.len()))
            .filter(|&n| n <= u32::MAX as usize);
        // Built only when returned: an `ok_or` built it, and dropped it, on
        // every call.
        let Some(raw) = raw else {
            return Err(Error::MessageTooLarge { size: usize::MAX, max: u32::MAX as usize });
        };
        Ok(align_up(raw))
    }

    /// Length of the attribute block, assuming `encoded_len` accepted the record.
    fn attrs_len(&self) -> usize {
        let id = self.id.map_or(0, |id| ATTR_FRAME + ID_ATTRIBUTE.len() + id.len());
        id + self.attributes.iter().map(|(k, v)| ATTR_FRAME + k.len() + v.len()).sum::<usize>()
    }

    /// Writes the record into `dst`, which must be exactly `encoded_len()` bytes.
    ///
    /// The hot part of every publish, so it is written for few stores: the
    /// padding as one zeroed word, the header assembled in a local array
    /// (constant offsets, so it compiles to three word stores) and copied
    /// with one bounds check, then the variable parts.
    #[inline]
    pub(crate) fn encode_into(&self, dst: &mut [u8], timestamp_ns: u64) {
        let key_len = self.key.map_or(0, <[u8]>::len);
        let attrs_len = if self.may_have_id() { self.attrs_len() } else { 0 };
        let raw_len = HEADER_LEN + key_len + attrs_len + self.payload.len();
        debug_assert_eq!(dst.len(), align_up(raw_len));
        let key_field = if self.key.is_some() { key_len as u32 } else { NO_KEY };

        // Zero the padding so segment bytes never depend on what was there
        // before. It is under RECORD_ALIGN bytes at the end, and a record is
        // at least HEADER_LEN long: zero the last word first, and let the
        // record's bytes overwrite what of it is not padding.
        let end = dst.len();
        dst[end - RECORD_ALIGN..].copy_from_slice(&[0; RECORD_ALIGN]);
        let mut header = [0u8; HEADER_LEN];
        header[LEN_AT..LEN_AT + 4].copy_from_slice(&(raw_len as u32).to_le_bytes());
        header[KEY_LEN_AT..KEY_LEN_AT + 4].copy_from_slice(&key_field.to_le_bytes());
        header[ATTRS_LEN_AT..ATTRS_LEN_AT + 4].copy_from_slice(&(attrs_len as u32).to_le_bytes());
        header[ATTR_COUNT_AT..ATTR_COUNT_AT + 2].copy_from_slice(&(self.attribute_count() as u16).to_le_bytes());
        header[FLAGS_AT..FLAGS_AT + 2].copy_from_slice(&0u16.to_le_bytes());
        header[TIMESTAMP_AT..TIMESTAMP_AT + 8].copy_from_slice(&timestamp_ns.to_le_bytes());
        dst[..HEADER_LEN].copy_from_slice(&header);
        let mut at = HEADER_LEN;
        if let Some(key) = self.key {
            dst[at..at + key.len()].copy_from_slice(key);
            at += key.len();
        }
        if self.may_have_id() {
            at = self.encode_attributes(dst, at, attrs_len);
        }
        dst[at..at + self.payload.len()].copy_from_slice(self.payload);
    }

    /// Writes the attribute block, the id first, into `dst` at `at`, its
    /// `attrs_len` bytes; returns where it ends. Each pair is cut from the
    /// front of what is left (three length checks a pair, no offsets added
    /// up and checked again), and its short strings copied inline
    /// ([`copy_short`]). The slicing is in here, so a record without
    /// attributes is encoded by the same instructions as before.
    #[inline(never)]
    fn encode_attributes(&self, dst: &mut [u8], at: usize, attrs_len: usize) -> usize {
        let mut rest = &mut dst[at..at + attrs_len];
        if let Some(id) = self.id {
            rest = put_attribute(rest, ID_ATTRIBUTE, id);
            if self.attributes.is_empty() {
                // An id alone, as a publish with an id mostly is.
                debug_assert!(rest.is_empty(), "the block is the id's length");
                return at + attrs_len;
            }
        }
        for (k, v) in self.attributes {
            rest = put_attribute(rest, k, v);
        }
        debug_assert!(rest.is_empty(), "the block is the attributes' length");
        at + attrs_len
    }
}

/// A batch of records each of which a log measured and found within its
/// size limit ([`Log::measure`](super::Log::measure)), with each record's
/// encoded length: what [`Log::append_measured_pinned`](super::Log::append_measured_pinned)
/// appends without measuring again. Only the log makes one (its fields are
/// the log's), so a batch of this type was checked, record by record,
/// against `max`; the log appending it compares `max` with its own limit.
///
/// The broker measures a batch before it appends any part of it (an error
/// must publish nothing, and a batch may go in parts or to several
/// partitions), and hands the measure down, where each record was measured
/// a second time by the log (`batch_cost attrs`, an example of rill-ffi,
/// counts the Rust batch's instructions under callgrind).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Measured<'r, 'a> {
    /// The records.
    pub(super) records: &'r [Record<'a>],
    /// `lens[i]`: `records[i].encoded_len()`, at most `max`.
    pub(super) lens: &'r [usize],
    /// The size limit the records were measured against.
    pub(super) max: usize,
}

impl<'r, 'a> Measured<'r, 'a> {
    /// The records.
    pub(crate) fn records(&self) -> &'r [Record<'a>] {
        self.records
    }

    /// The records of `range`, measured as before.
    pub(crate) fn part(&self, range: std::ops::Range<usize>) -> Measured<'r, 'a> {
        Measured { records: &self.records[range.clone()], lens: &self.lens[range], max: self.max }
    }

    /// The records `i` for which `pick(i)` holds, in order, collected into
    /// `records` and `lens` (cleared first), measured as before: a
    /// partition's share of a batch.
    pub(crate) fn select<'s>(
        &self,
        mut pick: impl FnMut(usize) -> bool,
        records: &'s mut Vec<Record<'a>>,
        lens: &'s mut Vec<usize>,
    ) -> Measured<'s, 'a> {
        records.clear();
        lens.clear();
        for (i, (r, &len)) in self.records.iter().zip(self.lens).enumerate() {
            if pick(i) {
                records.push(*r);
                lens.push(len);
            }
        }
        Measured { records, lens, max: self.max }
    }
}

/// Writes one attribute (framing, key, value) at the front of `dst`;
/// returns the rest of `dst`.
#[inline(always)]
fn put_attribute<'d>(dst: &'d mut [u8], key: &str, value: &str) -> &'d mut [u8] {
    let (frame, rest) = dst.split_at_mut(ATTR_FRAME);
    let mut framing = [0u8; ATTR_FRAME];
    framing[ATTR_KEY_LEN_AT..ATTR_KEY_LEN_AT + 2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    framing[ATTR_VALUE_LEN_AT..ATTR_VALUE_LEN_AT + 4].copy_from_slice(&(value.len() as u32).to_le_bytes());
    frame.copy_from_slice(&framing);
    let (k, rest) = rest.split_at_mut(key.len());
    copy_short(k, key.as_bytes());
    let (v, rest) = rest.split_at_mut(value.len());
    copy_short(v, value.as_bytes());
    rest
}

/// `dst.copy_from_slice(src)`, with the lengths attributes usually have
/// (up to 32 bytes) copied as two overlapping fixed-size moves, the way a
/// `memcpy` of a small size would, without the call: a record's attribute
/// strings are short, and a call a string was a large part of writing
/// them (`batch_cost attrs`, an example of rill-ffi, under callgrind).
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    /// Copies the first and the last `N` bytes of `src` (`N <= len <= 2N`).
    #[inline(always)]
    fn ends<const N: usize>(dst: &mut [u8], src: &[u8]) {
        let n = src.len();
        let head: [u8; N] = src[..N].try_into().expect("N bytes");
        let tail: [u8; N] = src[n - N..].try_into().expect("N bytes");
        dst[..N].copy_from_slice(&head);
        dst[n - N..].copy_from_slice(&tail);
    }
    debug_assert_eq!(dst.len(), src.len());
    match src.len() {
        0 => {}
        n @ 1..4 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..8 => ends::<4>(dst, src),
        8..16 => ends::<8>(dst, src),
        16..=32 => ends::<16>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// Checks that `bytes` (a record, padding excluded) is laid out as
/// [`Record::encode_into`] writes records, so every [`RecordView`] accessor
/// stays inside it: recovery runs this on every record it keeps, since a
/// checksum alone does not prove a length field sane (only that it was
/// written so). Returns what is wrong otherwise.
pub(crate) fn check_encoded(bytes: &[u8]) -> Result<(), &'static str> {
    if bytes.len() < HEADER_LEN {
        return Err("record shorter than its header");
    }
    if read_u32(bytes, LEN_AT) as usize != bytes.len() {
        return Err("record length field disagrees with its extent");
    }
    match read_u16(bytes, FLAGS_AT) {
        0 => {}
        FLAG_SKIP | FLAG_COMPACTED
            if read_u32(bytes, KEY_LEN_AT) == NO_KEY
                && read_u32(bytes, ATTRS_LEN_AT) == 0
                && read_u16(bytes, ATTR_COUNT_AT) == 0 => {}
        FLAG_SKIP | FLAG_COMPACTED => return Err("skip or compacted-away record with a key or attributes"),
        _ => return Err("record flags set"),
    }
    let body = bytes.len() - HEADER_LEN;
    let key_len = match read_u32(bytes, KEY_LEN_AT) {
        NO_KEY => 0,
        n => n as usize,
    };
    let attrs_len = read_u32(bytes, ATTRS_LEN_AT) as usize;
    if key_len.checked_add(attrs_len).is_none_or(|n| n > body) {
        return Err("record key and attributes longer than the record");
    }
    let start = HEADER_LEN + key_len;
    let mut block = &bytes[start..start + attrs_len];
    for _ in 0..read_u16(bytes, ATTR_COUNT_AT) {
        if block.len() < ATTR_FRAME {
            return Err("record attribute framing cut short");
        }
        let klen = read_u16(block, ATTR_KEY_LEN_AT) as usize;
        let vlen = read_u32(block, ATTR_VALUE_LEN_AT) as usize;
        let Some(end) = (ATTR_FRAME + klen).checked_add(vlen).filter(|&e| e <= block.len()) else {
            return Err("record attribute runs past its block");
        };
        let key = &block[ATTR_FRAME..ATTR_FRAME + klen];
        let value = &block[ATTR_FRAME + klen..end];
        if std::str::from_utf8(key).is_err() || std::str::from_utf8(value).is_err() {
            return Err("record attribute is not UTF-8");
        }
        block = &block[end..];
    }
    if !block.is_empty() {
        return Err("record attribute block longer than its attributes");
    }
    Ok(())
}

/// Writes a skip record stamped `timestamp_ns` over all of `dst`: at least
/// `SKIP_LEN` bytes, a multiple of `RECORD_ALIGN` (see "Skip records" above);
/// its body, if any, zeros.
pub(crate) fn encode_skip(dst: &mut [u8], timestamp_ns: u64) {
    debug_assert!(dst.len() >= SKIP_LEN && dst.len().is_multiple_of(RECORD_ALIGN));
    let mut header = [0u8; HEADER_LEN];
    header[LEN_AT..LEN_AT + 4].copy_from_slice(&(dst.len() as u32).to_le_bytes());
    header[KEY_LEN_AT..KEY_LEN_AT + 4].copy_from_slice(&NO_KEY.to_le_bytes());
    header[FLAGS_AT..FLAGS_AT + 2].copy_from_slice(&FLAG_SKIP.to_le_bytes());
    header[TIMESTAMP_AT..TIMESTAMP_AT + 8].copy_from_slice(&timestamp_ns.to_le_bytes());
    dst[..HEADER_LEN].copy_from_slice(&header);
    dst[HEADER_LEN..].fill(0);
}

/// Writes a compacted-away record stamped `timestamp_ns` over all of `dst`,
/// `COMPACTED_LEN` bytes (see "Compacted-away records" above).
pub(crate) fn encode_compacted(dst: &mut [u8], timestamp_ns: u64) {
    debug_assert_eq!(dst.len(), COMPACTED_LEN);
    encode_skip(dst, timestamp_ns);
    dst[FLAGS_AT..FLAGS_AT + 2].copy_from_slice(&FLAG_COMPACTED.to_le_bytes());
}

/// Bytes a compacted-away record of a durable segment takes: a bare header
/// and its run length (see "Compacted-away records" above).
pub(crate) const COMPACTED_RUN_LEN: usize = HEADER_LEN + 8;

/// Writes a compacted-away record of a durable segment over all of `dst`
/// (`COMPACTED_RUN_LEN` bytes): stamped `timestamp_ns`, standing for the
/// `run` offsets from its own, which recovery reads back with
/// [`compacted_run`] (see "Compacted-away records" above).
pub(crate) fn encode_compacted_run(dst: &mut [u8], timestamp_ns: u64, run: u64) {
    debug_assert!(dst.len() == COMPACTED_RUN_LEN && run > 0);
    let mut header = [0u8; HEADER_LEN];
    header[LEN_AT..LEN_AT + 4].copy_from_slice(&(COMPACTED_RUN_LEN as u32).to_le_bytes());
    header[KEY_LEN_AT..KEY_LEN_AT + 4].copy_from_slice(&NO_KEY.to_le_bytes());
    header[FLAGS_AT..FLAGS_AT + 2].copy_from_slice(&FLAG_COMPACTED.to_le_bytes());
    header[TIMESTAMP_AT..TIMESTAMP_AT + 8].copy_from_slice(&timestamp_ns.to_le_bytes());
    dst[..HEADER_LEN].copy_from_slice(&header);
    dst[HEADER_LEN..].copy_from_slice(&run.to_le_bytes());
}

/// How many offsets the record `bytes` (checked by [`check_encoded`])
/// stands for: `Ok(None)` for any record but a compacted-away one (one
/// offset), the run of a compacted-away one (one if it has no body, as in
/// an in-memory segment), or why its body is no run.
pub(crate) fn compacted_run(bytes: &[u8]) -> Result<Option<u64>, &'static str> {
    if read_u16(bytes, FLAGS_AT) != FLAG_COMPACTED {
        return Ok(None);
    }
    match &bytes[HEADER_LEN..] {
        [] => Ok(Some(1)),
        body if body.len() == 8 => match u64::from_le_bytes(body.try_into().expect("an 8-byte body")) {
            0 => Err("compacted-away record standing for no offset"),
            run => Ok(Some(run)),
        },
        _ => Err("compacted-away record whose body is not a run length"),
    }
}

/// Rounds a record length up to the record alignment.
#[inline]
pub(crate) const fn align_up(n: usize) -> usize {
    (n + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

#[inline]
fn read_u16(b: &[u8], at: usize) -> u16 {
    // One range check and one load: indexing byte by byte checked each byte
    // apart (see `read_u32`).
    let field: [u8; 2] = b[at..at + 2].try_into().expect("a 2-byte range is 2 bytes");
    u16::from_le_bytes(field)
}

#[inline]
fn read_u32(b: &[u8], at: usize) -> u32 {
    // One range check and one load. Indexed byte by byte, each byte had a
    // bounds check of its own, which LLVM kept (each panics differently),
    // several times the instructions a field (callgrind on
    // `examples/hotpath.rs fan-8` counts them).
    let field: [u8; 4] = b[at..at + 4].try_into().expect("a 4-byte range is 4 bytes");
    u32::from_le_bytes(field)
}

/// A committed record, borrowed from the segment that holds it.
///
/// No bytes are copied: every accessor returns a slice of the segment. The
/// view lives as long as the cursor or batch it came from.
#[derive(Clone, Copy)]
pub struct RecordView<'a> {
    offset: u64,
    /// The record's bytes, header included, padding excluded.
    bytes: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Views the record whose bytes (header included, padding excluded) are
    /// exactly `bytes`.
    ///
    /// The caller promises `bytes` is a record written by
    /// [`Record::encode_into`]. Lengths are still bounds-checked, so a broken
    /// promise panics rather than reading out of bounds.
    #[inline]
    pub(crate) fn from_bytes(offset: u64, bytes: &'a [u8]) -> Self {
        debug_assert_eq!(read_u32(bytes, LEN_AT) as usize, bytes.len());
        RecordView { offset, bytes }
    }

    #[cfg(test)]
    fn parse(offset: u64, bytes: &'a [u8]) -> Self {
        let len = read_u32(bytes, LEN_AT) as usize;
        Self::from_bytes(offset, &bytes[..len])
    }

    /// The record's offset in its partition.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// let log = Log::starting_at(&LogConfig::default(), 42)?;
    /// log.append(&Record::new(b"a"))?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("committed");
    /// assert_eq!(record.offset(), 42);
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes the record occupies in its segment, padding included.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// let published = Record::new(b"hello").with_key(b"k");
    /// log.append(&published)?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("committed");
    /// assert_eq!(record.encoded_len(), published.encoded_len()?);
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn encoded_len(&self) -> usize {
        align_up(self.bytes.len())
    }

    /// True for a record readers pass over: a skip record (an offset no
    /// record was completed for) or a compacted-away one; see "Skip
    /// records" and "Compacted-away records" in the module docs.
    #[inline]
    pub(crate) fn is_skip(&self) -> bool {
        read_u16(self.bytes, FLAGS_AT) & FLAGS_PASSED_OVER != 0
    }

    /// The record's bytes, header included, padding excluded: what a
    /// compaction copies into the segment that replaces this one.
    #[inline]
    pub(crate) fn raw_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// When it was published, in nanoseconds since the Unix epoch.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::clock::now_ns;
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    ///
    /// let before = now_ns();
    /// log.append(&Record::new(b"a"))?;
    /// let after = now_ns();
    /// let mut cursor = log.cursor_from_first();
    /// let stamped = cursor.read().expect("nothing was trimmed").expect("committed").timestamp_ns();
    /// assert!(before <= stamped && stamped <= after);
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn timestamp_ns(&self) -> u64 {
        let field: [u8; 8] = self.bytes[TIMESTAMP_AT..TIMESTAMP_AT + 8].try_into().expect("an 8-byte field");
        u64::from_le_bytes(field)
    }

    #[inline]
    fn key_len_field(&self) -> u32 {
        read_u32(self.bytes, KEY_LEN_AT)
    }

    #[inline]
    fn key_len(&self) -> usize {
        match self.key_len_field() {
            NO_KEY => 0,
            n => n as usize,
        }
    }

    #[inline]
    fn attrs_len(&self) -> usize {
        read_u32(self.bytes, ATTRS_LEN_AT) as usize
    }

    /// The key, or `None` for an unkeyed record.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a").with_key(b"customer-7"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// let batch = cursor.read_batch(2).expect("nothing was trimmed");
    /// assert_eq!(batch.iter().map(|r| r.key()).collect::<Vec<_>>(), [Some(&b"customer-7"[..]), None]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn key(&self) -> Option<&'a [u8]> {
        match self.key_len_field() {
            NO_KEY => None,
            n => Some(&self.bytes[HEADER_LEN..HEADER_LEN + n as usize]),
        }
    }

    /// The payload.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"hello").with_key(b"k").with_attributes(&[("a", "b")]))?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("committed");
    /// assert_eq!(record.payload(), b"hello");
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[HEADER_LEN + self.key_len() + self.attrs_len()..]
    }

    /// The attributes, in the order they were published.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"o-1").with_attributes(&[("region", "IN"), ("tier", "gold")]))?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("committed");
    /// let attrs: Vec<(&str, &str)> = record.attributes().collect();
    /// assert_eq!(attrs, [("region", "IN"), ("tier", "gold")]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn attributes(&self) -> Attributes<'a> {
        let start = HEADER_LEN + self.key_len();
        Attributes {
            block: &self.bytes[start..start + self.attrs_len()],
            remaining: read_u16(self.bytes, ATTR_COUNT_AT) as usize,
        }
    }

    /// The value of attribute `key`, if the record has it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"o-1").with_attributes(&[("region", "IN")]))?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("committed");
    /// assert_eq!((record.attribute("region"), record.attribute("tier")), (Some("IN"), None));
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn attribute(&self, key: &str) -> Option<&'a str> {
        self.attributes().get(key)
    }

    /// Every part at once, the header read a single time: for a caller that
    /// hands all of them over (the C library's `rill_message`), where the
    /// accessors above would each read and bounds-check the header again.
    /// The same checks as theirs: a record that is not what
    /// `Record::encode_into` wrote panics rather than reading out of bounds.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"hello").with_key(b"k").with_attributes(&[("region", "IN")]))?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("committed");
    /// let parts = record.parts();
    /// assert_eq!((parts.offset, parts.timestamp_ns), (0, record.timestamp_ns()));
    /// assert_eq!((parts.key, parts.attribute_count, parts.payload), (Some(&b"k"[..]), 1, &b"hello"[..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    #[inline]
    pub fn parts(&self) -> RecordParts<'a> {
        let bytes = self.bytes;
        // One bounds check for the whole header; the reads below are then
        // of a fixed-size array.
        let header: &[u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().expect("a record header");
        let u32_at = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
        let key_field = u32_at(KEY_LEN_AT);
        let attrs_len = u32_at(ATTRS_LEN_AT) as usize;
        let attribute_count = u16::from_le_bytes([header[ATTR_COUNT_AT], header[ATTR_COUNT_AT + 1]]) as usize;
        let mut timestamp = [0u8; 8];
        timestamp.copy_from_slice(&header[TIMESTAMP_AT..TIMESTAMP_AT + 8]);
        let key_len = if key_field == NO_KEY { 0 } else { key_field as usize };
        let (key, rest) = bytes[HEADER_LEN..].split_at(key_len);
        RecordParts {
            offset: self.offset,
            timestamp_ns: u64::from_le_bytes(timestamp),
            key: (key_field != NO_KEY).then_some(key),
            attribute_count,
            payload: &rest[attrs_len..],
        }
    }
}

/// A record's parts, decoded together by [`RecordView::parts`]; each field is
/// what the accessor of the same name returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordParts<'a> {
    /// [`RecordView::offset`].
    pub offset: u64,
    /// [`RecordView::timestamp_ns`].
    pub timestamp_ns: u64,
    /// [`RecordView::key`].
    pub key: Option<&'a [u8]>,
    /// The number of [`RecordView::attributes`].
    pub attribute_count: usize,
    /// [`RecordView::payload`].
    pub payload: &'a [u8],
}

impl fmt::Debug for RecordView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordView")
            .field("offset", &self.offset)
            .field("timestamp_ns", &self.timestamp_ns())
            .field("key", &self.key())
            .field("attributes", &self.attributes())
            .field("payload_len", &self.payload().len())
            .finish()
    }
}

/// An iterator over a record's attributes as `(key, value)` pairs; it reads
/// the encoded block in place and never allocates.
#[derive(Clone)]
pub struct Attributes<'a> {
    block: &'a [u8],
    remaining: usize,
}

impl<'a> Attributes<'a> {
    /// The value for `key`: the first pair with that key.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"o-1").with_attributes(&[("tier", "gold"), ("tier", "silver")]))?;
    /// let mut cursor = log.cursor_from_first();
    /// let record = cursor.read().expect("nothing was trimmed").expect("committed");
    /// assert_eq!(record.attributes().get("tier"), Some("gold")); // the first pair with the key
    /// assert_eq!(record.attributes().get("region"), None);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn get(self, key: &str) -> Option<&'a str> {
        self.into_iter().find_map(|(k, v)| (k == key).then_some(v))
    }

    /// True if the record carries no attributes.
    ///
    /// # Examples
    ///
    /// ```
    /// # use rill::log::{Log, LogConfig, Record};
    /// # let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b").with_attributes(&[("k", "v")])], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// let batch = cursor.read_batch(2).expect("nothing was trimmed");
    /// assert_eq!(batch.iter().map(|r| r.attributes().is_empty()).collect::<Vec<_>>(), [true, false]);
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }
}

impl<'a> Iterator for Attributes<'a> {
    type Item = (&'a str, &'a str);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let b = self.block;
        let klen = read_u16(b, ATTR_KEY_LEN_AT) as usize;
        let vlen = read_u32(b, ATTR_VALUE_LEN_AT) as usize;
        let key = &b[ATTR_FRAME..ATTR_FRAME + klen];
        let value = &b[ATTR_FRAME + klen..ATTR_FRAME + klen + vlen];
        self.block = &b[ATTR_FRAME + klen + vlen..];
        // SAFETY: attribute bytes are only ever written by `Record::encode_into`,
        // which copies them from `&str`s, so they are valid UTF-8; a segment is
        // never written again until every view of it is gone.
        Some(unsafe { (std::str::from_utf8_unchecked(key), std::str::from_utf8_unchecked(value)) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Attributes<'_> {}

impl fmt::Debug for Attributes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.clone()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `parts()` says what each accessor says.
    fn assert_parts_agree(v: &RecordView<'_>) {
        let p = v.parts();
        assert_eq!(p.offset, v.offset());
        assert_eq!(p.timestamp_ns, v.timestamp_ns());
        assert_eq!(p.key, v.key());
        assert_eq!(p.attribute_count, v.attributes().len());
        assert_eq!(p.payload, v.payload());
    }

    fn roundtrip(rec: &Record<'_>, ts: u64) -> Vec<u8> {
        let len = rec.encoded_len().unwrap();
        let mut buf = vec![0xAAu8; len];
        rec.encode_into(&mut buf, ts);
        buf
    }

    #[test]
    fn header_only_record_is_24_bytes() {
        let rec = Record::new(b"");
        assert_eq!(rec.encoded_len().unwrap(), HEADER_LEN);
        let buf = roundtrip(&rec, 7);
        let v = RecordView::parse(3, &buf);
        assert_eq!(v.offset(), 3);
        assert_eq!(v.timestamp_ns(), 7);
        assert_eq!(v.key(), None);
        assert!(v.payload().is_empty());
        assert!(v.attributes().is_empty());
        assert_parts_agree(&v);
    }

    #[test]
    fn empty_key_differs_from_no_key() {
        let buf = roundtrip(&Record::new(b"p").with_key(b""), 0);
        assert_eq!(RecordView::parse(0, &buf).key(), Some(&b""[..]));
        assert_eq!(RecordView::parse(0, &buf).parts().key, Some(&b""[..]));
    }

    #[test]
    fn all_parts_round_trip_and_padding_is_zeroed() {
        let attrs = [("region", "IN"), ("", ""), ("ключ", "значение")];
        let rec = Record::new(b"hello world").with_key(b"k1").with_attributes(&attrs);
        let buf = roundtrip(&rec, u64::MAX - 1);
        assert_eq!(buf.len() % RECORD_ALIGN, 0);
        let v = RecordView::parse(9, &buf);
        assert_eq!(v.key(), Some(&b"k1"[..]));
        assert_eq!(v.payload(), b"hello world");
        assert_eq!(v.timestamp_ns(), u64::MAX - 1);
        assert_eq!(v.attributes().collect::<Vec<_>>(), attrs.to_vec());
        assert_eq!(v.attribute("ключ"), Some("значение"));
        assert_eq!(v.attribute("missing"), None);
        assert_parts_agree(&v);
        assert_eq!(v.encoded_len(), buf.len());
        let raw = read_u32(&buf, 0) as usize;
        assert!(buf[raw..].iter().all(|&b| b == 0));
    }

    #[test]
    fn every_padding_length_is_zeroed_over_stale_bytes() {
        // Payload lengths 0..=17 cover each padding length (0..8) twice, with
        // and without a key, over a buffer full of stale bytes.
        let bytes: Vec<u8> = (1..=17).collect();
        for n in 0..=bytes.len() {
            for key in [None, Some(&b"abc"[..])] {
                let mut rec = Record::new(&bytes[..n]);
                rec.key = key;
                let buf = roundtrip(&rec, 0x0102_0304_0506_0708);
                let v = RecordView::parse(0, &buf);
                assert_parts_agree(&v);
                assert_eq!(v.payload(), &bytes[..n]);
                assert_eq!(v.key(), key);
                assert_eq!(v.timestamp_ns(), 0x0102_0304_0506_0708);
                assert_eq!(check_encoded(&buf[..read_u32(&buf, LEN_AT) as usize]), Ok(()));
                let raw = read_u32(&buf, LEN_AT) as usize;
                assert!(buf[raw..].iter().all(|&b| b == 0), "padding after {n} bytes, key {key:?}");
            }
        }
    }

    #[test]
    fn the_quick_length_agrees_with_the_checked_one() {
        let attrs = [("a", "bc")];
        let payload = [0u8; 40];
        for n in [0, 1, 7, 8, 9, 40] {
            for key in [None, Some(&b""[..]), Some(&b"key"[..])] {
                for attributes in [&[][..], &attrs[..]] {
                    let rec = Record { key, attributes, payload: &payload[..n], id: None };
                    assert_eq!(rec.encoded_len().unwrap(), rec.encoded_len_checked().unwrap(), "{rec:?}");
                }
            }
        }
    }

    /// The one-pass length of a record with attributes accepts exactly the
    /// records the checked one accepts, with the same length: ids given
    /// both ways, of every length near the limits, twice, and keys near
    /// theirs.
    #[test]
    fn the_one_pass_length_agrees_with_the_checked_one() {
        let long_key = "k".repeat(MAX_ATTRIBUTE_KEY_LEN);
        let too_long_key = "k".repeat(MAX_ATTRIBUTE_KEY_LEN + 1);
        let ids: Vec<String> = [0, 1, 2, MAX_ID_LEN - 1, MAX_ID_LEN, MAX_ID_LEN + 1].map(|n| "i".repeat(n)).to_vec();
        let mut lists: Vec<Vec<(&str, &str)>> = vec![
            vec![],
            vec![("a", "bc")],
            vec![("source", "sensor-17"), ("kind", "reading")],
            vec![("rill.ix", "x"), ("rill.i", "y"), ("rill.idd", "z")],
            vec![(long_key.as_str(), "v")],
            vec![(too_long_key.as_str(), "v")],
            vec![("", "")],
        ];
        for id in &ids {
            lists.push(vec![(ID_ATTRIBUTE, id.as_str())]);
            lists.push(vec![("a", "b"), (ID_ATTRIBUTE, id.as_str()), ("c", "d")]);
            lists.push(vec![(ID_ATTRIBUTE, id.as_str()), (ID_ATTRIBUTE, id.as_str())]);
        }
        let payload = [0u8; 40];
        let mut accepted = 0;
        for attributes in &lists {
            for id in ids.iter().map(|i| Some(i.as_str())).chain([None]) {
                for key in [None, Some(&b"key"[..])] {
                    for n in [0, 5, 40] {
                        let rec = Record { key, attributes, payload: &payload[..n], id };
                        let checked = rec.encoded_len_checked();
                        assert_eq!(rec.attributed_len(), checked.as_ref().ok().copied(), "{rec:?}");
                        assert_eq!(rec.encoded_len().ok(), checked.as_ref().ok().copied(), "{rec:?}");
                        accepted += usize::from(checked.is_ok());
                    }
                }
            }
        }
        // Both kinds of answer were compared.
        assert!(accepted > 0 && accepted < lists.len() * (ids.len() + 1) * 6);
        let many = vec![("k", "v"); MAX_ATTRIBUTES];
        for (attributes, id) in [(&many[..], None), (&many[..], Some("x")), (&many[1..], Some("x"))] {
            let rec = Record { attributes, id, ..Record::new(b"") };
            assert_eq!(
                rec.attributed_len(),
                rec.encoded_len_checked().ok(),
                "{} attributes, id {id:?}",
                attributes.len()
            );
        }
    }

    /// Every length `copy_short` splits by, and the ones around them,
    /// copies exactly the source over a destination of stale bytes.
    #[test]
    fn copy_short_copies_every_length() {
        let src: Vec<u8> = (1..=70).collect();
        for n in 0..=src.len() {
            let mut dst = vec![0xAA; n];
            copy_short(&mut dst, &src[..n]);
            assert_eq!(dst, src[..n], "{n} bytes");
        }
    }

    /// Attributes of every short length round-trip, beside an id.
    #[test]
    fn attributes_of_every_short_length_round_trip() {
        let text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        for n in 0..=40 {
            let attrs = [(&text[..n], &text[40 - n..40]), ("k", &text[..n])];
            let rec = Record::new(b"payload").with_key(b"key").with_attributes(&attrs).with_id("the-id");
            let buf = roundtrip(&rec, 1);
            assert_eq!(check_encoded(&buf[..read_u32(&buf, LEN_AT) as usize]), Ok(()));
            let v = RecordView::parse(0, &buf);
            let mut want = vec![(ID_ATTRIBUTE, "the-id")];
            want.extend(attrs);
            assert_eq!(v.attributes().collect::<Vec<_>>(), want, "{n} bytes");
            assert_eq!((v.key(), v.payload()), (Some(&b"key"[..]), &b"payload"[..]));
        }
    }

    #[test]
    fn first_of_duplicate_attribute_keys_wins() {
        let attrs = [("a", "1"), ("a", "2")];
        let buf = roundtrip(&Record::new(b"").with_attributes(&attrs), 0);
        assert_eq!(RecordView::parse(0, &buf).attribute("a"), Some("1"));
    }

    #[test]
    fn oversized_attribute_key_is_refused() {
        let long = "k".repeat(MAX_ATTRIBUTE_KEY_LEN + 1);
        let attrs = [(long.as_str(), "v")];
        let err = Record::new(b"").with_attributes(&attrs).encoded_len().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }
}
