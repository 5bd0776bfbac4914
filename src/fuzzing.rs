//! Internals the fuzz targets in `fuzz/` check against references. Built only
//! with the `fuzzing` feature; not part of rill's API.

use crate::broker::Pattern;
use crate::broker::names::PatternIndex;

/// Indexes `patterns` in the broker's pattern trie and matches `topic`
/// against them: the indexes of the matching patterns (ascending), how many
/// (trie node, segment) pairs the walk visited, and how many nodes the trie
/// has.
pub fn index_matches(patterns: &[Pattern], topic: &str) -> (Vec<usize>, usize, usize) {
    let mut index = PatternIndex::new();
    for (i, p) in patterns.iter().enumerate() {
        index.insert(p, i as u64, i);
    }
    let (found, visits) = index.matches_counting(topic);
    (found, visits, index.node_count())
}

/// Checks a topic name the way the broker does before creating a topic.
pub fn validate_topic(name: &str) -> crate::error::Result<()> {
    crate::broker::names::validate_topic(name)
}

/// What [`recover_segment`] found.
#[derive(Debug)]
pub struct RecoveredSegment {
    /// Records recovery kept and readers are handed (all read back field
    /// by field): skip records and compacted-away offsets are not among
    /// them.
    pub records: u64,
    /// Records whose frames the input had (or was given) in a row from the start.
    pub framed: u64,
}

/// Writes `input` as the one segment file of a partition in `scratch` (a
/// directory the caller owns; its segment files are replaced) and opens the
/// partition, reading every recovered record back field by field.
///
/// `input[0]` is a set of flags: bit 0 rewrites the frames of the records
/// the region's length fields describe, so their checksums pass and the
/// layout checks behind them are reached; bit 1 gives the file a
/// completion marker for those records (bit 2 miscounts it by one); bit 3
/// opens with `repair`; bit 4 makes the file a recycled one (generation 1),
/// whose bytes after its records may be a previous use's. The rest is the
/// record region.
pub fn recover_segment(scratch: &std::path::Path, input: &[u8]) -> crate::Result<RecoveredSegment> {
    use crate::log::{DurableLog, Fsync, Log, LogConfig, file, record};
    let flags = input.first().copied().unwrap_or(0);
    let mut region = input.get(1..).unwrap_or(&[]).to_vec();
    region.resize(record::align_up(region.len().max(file::FRAME_LEN)), 0);
    let mut framed = 0u64;
    let mut p = 0usize;
    if flags & 1 != 0 {
        while let Some(len) = region.get(p + file::FRAME_LEN..p + file::FRAME_LEN + 4) {
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let at = p + file::FRAME_LEN;
            let Some(end) = at.checked_add(record::align_up(len)).filter(|&e| e <= region.len()) else { break };
            if len < record::HEADER_LEN {
                break;
            }
            let frame = file::frame_for(framed, &region[at..at + len]);
            region[p..at].copy_from_slice(&frame.to_le_bytes());
            framed += 1;
            p = end;
        }
    }
    let complete = (flags & 2 != 0).then_some((framed + u64::from(flags & 4 != 0), p as u64));
    for entry in std::fs::read_dir(scratch).map_err(|e| crate::Error::io(scratch, &e))? {
        let path = entry.map_err(|e| crate::Error::io(scratch, &e))?.path();
        std::fs::remove_file(&path).map_err(|e| crate::Error::io(&path, &e))?;
    }
    let path = scratch.join(file::segment_file_name(0));
    std::fs::write(&path, file::segment_file_bytes(0, &region, complete, u64::from(flags & 16 != 0)))
        .map_err(|e| crate::Error::io(&path, &e))?;
    let config = LogConfig { segment_bytes: Some(4096), retention_bytes: None, ..LogConfig::default() };
    let durable = DurableLog { dir: scratch.to_path_buf(), fsync: Fsync::Never, repair: flags & 8 != 0 };
    let (log, report) = Log::open(&config, 0, &durable)?;
    assert_eq!(report.first_offset, 0);
    assert_eq!(report.end_offset, report.records);
    // Skip records (holes recovery filled) and compacted-away offsets (runs
    // a rebuilt file stands for) count among the offsets kept, and are read
    // by no one.
    let kept = report.records - report.skipped - report.compacted;
    assert!(kept <= framed || flags & 1 == 0, "more records kept than frames written");
    let mut cursor = log.cursor_from_first();
    let mut records = 0;
    let mut next = 0;
    let mut bytes = 0;
    while let Some(view) = cursor.read().expect("nothing is trimmed") {
        assert!(view.offset() >= next && view.offset() < report.end_offset);
        next = view.offset() + 1;
        let _ = view.timestamp_ns();
        bytes += view.key().map_or(0, <[u8]>::len) + view.payload().len();
        for (k, v) in view.attributes() {
            bytes += k.len() + v.len();
        }
        records += 1;
    }
    assert_eq!(records, kept);
    assert!(bytes <= region.len(), "recovered records lie inside the file's region");
    Ok(RecoveredSegment { records, framed })
}
