//! Recovery: rebuilding a durable partition from its segment files.
//!
//! Why it is long: the essay below is a fifth of it, and the rest is one
//! pass over a partition's files (list them, check every record, cut or
//! refuse) whose every step is a rule the essay states.
//!
//! # What a crash can leave, and what recovery keeps
//!
//! Files are read in base-offset order. Each must start where the previous
//! one's records end (offsets are dense), and each record must carry a frame
//! whose checksum covers its offset and bytes (`file/format.rs`). In an incomplete
//! file a missing record with complete ones after it is a *hole*, which
//! recovery fills with skip records (see "Holes" below) and reads on; past
//! the last complete record, or anywhere in a complete file, recovery keeps
//! every record up to the first one that is missing, torn or damaged, and
//! nothing after it.
//!
//! Where that first bad record is decides what recovery does:
//!
//! * In an *incomplete* file (no completion marker: the newest segments,
//!   whose records were still being written, or not yet synced, when the
//!   process or machine stopped), with no complete record of ours after it,
//!   it is a **torn tail**, the expected result of a crash: a record whose
//!   publisher was still copying it (its frame is still zeros), or pages
//!   the kernel had not written back. The log is cut there; the cut, the
//!   records and the bytes dropped are reported ([`RecoveryReport`]), and
//!   the files after it are deleted. None of it was acknowledged under
//!   `Always`; under the other policies a torn tail drops only records
//!   never completed, since every complete one is kept.
//! * In a *complete* file (its header counts its records, written only after
//!   they were all committed and, unless the policy is `Never`, on disk), or
//!   in a file whose header is damaged, or in a gap between files, no crash
//!   explains it: it is **damage**. The open fails with [`Error::Corrupt`]
//!   naming the file and the byte offset, changing nothing on disk, unless
//!   `repair` is set; then the log is cut there as for a torn tail, and the
//!   report says it was a repair.
//!
//! Every sealed segment gets its marker within a flusher interval of its
//! seal, under every policy ("The completion marker" in `durable.rs`), so
//! after a process crash damage in any segment sealed that long before is
//! `Corrupt`, never a silent cut. *Under `Never`, a machine crash may
//! surface as `Corrupt`*: the marking round writes the marker in the page
//! cache without flushing anything, and the kernel may write the header
//! page back before some of the record pages it counts; recovery then finds
//! a complete file missing records, which no crash of the process can
//! leave, and reports it. `repair` cuts there, keeping the records before
//! it; `Never` promises nothing about a machine crash beyond that.
//!
//! A segment file is made under a temporary name and linked under its own
//! only once its header is written (`FileStorage::create`); a temporary
//! file a crash left is no part of the partition and is deleted. A file
//! whose header page is all zeros, at the end, is one a *machine* crash
//! left with its link on disk and not its header (with a policy that does
//! not flush), created just before: it holds nothing and is deleted. Spare
//! files (trimmed segment files kept for reuse, `file/mod.rs`) are no part of
//! the partition and are deleted, whatever a crash left in them. Other
//! files that are not segment files (by name) are left alone.
//!
//! # Recycled files
//!
//! The records of a fresh file end at a frame of zeros, and nothing but
//! zeros follows them unless a publisher was writing when the process
//! stopped: written bytes after the end are a torn record. A *recycled* file
//! (generation above 0 in its header) holds its previous use's bytes after
//! its records, so there:
//!
//! * a frame of zeros is the end of the records (the mark its sealer or the
//!   log's close wrote) and what follows is not looked at;
//! * a frame that does not check, at the end of an incomplete file, is a
//!   torn record of ours or a stale one of the previous use (recovery cannot
//!   tell which, and keeps neither): cut there like a torn tail, reported,
//!   with no bytes counted as dropped after the cut, since they are not
//!   this log's;
//! * a stale record is never kept: its frame's checksum covers an older
//!   offset than any this file's records can have.
//!
//! The crash states of a recycling itself are in `file/mod.rs`.
//!
//! # Holes
//!
//! Publishers to one partition reserve their offsets and bytes in order
//! but finish copying in any order, and a publish returns as soon as its
//! own record is committed (under `Interval` and `Never`; `Always` waits
//! for the dense durable prefix). So a kill can leave record `n` unwritten
//! (its frame zeros, or, in a recycled file, still the previous use's
//! bytes) while `n + 1 ..` are complete and acknowledged. Cutting at `n`
//! would lose them, and hand their offsets to new records on the next open.
//!
//! **On disk at each step.** A publisher writes its record's bytes, then
//! the frame with one aligned 8-byte store, then commits the slot; in a
//! process crash every store made is in the page cache. A missing record
//! is therefore a frame of zeros (or stale bytes), possibly with part of
//! its bytes after it: never a frame that checks. A record written but
//! torn (pages not written back before a machine crash, or a flipped bit)
//! has a frame that does not check: it is a hole too, never delivered.
//!
//! **Finding the next complete record.** At a frame that is zeros or does
//! not check, the scan of an incomplete file *resyncs*: it looks at every
//! 8-aligned word from `MIN_FRAMED` bytes on (each missing record took at
//! least that much room) up to `RESYNC_WINDOW` bytes on, for a frame mark
//! whose bytes parse as a record and whose checksum covers one of the
//! offsets `n + 1 ..= n + k`, `k` at most `MAX_HOLE_RECORDS` and at most
//! the bytes skipped over `MIN_FRAMED` (`resync::FrameSolver` tries them all
//! at a few instructions an offset). The first one found is the next
//! record, at offset `n + k`: the hole lost `k` offsets.
//!
//! **Clean end or hole.** In a fresh file only zeros follow the last
//! record, so a resync that finds nothing means the end (and written bytes
//! there are a torn tail). In a recycled file stale records follow, whose
//! checksums cover offsets below the file's base, never `n + 1 ..`; one
//! checks only by a collision of the 32-bit checksum, and the resync tries
//! many offsets at many words, so a record it finds in a recycled file must
//! also be *confirmed*: followed by a zero frame (an end mark), by a record
//! that checks at the next offset, or by another hole that resolves by the
//! same rule (at most `MAX_CONFIRM_HOLES` in a row). A stale record is then kept only if two checksums collide.
//! The price: in a recycled file, a single complete record between a hole
//! and the crash point, with stale bytes after it, cannot be told from a
//! stale one, and is dropped with the torn tail.
//!
//! **Filling a hole.** A hole of `k` offsets becomes `k` skip records
//! (`record.rs`), each a bare header and frame (`MIN_FRAMED` bytes) but the
//! last, whose zero body reaches the next record's frame: the records stay
//! contiguous, so the next recovery reads them as ordinary records of a
//! complete file. They are written (bytes, then frame, for each) once the
//! whole directory is judged, then flushed with the kept records before
//! the completion marker (`Log::open`), like any cut. A crash while they
//! are written leaves a shorter hole, filled again next time.
//!
//! **A hole at the end of a file.** A publisher may hold the last records
//! of a segment while another, whose reservation closed it, has rolled to
//! the next file and filled it. The next file's name then starts past this
//! file's records: the gap is offsets reserved here and never written. If
//! the next file is incomplete too (a complete one cannot follow a hole:
//! its marker waits for every earlier commit), and the gap fits in this
//! file's remaining room (`MIN_FRAMED` each) and is at most
//! `MAX_HOLE_RECORDS`, it becomes skip records after this file's last one;
//! the bytes after them, the unfinished records' remains, are not looked
//! at again (the completion marker ends the file before them).
//!
//! **Not in a complete file.** A completion marker is written only once
//! every record of the sealed segment is committed, so a complete file has
//! no hole: anything missing there is damage (`Corrupt`), as before.
//!
//! **Abandoned reservations.** In a log shared by processes a reservation
//! not committed within the abandon bound is given up by a live process,
//! which stores `ABANDONED` in its offset index slot (see "An abandoned
//! reservation" in `segment.rs`); the record's bytes are left as they
//! are, since its writer may still be writing them. That slot value is the
//! one thing recovery reads from the index: a record found at such an
//! offset, even one whose frame checks (its writer died between its frame
//! and its commit, or lost the race to the claim), becomes a skip record of
//! the same length, so a record readers passed over is never delivered
//! after a restart; a missing one is a hole, filled as above. The sync
//! rounds give such a segment no completion marker (`durable.rs`), so it is
//! always scanned as an incomplete file. After a process crash the index
//! is exact (the page cache is shared); after a machine crash under a
//! policy that did not write the index page back, a claim may be lost, and
//! a record whose writer had framed it whole may come back: one never
//! acknowledged, since its commit failed or never came.
//!
//! **Readers.** A skip record is committed in the rebuilt segment like any
//! record, and `Cursor` passes over it (a segment rebuilt over a hole says
//! so, and only there does a read look at a record's flags): no `Cursor`,
//! subscription, consumer, nor the C and Python faces above them, is ever
//! handed one. Offsets, the end offset and lag count it as the offset it is.
//!
//! # Compacted segments
//!
//! A compaction pass on a data directory replaces a sealed segment's file
//! by a rebuilt one (`file/rebuild.rs`): complete from its birth, its
//! records in offset order with gaps, each run of removed offsets one
//! compacted-away record whose body is the run's length (`record.rs`).
//! The scan gives such a record as many offsets as its run (their index
//! slots all name it, and readers pass over it), so the file's count and
//! used bytes check as any complete file's, and a run that reaches past
//! the count is damage. The report counts a run's offsets among the
//! records kept, and apart in `RecoveryReport::compacted`. A crash during a pass leaves the old file or the
//! whole new one under the segment's name, and perhaps the new one under
//! a temporary name, which is deleted like any temporary file. Nothing of
//! a pass's progress is read back: the next pass after an open maps the
//! whole log as dirty (see "Incremental passes" in `compact.rs`).
//!
//! Recovery never trusts a length it has not checked: a record is accepted
//! only if its frame checks and its layout parses (`record::check_encoded`),
//! so a reader of a recovered record can never be sent out of its bounds.
//!
//! After recovery every kept segment but perhaps the last is sealed and
//! marked complete (the cut becomes permanent, and a later bit flip in them
//! is damage); appends go on in the last file or in a fresh one at the end
//! offset, as follows.
//!
//! # Resuming the last file
//!
//! A log that started a fresh file at every open would grow by one segment
//! file per open and partition: a service restarted daily with a few
//! messages a day fills its retention with files that each hold a few
//! records (4.5 MiB of disk each by default), and the age of its oldest
//! record, not its bytes, would decide what retention removes. So the open
//! goes on appending in the newest file when nothing can be in it past the
//! records recovery kept:
//!
//! * recovery cut nothing and filled no hole, and the file has no
//!   completion marker (it was being written) and holds a record;
//! * the file's own tail word, which every reservation in it advanced (it
//!   lives in the file: "Where the state lives" in `segment.rs`), says
//!   exactly the records and bytes recovery kept, and its seal is not set.
//!
//! Then no byte past the kept records was ever granted to a publisher, so
//! nothing there is a torn record of this log or one a resync could take
//! for a record later: in a fresh file only zeros follow, in a recycled one
//! the previous use's bytes, which recovery treats as ever (the end mark a
//! close writes, "Recycled files" above). A clean close leaves exactly
//! that, and so does a process killed with no publish half done: its
//! stores are in the page cache. A reservation left unwritten shows in the
//! tail word, and the log goes on in a fresh file after the kept records,
//! as before. After a machine crash the tail word's page may be older than
//! the records' pages on disk; a record written past it, then, is either
//! complete (recovery keeps it, and the tail word no longer agrees) or torn
//! (recovery cuts it, and the first condition fails).
//!
//! The resumed segment is the log's newest, unsealed, with its slots and
//! tail word as recovery found them, and the durable watermark at the end
//! offset (its records are flushed first under the policies that flush);
//! it is marked complete when a roll seals it, as any segment
//! (`Durability::new` starts the marking at its base, not at the end).
//!
//! **Its earlier records stay checked.** A resumed file has no completion
//! marker, so without more a later crash would have its older records
//! judged as a crash leaves them: a flipped bit among records written days
//! before would read as a hole, skipped with a warning. So the open writes
//! the file's *checked prefix* (`file/format.rs`): its records, all whole.
//! Recovery scans a file's checked prefix as a complete file's records
//! (damage there is `Corrupt`, or cut by `repair`) and what follows as an
//! incomplete file's. A clean close of a log of one process writes the
//! prefix too (`Log::close_files`, at its broker's close), so damage in the
//! newest file after a clean close is `Corrupt` as in any sealed one.

