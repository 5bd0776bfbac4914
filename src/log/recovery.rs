//! Recovery: rebuilding a durable partition from its segment files.
//!
//! # What a crash can leave, and what recovery keeps
//!
//! Files are read in base-offset order. Each must start where the previous
//! one's records end (offsets are dense), and each record must carry a frame
//! whose checksum covers its offset and bytes (`file.rs`). Recovery keeps
//! every record up to the first one that is missing, torn or damaged, and
//! nothing after it: a later record would leave a gap in the offsets.
//!
//! Where that first bad record is decides what recovery does:
//!
//! * In an *incomplete* file (no completion marker: the newest segments,
//!   whose records were still being written, or not yet synced, when the
//!   process or machine stopped) it is a **torn tail**, the expected result
//!   of a crash: a record whose publisher was still copying it (its frame is
//!   still zeros), or pages the kernel had not written back. The log is cut
//!   there; the cut, the records and the bytes dropped are reported
//!   ([`RecoveryReport`]), and the files after it are deleted.
//! * In a *complete* file (its header counts its records, written only after
//!   they were all on disk), or in a file whose header is damaged, or in a
//!   gap between files, no crash explains it: it is **damage**. The open
//!   fails with [`Error::Corrupt`] naming the file and the byte offset,
//!   changing nothing on disk, unless `repair` is set; then the log is cut
//!   there as for a torn tail, and the report says it was a repair.
//!
//! A file whose header page is all zeros, at the end, is one created just
//! before a crash: it holds nothing and is deleted. Spare files (trimmed
//! segment files kept for reuse, `file.rs`) are no part of the partition
//! and are deleted, whatever a crash left in them. Other files that are not
//! segment files (by name) are left alone.
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
//! The crash states of a recycling itself are in `file.rs`.
//!
//! Recovery never trusts a length it has not checked: a record is accepted
//! only if its frame checks and its layout parses (`record::check_encoded`),
//! so a reader of a recovered record can never be sent out of its bounds.
//!
//! After recovery every kept segment is sealed and marked complete (the cut
//! becomes permanent, and a later bit flip in them is damage); appends go to
//! a fresh segment file at the end offset.

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
    /// Where each kept record starts (after its frame), in the record region.
    pub(crate) positions: Vec<u64>,
    /// Bytes the kept records fill, frames included.
    pub(crate) used: u64,
    /// The file already had a completion marker for exactly these records.
    pub(crate) was_complete: bool,
}

/// What recovery found.
pub(crate) struct Recovered {
    pub(crate) kept: Vec<KeptSegment>,
    /// Where appends continue.
    pub(crate) end_offset: u64,
    pub(crate) report: RecoveryReport,
}

/// How the scan of one file's record region ended.
struct Scan {
    positions: Vec<u64>,
    /// Where the first record not kept starts (region offset).
    stop: u64,
    /// Why the scan stopped, unless it reached zeros (a clean end) or the
    /// completion marker's count.
    damage: Option<&'static str>,
}

/// Scans `region` (a segment's record region) from its start, for records
/// with offsets from `base`, at most `limit` of them.
fn scan(region: &[u8], base: u64, limit: u64) -> Scan {
    let mut positions = Vec::new();
    let mut p = 0usize;
    let damage = loop {
        if positions.len() as u64 >= limit {
            break None;
        }
        let Some(frame_bytes) = region.get(p..p + FRAME_LEN) else {
            break None;
        };
        let frame = u64::from_le_bytes(frame_bytes.try_into().expect("an 8-byte frame"));
        if frame == 0 {
            break None;
        }
        let at = p + FRAME_LEN;
        let Some(len_bytes) = region.get(at..at + 4) else {
            break Some("record cut short by the end of the file");
        };
        let len = u32::from_le_bytes(len_bytes.try_into().expect("a 4-byte length")) as usize;
        if len < record::HEADER_LEN {
            break Some("record length shorter than a record header");
        }
        let Some(padded_end) = at.checked_add(record::align_up(len)).filter(|&e| e <= region.len()) else {
            break Some("record runs past the end of the file");
        };
        let bytes = &region[at..at + len];
        let offset = base + positions.len() as u64;
        if let Err(why) = file::check_frame(frame, offset, bytes) {
            break Some(why);
        }
        if let Err(why) = record::check_encoded(bytes) {
            break Some(why);
        }
        positions.push(at as u64);
        p = padded_end;
    };
    Scan { positions, stop: p as u64, damage }
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
        } else if file::is_spare_file_name(name) {
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
        let limit = header.complete.map_or(u64::MAX, |(count, _)| count).min(MAX_SEGMENT_RECORDS as u64);
        let found = scan(region, header.base, limit);
        let count = found.positions.len() as u64;
        let complete_ok = header.complete.is_some_and(|(c, used)| c == count && used == found.stop);
        let recycled = header.generation > 0;
        // A scan of a complete file must find exactly its count; one of an
        // incomplete file may end early, at zeros, if nothing (of ours)
        // follows.
        let trouble = if header.complete.is_some() && !complete_ok {
            Some((found.damage.unwrap_or("records missing from a complete segment"), true))
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
        let was_complete = complete_ok;
        kept.push(KeptSegment {
            storage,
            base: header.base,
            positions: found.positions,
            used: found.stop,
            was_complete,
        });
    }
    if let Some(at) = &report.truncated_at
        && !report.repaired
    {
        log::warn!("truncating the torn tail of {} at byte {}: {}", at.file.display(), at.offset, at.reason);
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
    let region = &bytes[HEADER_BYTES..];
    match Header::decode(&bytes[..HEADER_BYTES]) {
        Ok(h) => {
            let found = scan(region, h.base, h.complete.map_or(u64::MAX, |(count, _)| count));
            report.truncated_records += found.positions.len() as u64;
            report.truncated_bytes += dropped_bytes(region, 0, found.stop, h.generation);
        }
        Err(_) => report.truncated_bytes += written_after(region, 0),
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
