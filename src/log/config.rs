//! How a partition's log is sized and how much it retains: the user's
//! [`LogConfig`] and the checked sizes every log is built from.

use super::{record, segment};
use crate::error::{Error, Result};

/// Default retention of a partition: 256 MiB of segments.
pub const DEFAULT_RETENTION_BYTES: u64 = 256 << 20;
/// Default segment size, unless retention is small enough to call for less.
pub const DEFAULT_SEGMENT_BYTES: usize = 4 << 20;
/// Default largest record (encoded, header included).
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;
/// Smallest segment the log accepts.
#[cfg(not(loom))]
pub const MIN_SEGMENT_BYTES: usize = 4 << 10;
/// Smallest segment the log accepts (shrunk for loom models).
#[cfg(loom)]
pub const MIN_SEGMENT_BYTES: usize = 32;
/// Average record size the offset index is sized for: one slot per this many bytes.
const BYTES_PER_SLOT: usize = 32;
/// Region of an in-memory log's small first segment (see "A small first
/// segment" in `log/dir.rs`): room for about ten 64-byte messages.
pub(super) const FIRST_SEGMENT_BYTES: usize = 1 << 10;
/// Smallest configured segment for which an in-memory log starts with a
/// small first segment: below it a first segment costs a few pages at most,
/// and a log configured that small is one whose rolls the user sized.
pub(super) const SMALL_FIRST_FROM: usize = 64 << 10;
/// Spare segment buffers a partition keeps for reuse.
pub(super) const SPARE_SEGMENTS: usize = 2;

/// How a partition's log is sized and how much it retains.
///
/// # Examples
///
/// ```
/// use rill::log::{Log, LogConfig};
///
/// let config = LogConfig { segment_bytes: Some(64 << 10), retention_bytes: Some(1 << 20), ..LogConfig::default() };
/// let log = Log::new(&config)?;
/// assert_eq!(log.segment_bytes(), 64 << 10);
/// // A configuration that cannot work is refused.
/// let bad = LogConfig { segment_bytes: Some(1 << 20), retention_bytes: Some(1 << 20), ..LogConfig::default() };
/// assert!(matches!(Log::new(&bad), Err(rill::Error::InvalidArgument(_))));
/// # Ok::<(), rill::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Trim the oldest segments once the retained segments hold more than this
    /// many bytes. `None` keeps everything (memory is then unbounded).
    pub retention_bytes: Option<u64>,
    /// Trim the oldest segment whenever the newer ones still hold at least this
    /// many records. `None`: no limit by count.
    pub retention_messages: Option<u64>,
    /// Size of one segment's record region. `None` picks
    /// [`DEFAULT_SEGMENT_BYTES`], or a quarter of `retention_bytes` if smaller.
    pub segment_bytes: Option<usize>,
    /// Largest encoded record accepted. `None` picks
    /// [`DEFAULT_MAX_RECORD_BYTES`], or the segment size if smaller.
    pub max_record_bytes: Option<usize>,
    /// Trim the oldest segment once its newest record is older than this
    /// many milliseconds. `None` (or 0): no age limit. Checked at each
    /// rollover and by [`Log::expire`](super::Log::expire), which the broker
    /// calls from a timer so quiet partitions age out too.
    pub retention_ms: Option<u64>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            retention_bytes: Some(DEFAULT_RETENTION_BYTES),
            retention_messages: None,
            segment_bytes: None,
            max_record_bytes: None,
            retention_ms: None,
        }
    }
}

/// A `LogConfig` with every choice made and checked. The two fields every
/// append reads come first (`repr(C)`; see the log's `Shared`).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct Sizes {
    pub(super) max_record_bytes: usize,
    /// Bytes in front of each record: 0, or a durable log's checksum frame.
    pub(super) frame: u64,
    pub(super) segment_bytes: usize,
    pub(super) slots: usize,
    pub(super) retention_bytes: u64,
    pub(super) retention_messages: u64,
    /// The age limit in nanoseconds; `u64::MAX` for none.
    pub(super) retention_ns: u64,
}

impl Sizes {
    /// Size of a segment's record region: the configured segment size, plus
    /// one frame for a durable log so that every record that fits the
    /// segment size fits an empty segment with its frame.
    pub(super) fn region_bytes(&self) -> usize {
        self.segment_bytes + self.frame as usize
    }

    /// The region bytes and slots of an in-memory log's small first
    /// segment, if it starts with one: when its configured segments are
    /// at least [`SMALL_FIRST_FROM`] bytes (see "A small first segment" in
    /// `log/dir.rs`).
    pub(super) fn small_first(&self) -> Option<(usize, usize)> {
        (self.frame == 0 && self.segment_bytes >= SMALL_FIRST_FROM)
            .then(|| (FIRST_SEGMENT_BYTES, (FIRST_SEGMENT_BYTES / BYTES_PER_SLOT).min(self.slots)))
    }
}

impl LogConfig {
    /// Checks the configuration as `Log::new` would, without mapping a
    /// segment (the broker validates its default topic options this way).
    pub(crate) fn validate(&self) -> Result<()> {
        self.resolve().map(drop)
    }

    pub(super) fn resolve(&self) -> Result<Sizes> {
        let invalid = |what: String| Err(Error::InvalidArgument(what));
        let retention_bytes = self.retention_bytes.unwrap_or(u64::MAX);
        if retention_bytes < 2 * MIN_SEGMENT_BYTES as u64 {
            return invalid(format!("retention_bytes must be at least {} (two segments)", 2 * MIN_SEGMENT_BYTES));
        }
        let retention_messages = self.retention_messages.unwrap_or(u64::MAX);
        if retention_messages == 0 {
            return invalid("retention_messages must be at least 1".into());
        }
        let segment_bytes = match self.segment_bytes {
            Some(n) => {
                if !(MIN_SEGMENT_BYTES..=segment::MAX_SEGMENT_BYTES).contains(&n) {
                    return invalid(format!(
                        "segment_bytes must be between {MIN_SEGMENT_BYTES} and {}",
                        segment::MAX_SEGMENT_BYTES
                    ));
                }
                if (n as u64).saturating_mul(2) > retention_bytes {
                    return invalid(format!(
                        "segment_bytes {n} is more than half of retention_bytes {retention_bytes}"
                    ));
                }
                n
            }
            None => {
                let quarter = usize::try_from(retention_bytes / 4).unwrap_or(usize::MAX);
                DEFAULT_SEGMENT_BYTES.min(quarter).max(MIN_SEGMENT_BYTES)
            }
        };
        let segment_bytes = segment_bytes & !(record::RECORD_ALIGN - 1);
        let max_record_bytes = match self.max_record_bytes {
            Some(n) if n < record::HEADER_LEN || n > segment_bytes => {
                return invalid(format!(
                    "max_record_bytes must be between {} and the segment size {segment_bytes}",
                    record::HEADER_LEN
                ));
            }
            Some(n) => n,
            None => DEFAULT_MAX_RECORD_BYTES.min(segment_bytes),
        };
        let slots = (segment_bytes / BYTES_PER_SLOT).clamp(1, segment::MAX_SEGMENT_RECORDS);
        let retention_ns = match self.retention_ms {
            None | Some(0) => u64::MAX,
            Some(ms) => ms.saturating_mul(1_000_000),
        };
        Ok(Sizes {
            segment_bytes,
            slots,
            max_record_bytes,
            retention_bytes,
            retention_messages,
            frame: 0,
            retention_ns,
        })
    }
}