use std::fs;
use std::path::{Path, PathBuf};

use super::durable::{Damage, RecoveryReport};
use super::file::{self, FRAME_LEN, FileStorage, HEADER_BYTES, Header, HeaderError};
use super::record;
use super::segment::{MAX_SEGMENT_BYTES, MAX_SEGMENT_RECORDS};
use crate::error::{Error, Result};

/// One segment file recovery keeps.
pub(crate) struct KeptSegment {
    pub(crate) storage: FileStorage,
    pub(crate) base: u64,
    /// Where each kept record starts (after its frame), in the record
    /// region: skip records included, those still to be written too.
    pub(crate) positions: Vec<u64>,
    /// Bytes the kept records fill, frames included.
    pub(crate) used: u64,
    /// The file already had a completion marker for exactly these records.
    pub(crate) was_complete: bool,
    /// Some of its records are skip records or compacted-away ones.
    pub(crate) skips: bool,
    /// Holes recovery writes skip records into before the file is used.
    fills: Vec<Fill>,
}

/// What recovery found.
pub(crate) struct Recovered {
    pub(crate) kept: Vec<KeptSegment>,
    /// Where appends continue.
    pub(crate) end_offset: u64,
    pub(crate) report: RecoveryReport,
}

/// Bytes the smallest record takes with its frame: a skip record's. A hole
/// that lost `k` offsets spans at least `k` times this, since each of its
/// records was reserved at least this much room.
const MIN_FRAMED: usize = FRAME_LEN + record::SKIP_LEN;
/// Most offsets one hole may have lost: the resync tries no more (each
/// offset tried is one more chance for a stale record to check by a
/// checksum collision).
const MAX_HOLE_RECORDS: u64 = 1 << 10;
/// How far past a hole's start the resync looks for the next complete
/// record: the bytes publishers still writing at the crash can have held.
const RESYNC_WINDOW: usize = 2 << 20;
/// Most holes in a row one confirmation in a recycled file looks through
/// (each resync may ask for one more): bounds the work, and the stack.
const MAX_CONFIRM_HOLES: u32 = 8;

/// A hole to fill with skip records: `count` of them for the offsets from
/// `first`, the first frame at region byte `at`, each a bare skip record but
/// the last, which reaches `end` (where the next kept record's frame is).
struct Fill {
    at: u64,
    end: u64,
    first: u64,
    count: u64,
    /// Stamp of the skip records: the record before the hole's (or after
    /// it, at a file's start), so timestamps stay in order around it.
    timestamp_ns: u64,
}

impl Fill {
    /// Where skip record `j` starts (its frame) and its length (padded).
    fn record(&self, j: u64) -> (u64, usize) {
        let frame_at = self.at + j * MIN_FRAMED as u64;
        let len = if j + 1 == self.count { self.end - frame_at - FRAME_LEN as u64 } else { record::SKIP_LEN as u64 };
        (frame_at, len as usize)
    }

    /// Writes the skip records into `region`: bytes first, then each frame
    /// (as a publisher does), so a crash in the middle leaves a shorter hole
    /// for the next recovery to fill.
    fn write(&self, region: &mut [u8]) {
        region[self.at as usize..self.end as usize].fill(0);
        for j in 0..self.count {
            let (frame_at, len) = self.record(j);
            let at = frame_at as usize + FRAME_LEN;
            record::encode_skip(&mut region[at..at + len], self.timestamp_ns);
            let frame = file::frame_for(self.first + j, &region[at..at + len]);
            region[frame_at as usize..at].copy_from_slice(&frame.to_le_bytes());
        }
    }
}

/// How the scan of one file's record region ended.
struct Scan {
    positions: Vec<u64>,
    /// Holes found between complete records, to fill.
    fills: Vec<Fill>,
    /// Skip records already in the file (an earlier recovery's).
    skipped: u64,
    /// Offsets the file's compacted-away records stand for (it is a
    /// compaction's rebuilt segment, `file/rebuild.rs`, if any).
    compacted: u64,
    /// Where the first record not kept starts (region offset).
    stop: u64,
    /// Why the scan stopped, unless it reached zeros (a clean end) or the
    /// completion marker's count.
    damage: Option<&'static str>,
    /// Stamp of the last record kept.
    last_timestamp: Option<u64>,
    /// The scan ended with a hole filled up to the next file's base.
    tail_filled: bool,
}

/// Whether a scan looks past a missing record for complete ones.
#[derive(Clone, Copy)]
enum Holes {
    /// No: a complete file has none (its marker waited for every commit).
    Never,
    /// Yes, in an incomplete file; `recycled` if it may hold a previous
    /// use's records after ours.
    Resync { recycled: bool },
}

/// A framed record in a region: where its bytes start, where it ends
/// (padded), and its bytes (header and body, padding excluded).
type Framed<'a> = (usize, usize, &'a [u8]);

/// The record framed at region byte `p` if its frame checks for `offset`
/// and its layout parses: where it starts, where it ends (padded), its
/// bytes. `Ok(None)` for a zero frame or no room for one; `Err` says why it
/// is not a record.
fn record_at(region: &[u8], p: usize, offset: u64) -> Result<Option<Framed<'_>>, &'static str> {
    let Some(frame_bytes) = region.get(p..p + FRAME_LEN) else {
        return Ok(None);
    };
    let frame = u64::from_le_bytes(frame_bytes.try_into().expect("an 8-byte frame"));
    if frame == 0 {
        return Ok(None);
    }
    let (at, end, bytes) = framed_bytes(region, p)?;
    file::check_frame(frame, offset, bytes)?;
    record::check_encoded(bytes)?;
    Ok(Some((at, end, bytes)))
}

/// The bytes the frame at region byte `p` claims (header and body, padding
/// excluded), where they start and where they end (padded), if they fit.
fn framed_bytes(region: &[u8], p: usize) -> Result<Framed<'_>, &'static str> {
    let at = p + FRAME_LEN;
    let Some(len_bytes) = region.get(at..at + 4) else {
        return Err("record cut short by the end of the file");
    };
    let len = u32::from_le_bytes(len_bytes.try_into().expect("a 4-byte length")) as usize;
    if len < record::HEADER_LEN {
        return Err("record length shorter than a record header");
    }
    let Some(padded_end) = at.checked_add(record::align_up(len)).filter(|&e| e <= region.len()) else {
        return Err("record runs past the end of the file");
    };
    Ok((at, padded_end, &region[at..at + len]))
}

/// Scans `region` (a segment's record region) from its start, for records
/// with offsets from `base`, at most `limit` of them; with `Holes::Resync`,
/// past holes too (see "Holes" in the module docs).
fn scan(region: &[u8], base: u64, limit: u64, holes: Holes, abandoned: &dyn Fn(u64) -> bool) -> Scan {
    let mut found = Scan {
        positions: Vec::new(),
        fills: Vec::new(),
        skipped: 0,
        compacted: 0,
        stop: 0,
        damage: None,
        last_timestamp: None,
        tail_filled: false,
    };
    let mut p = 0usize;
    found.damage = loop {
        let kept = found.positions.len() as u64;
        if kept >= limit {
            break None;
        }
        let offset = base + kept;
        let stopped = match record_at(region, p, offset) {
            // A record whose slot a live process gave up (see "Abandoned
            // reservations" above): a skip record of the same length.
            Ok(Some((_, end, bytes))) if abandoned(kept) => {
                let timestamp_ns =
                    found.last_timestamp.unwrap_or(record::RecordView::from_bytes(offset, bytes).timestamp_ns());
                let fill = Fill { at: p as u64, end: end as u64, first: offset, count: 1, timestamp_ns };
                found.positions.push(fill.record(0).0 + FRAME_LEN as u64);
                found.fills.push(fill);
                p = end;
                continue;
            }
            // A compacted-away record of a rebuilt file, standing for a run
            // of offsets (see "Compacted-away records" in `record.rs`).
            Ok(Some((at, end, bytes))) if record::compacted_run(bytes) != Ok(None) => {
                match record::compacted_run(bytes) {
                    Ok(Some(run)) if run <= limit - kept => {
                        found.compacted += run;
                        found.last_timestamp = Some(record::RecordView::from_bytes(offset, bytes).timestamp_ns());
                        found.positions.extend(std::iter::repeat_n(at as u64, run as usize));
                        p = end;
                        continue;
                    }
                    Ok(_) => Some("compacted-away record standing for offsets past the segment's count"),
                    Err(why) => Some(why),
                }
            }
            Ok(Some((at, end, bytes))) => {
                let view = record::RecordView::from_bytes(offset, bytes);
                found.skipped += u64::from(view.is_skip());
                found.last_timestamp = Some(view.timestamp_ns());
                found.positions.push(at as u64);
                p = end;
                continue;
            }
            Ok(None) => None,
            Err(why) => Some(why),
        };
        let Holes::Resync { recycled } = holes else { break stopped };
        let most = (limit - kept).saturating_sub(1).min(MAX_HOLE_RECORDS);
        let Some(next) = resync(region, p, offset, most, recycled.then_some(MAX_CONFIRM_HOLES)) else {
            break stopped;
        };
        let fill = Fill {
            at: p as u64,
            end: next.at as u64,
            first: offset,
            count: next.offset - offset,
            timestamp_ns: found.last_timestamp.unwrap_or(next.timestamp_ns),
        };
        for j in 0..fill.count {
            found.positions.push(fill.record(j).0 + FRAME_LEN as u64);
        }
        found.fills.push(fill);
        p = next.at;
    };
    found.stop = p as u64;
    found
}

/// A complete record the resync found past a hole.
struct Resynced {
    /// Region byte of its frame.
    at: usize,
    offset: u64,
    timestamp_ns: u64,
}

/// Looks past the missing record at region byte `from` (offset `first`)
/// for the next complete record: a frame, at an 8-aligned byte at most
/// `RESYNC_WINDOW` on, whose checksum covers one of the `most` offsets
/// after `first` that fit in the bytes skipped (each missing record took at
/// least `MIN_FRAMED`). In a recycled file (`confirm` is how many more
/// holes a confirmation may look through) the record found must be
/// confirmed: followed by a zero frame, a record at the next offset, or
/// another hole this rule resolves (see "Holes" in the module docs).
fn resync(region: &[u8], from: usize, first: u64, most: u64, confirm: Option<u32>) -> Option<Resynced> {
    if most == 0 {
        return None;
    }
    let window_end = region.len().min(from.saturating_add(RESYNC_WINDOW));
    let mut solver = super::resync::FrameSolver::new(first + 1, most);
    let mut q = from + MIN_FRAMED;
    while q + FRAME_LEN <= window_end {
        let frame = u64::from_le_bytes(region[q..q + FRAME_LEN].try_into().expect("an 8-byte frame"));
        // Most words are not frames: one compare passes over them.
        if file::has_frame_mark(frame)
            && let Ok((_, end, bytes)) = framed_bytes(region, q)
            && record::check_encoded(bytes).is_ok()
            && let Some(offset) = solver.solve(frame, bytes, ((q - from) / MIN_FRAMED) as u64)
            && confirm.is_none_or(|holes| confirmed(region, end, offset + 1, holes))
        {
            let timestamp_ns = record::RecordView::from_bytes(offset, bytes).timestamp_ns();
            return Some(Resynced { at: q, offset, timestamp_ns });
        }
        q += record::RECORD_ALIGN;
    }
    None
}

/// True if what follows a record found by a resync in a recycled file, at
/// region byte `p`, shows it is ours (see `resync`), looking through at
/// most `holes` more holes.
fn confirmed(region: &[u8], p: usize, offset: u64, holes: u32) -> bool {
    match record_at(region, p, offset) {
        Ok(_) => true,
        Err(_) => holes > 0 && resync(region, p, offset, MAX_HOLE_RECORDS, Some(holes - 1)).is_some(),
    }
}

/// Bytes of `region` from `from` up to its last non-zero byte: how much
/// written data a cut at `from` drops.
fn written_after(region: &[u8], from: u64) -> u64 {
    let tail = region.get(from as usize..).unwrap_or(&[]);
    tail.iter().rposition(|&b| b != 0).map_or(0, |i| i as u64 + 1)
}

/// Bytes of `region` a cut at `from` drops: up to its last non-zero byte
/// in a fresh file, only the intact records up to `stop` in a recycled one
/// (the bytes after its records are a previous use's, not this log's).
fn dropped_bytes(region: &[u8], from: u64, stop: u64, generation: u64) -> u64 {
    if generation == 0 { written_after(region, from) } else { stop.saturating_sub(from) }
}

/// A directory's segment files (base offset and path, by base offset) and
/// its spare files.
type Listing = (Vec<(u64, PathBuf)>, Vec<PathBuf>);

/// The segment files in `dir`, by base offset, and its spare files.
fn list(dir: &Path) -> Result<Listing> {
    let io = |e: std::io::Error| Error::io(dir, &e);
    let mut files = Vec::new();
    let mut spares = Vec::new();
    for entry in fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(base) = file::parse_segment_file_name(name) {
            files.push((base, entry.path()));
        } else if file::is_spare_file_name(name) || file::is_free_file_name(name) || file::is_temp_file_name(name) {
            spares.push(entry.path());
        }
    }
    files.sort();
    Ok((files, spares))
}

/// Recovers the partition in `dir` (see the module docs).
pub(crate) fn recover(dir: &Path, repair: bool) -> Result<Recovered> {
    let (files, spares) = list(dir)?;
    let mut report = RecoveryReport::default();
    let mut kept: Vec<KeptSegment> = Vec::new();
    let mut expected: Option<u64> = None;
    // Where the previous file's records end, if it is incomplete: a later
    // file that does not start there means records lost to a crash between
    // them (the previous file's last ones never written), a torn tail.
    let mut prev_end_if_incomplete: Option<Damage> = None;
    // Set at the cut: every file from then on is dropped. Nothing is deleted
    // before the whole directory has been judged, so an open that fails
    // with `Corrupt` changes nothing.
    let mut cut = false;
    let mut deletes: Vec<PathBuf> = spares;
    let n_files = files.len();
    // Each file's successor's base (by its name), if that one is incomplete
    // too: where a hole at the end of an incomplete file must end (see
    // "Holes"). A complete successor after a gap is damage, as before:
    // markers are written in offset order, so none follows a hole.
    let next_bases: Vec<Option<u64>> = (0..n_files)
        .map(|i| files.get(i + 1).filter(|(_, path)| !is_complete_file(path)).map(|(base, _)| *base))
        .collect();
    // A file of another format version is refused before anything is
    // judged (or, with `repair`, cut): it is not damage, and reading it as
    // this version's would misread it.
    for (_, path) in &files {
        refuse_foreign_version(path)?;
    }
    // If nothing is kept, appends continue at the first file's base (its
    // name), so offsets never go back below what was handed out before.
    let start = files.first().map_or(0, |(base, _)| *base);
    for (i, (name_base, path)) in files.into_iter().enumerate() {
        if cut {
            if is_complete_file(&path) && !report.repaired {
                // A complete segment after a torn one: the tear is not a
                // crash's (completion markers are written in offset order).
                let torn = report.truncated_at.take().expect("a cut has a place");
                damage_or_repair(torn, repair, &mut report)?;
            }
            count_dropped(&path, &mut report);
            deletes.push(path);
            continue;
        }
        let is_last = i + 1 == n_files;
        if is_last && is_blank_stub(&path) {
            // Created just before a crash, before its header was written.
            deletes.push(path);
            continue;
        }
        let storage = match FileStorage::open_existing(&path) {
            Ok(s) => s,
            Err(Error::Corrupt { offset, reason, .. }) => {
                let damage = Damage { file: path.clone(), offset, reason };
                damage_or_repair(damage, repair, &mut report)?;
                cut = true;
                count_dropped(&path, &mut report);
                deletes.push(path);
                continue;
            }
            Err(e) => return Err(e),
        };
        let bytes = storage.bytes();
        let header = match Header::decode(&bytes[..HEADER_BYTES]) {
            Ok(h) if h.base != name_base => Err("segment header names another base offset than the file name"),
            // The segment built over the file must keep the tail word's
            // invariants (`segment.rs`), whatever the header claims.
            Ok(h) if h.capacity > (MAX_SEGMENT_BYTES + FRAME_LEN) as u64 => {
                Err("segment header's capacity is out of range")
            }
            Ok(h) if h.slots == 0 || h.slots > MAX_SEGMENT_RECORDS as u64 => {
                Err("segment header's offset index size is out of range")
            }
            Ok(h) if expected.is_some_and(|e| h.base < e) => Err("segment overlaps the previous one"),
            // A gap is a crash's only after an incomplete file and before
            // another one (markers are written in offset order).
            Ok(h)
                if expected.is_some_and(|e| h.base > e)
                    && (prev_end_if_incomplete.is_none() || h.complete.is_some()) =>
            {
                Err("segment does not start where the previous one ends")
            }
            Ok(h) => Ok(h),
            Err(HeaderError::Blank) if is_last => {
                // Created just before a crash: nothing in it.
                drop(storage);
                deletes.push(path);
                continue;
            }
            Err(HeaderError::Blank) => Err("blank segment header"),
            // Refused above, before the loop; the file changed since.
            Err(HeaderError::Version(found)) => return Err(foreign_version_error(&path, found)),
            Err(HeaderError::Damaged(why)) => Err(why),
        };
        let header = match header {
            Ok(h) if expected.is_some_and(|e| h.base > e) => {
                let mut torn = prev_end_if_incomplete.take().expect("checked just above");
                torn.reason = "records missing before the next segment (torn by a crash)".into();
                report.truncated_at = Some(torn);
                cut = true;
                drop(storage);
                count_dropped(&path, &mut report);
                deletes.push(path);
                continue;
            }
            Ok(h) => h,
            Err(why) => {
                let damage = Damage { file: path.clone(), offset: 0, reason: why.into() };
                damage_or_repair(damage, repair, &mut report)?;
                cut = true;
                drop(storage);
                count_dropped(&path, &mut report);
                deletes.push(path);
                continue;
            }
        };
        if expected.is_none() {
            report.first_offset = header.base;
        }
        // Never more than a segment can hold, whatever the header claims:
        // the segment built over it must keep the tail word's invariants.
        let region_len = (bytes.len() - HEADER_BYTES).min(header.capacity as usize).min(MAX_SEGMENT_BYTES + FRAME_LEN);
        let region = &bytes[HEADER_BYTES..HEADER_BYTES + region_len];
        // Nor more than the file's offset index holds.
        let limit = header.complete.map_or(u64::MAX, |(count, _)| count).min(header.slots);
        let recycled = header.generation > 0;
        let holes = if header.complete.is_some() { Holes::Never } else { Holes::Resync { recycled } };
        // The one thing recovery reads from the offset index: a slot given
        // up as abandoned (see "Abandoned reservations" above).
        let index_at = file::index_at(header.capacity) as usize;
        let abandoned = |i: u64| {
            let at = index_at + i as usize * file::SLOT_BYTES;
            i < header.slots
                && bytes.get(at..at + file::SLOT_BYTES).is_some_and(|b| {
                    u32::from_ne_bytes(b.try_into().expect("a slot's bytes")) == super::segment::ABANDONED
                })
        };
        // The records of a checked prefix are judged as a complete file's:
        // damage among them is damage, never a hole or a torn tail (see
        // "Resuming the last file" above); what follows is judged as ever.
        let prefix = header.complete.is_none().then(|| header.checked_prefix(&bytes[..HEADER_BYTES])).flatten();
        let prefix_damage = prefix.and_then(|(count, used)| {
            let checked = scan(region, header.base, count.min(limit), Holes::Never, &abandoned);
            let whole = checked.positions.len() as u64 == count && checked.stop == used;
            (!whole).then(|| {
                let why = checked.damage.unwrap_or("records missing from the segment's checked prefix");
                (checked, why)
            })
        });
        let (mut found, prefix_why) = match prefix_damage {
            Some((checked, why)) => (checked, Some(why)),
            None => (scan(region, header.base, limit, holes, &abandoned), None),
        };
        if header.complete.is_none() && prefix_why.is_none() {
            fill_tail_hole(&mut found, region.len(), header.base, limit, next_bases[i]);
        }
        let count = found.positions.len() as u64;
        let complete_ok = header.complete.is_some_and(|(c, used)| c == count && used == found.stop);
        // A scan of a complete file must find exactly its count; one of an
        // incomplete file may end early, at zeros, if nothing (of ours)
        // follows.
        let trouble = if let Some(why) = prefix_why {
            Some((why, true))
        } else if header.complete.is_some() && !complete_ok {
            Some((found.damage.unwrap_or("records missing from a complete segment"), true))
        } else if header.complete.is_none() && found.tail_filled {
            // The bytes after are the unfinished records' own remains.
            None
        } else if header.complete.is_none() && recycled {
            found.damage.map(|_| ("torn record, or a stale one of the recycled file's previous use", false))
        } else if header.complete.is_none() && (found.damage.is_some() || written_after(region, found.stop) > 0) {
            Some((found.damage.unwrap_or("torn record (no frame)"), false))
        } else {
            None
        };
        if let Some((why, sealed)) = trouble {
            let damage = Damage { file: path.clone(), offset: HEADER_BYTES as u64 + found.stop, reason: why.into() };
            if sealed {
                damage_or_repair(damage, repair, &mut report)?;
            } else {
                report.truncated_at = Some(damage);
            }
            report.truncated_records += intact_after(region, found.stop, header.base + count, limit - count, recycled);
            report.truncated_bytes += dropped_bytes(region, found.stop, found.stop, header.generation);
            cut = true;
        }
        expected = Some(header.base + count);
        prev_end_if_incomplete = (!complete_ok).then(|| Damage {
            file: path.clone(),
            offset: HEADER_BYTES as u64 + found.stop,
            reason: String::new(),
        });
        if count == 0 {
            drop(storage);
            deletes.push(path);
            continue;
        }
        report.segments += 1;
        report.records += count;
        let filled: u64 = found.fills.iter().map(|f| f.count).sum();
        report.skipped += found.skipped + filled;
        report.compacted += found.compacted;
        let was_complete = complete_ok;
        let storage = if storage.has_index() {
            storage
        } else {
            // Cut short (the scan above read what is there): its offset
            // index, after the region, is to be zeros again.
            drop(storage);
            FileStorage::restore_length(&path, &header)?;
            FileStorage::open_existing(&path)?
        };
        kept.push(KeptSegment {
            storage,
            base: header.base,
            positions: found.positions,
            used: found.stop,
            was_complete,
            skips: found.skipped + filled + found.compacted > 0,
            fills: found.fills,
        });
    }
    if let Some(at) = &report.truncated_at
        && !report.repaired
    {
        log::warn!("truncating the torn tail of {} at byte {}: {}", at.file.display(), at.offset, at.reason);
    }
    // Judged: now the holes are filled (made durable with the rest of the
    // kept records before their completion marker, in `Log::open`).
    for seg in &mut kept {
        for fill in &seg.fills {
            log::warn!(
                "{}: offsets {}..{} were never written (a crash left a hole): recovery writes skip records for them",
                seg.storage.path().display(),
                fill.first,
                fill.first + fill.count
            );
            fill.write(seg.storage.region_mut());
        }
    }
    for path in &deletes {
        log::info!("removing segment file {} (a spare, after the cut, empty, or blank)", path.display());
        match fs::remove_file(path) {
            // A spare of this directory's previous log, deleted meanwhile by
            // that log's last segment going away.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.map_err(|e| Error::io(path, &e))?,
        }
    }
    let end_offset = expected.unwrap_or(start);
    report.end_offset = end_offset;
    if kept.is_empty() {
        report.first_offset = end_offset;
    }
    Ok(Recovered { kept, end_offset, report })
}

/// If the next file starts past this incomplete file's records (by
/// `next_base`), the offsets between were reserved in this file and never
/// written: fills them with skip records after its last one, if they fit
/// (see "Holes" in the module docs).
fn fill_tail_hole(found: &mut Scan, region_len: usize, base: u64, limit: u64, next_base: Option<u64>) {
    let end = base + found.positions.len() as u64;
    let Some(gap) = next_base.and_then(|n| n.checked_sub(end)).filter(|&g| g > 0 && g <= MAX_HOLE_RECORDS) else {
        return;
    };
    let room = (region_len as u64).saturating_sub(found.stop);
    if found.positions.len() as u64 + gap > limit || gap * MIN_FRAMED as u64 > room {
        return;
    }
    let fill = Fill {
        at: found.stop,
        end: found.stop + gap * MIN_FRAMED as u64,
        first: end,
        count: gap,
        timestamp_ns: found.last_timestamp.unwrap_or(0),
    };
    for j in 0..gap {
        found.positions.push(fill.record(j).0 + FRAME_LEN as u64);
    }
    found.stop = fill.end;
    found.damage = None;
    found.tail_filled = true;
    found.fills.push(fill);
}

/// The intact records after the damaged or missing one at region byte
/// `stop` (offset `first`) of a file that holds at most `limit` records
/// from there: what a cut there drops besides the damage, found as a scan
/// finds records past a hole (`resync`, so only within its window of the
/// damage).
fn intact_after(region: &[u8], stop: u64, first: u64, limit: u64, recycled: bool) -> u64 {
    let most = limit.saturating_sub(1).min(MAX_HOLE_RECORDS);
    let confirm = recycled.then_some(MAX_CONFIRM_HOLES);
    let Some(next) = resync(region, stop as usize, first, most, confirm) else { return 0 };
    let rest = limit - (next.offset - first);
    let found = scan(&region[next.at..], next.offset, rest, Holes::Resync { recycled }, &|_| false);
    let holes: u64 = found.fills.iter().map(|f| f.count).sum();
    (found.positions.len() as u64).saturating_sub(holes + found.compacted)
}

/// Fails with `Corrupt` for `damage`, unless `repair`: then records the cut.
fn damage_or_repair(damage: Damage, repair: bool, report: &mut RecoveryReport) -> Result<()> {
    if !repair {
        return Err(Error::Corrupt { file: damage.file, offset: damage.offset, reason: damage.reason });
    }
    log::warn!("repair: truncating partition at {} byte {}: {}", damage.file.display(), damage.offset, damage.reason);
    report.truncated_at = Some(damage);
    report.repaired = true;
    Ok(())
}

/// Counts what a file dropped after the cut held: its intact records (from
/// its start, as far as they check) and its written bytes.
fn count_dropped(path: &Path, report: &mut RecoveryReport) {
    let Ok(storage) = FileStorage::open_existing(path) else { return };
    let bytes = storage.bytes();
    let header = Header::decode(&bytes[..HEADER_BYTES]);
    // The record region only, not the offset index after it.
    let region_len = header.as_ref().map_or(usize::MAX, |h| h.capacity as usize).min(bytes.len() - HEADER_BYTES);
    let region = &bytes[HEADER_BYTES..HEADER_BYTES + region_len];
    match header {
        Ok(h) => {
            let found = scan(region, h.base, h.complete.map_or(u64::MAX, |(count, _)| count), Holes::Never, &|_| false);
            report.truncated_records += found.positions.len() as u64;
            report.truncated_bytes += dropped_bytes(region, 0, found.stop, h.generation);
        }
        Err(_) => report.truncated_bytes += written_after(region, 0),
    }
}

/// Fails if the file at `path` is a segment file of another format version
/// than this build's (see `file::VERSION`).
fn refuse_foreign_version(path: &Path) -> Result<()> {
    use std::io::Read;
    let mut start = [0u8; 12];
    let read = fs::File::open(path).and_then(|mut f| f.read_exact(&mut start));
    match read.ok().and_then(|()| Header::foreign_version(&start)) {
        Some(found) => Err(foreign_version_error(path, found)),
        None => Ok(()),
    }
}

/// The error for a segment file of format version `found`.
fn foreign_version_error(path: &Path, found: u32) -> Error {
    Error::Corrupt {
        file: path.to_path_buf(),
        offset: file::VERSION_AT as u64,
        reason: format!(
            "segment file format version {found}, but this build of rill reads only version {}: \
             open the directory with the rill that wrote it (nothing was changed, and `repair` does not apply)",
            file::VERSION
        ),
    }
}

/// True if `path` is a segment file whose header has a valid completion marker.
fn is_complete_file(path: &Path) -> bool {
    FileStorage::open_existing(path)
        .ok()
        .and_then(|s| Header::decode(&s.bytes()[..HEADER_BYTES]).ok())
        .is_some_and(|h| h.complete.is_some())
}

/// True if `path` is shorter than a header and holds only zeros: a file
/// whose creation a crash interrupted.
fn is_blank_stub(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.len() < HEADER_BYTES as u64)
        && fs::read(path).is_ok_and(|b| b.iter().all(|&x| x == 0))
}
