//! Where a reader of a [`Log`] starts: cursors at an offset, at either end,
//! or resuming, and the offset of a time.

use super::Log;
use super::cursor::Cursor;
use super::segment::Segment;
use crate::error::Result;
use crate::sync::epoch;

impl Log {
    /// A cursor positioned at `offset`, which must be retained:
    /// `first_offset() <= offset <= end_offset()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::Error;
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_at(1)?;
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"b"[..]));
    /// assert!(matches!(log.cursor_at(3), Err(Error::OutOfRange { first: 0, end: 2, .. })));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn cursor_at(&self, offset: u64) -> Result<Cursor> {
        let mut c = Cursor::new(self.shared.clone(), offset);
        c.seek(offset)?;
        Ok(c)
    }

    /// A cursor that continues from `offset`, a position handed out earlier
    /// (for example a durable subscription's). If retention has trimmed it
    /// meanwhile, the first read reports the records missed ([`Lagged`](super::Lagged));
    /// an offset past the end is clamped to the end.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Lagged, Log, LogConfig, Record};
    ///
    /// // Two small segments retained: older records are trimmed.
    /// let config = LogConfig { segment_bytes: Some(4096), retention_bytes: Some(8192), ..LogConfig::default() };
    /// let log = Log::new(&config)?;
    /// for _ in 0..200 {
    ///     log.append(&Record::new(&[7; 100]))?;
    /// }
    /// let first = log.first_offset();
    /// let mut cursor = log.cursor_resuming(0); // a position saved before the trim
    /// assert_eq!(cursor.read().err(), Some(Lagged { missed: first, resumed_at: first }));
    /// assert_eq!(log.cursor_resuming(500).offset(), 200); // clamped to the end
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn cursor_resuming(&self, offset: u64) -> Cursor {
        Cursor::new(self.shared.clone(), offset.min(self.end_offset()))
    }

    /// A cursor at the oldest retained record.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::starting_at(&LogConfig::default(), 10)?;
    /// log.append(&Record::new(b"a"))?;
    /// let mut cursor = log.cursor_from_first();
    /// assert_eq!(cursor.offset(), 10);
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"a"[..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn cursor_from_first(&self) -> Cursor {
        let mut c = Cursor::new(self.shared.clone(), 0);
        c.seek_to_first();
        c
    }

    /// A cursor at the end: it reads only records appended from now on.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append(&Record::new(b"old"))?;
    /// let mut cursor = log.cursor_from_end();
    /// log.append(&Record::new(b"new"))?;
    /// assert_eq!(cursor.read().expect("nothing was trimmed").map(|r| r.payload()), Some(&b"new"[..]));
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn cursor_from_end(&self) -> Cursor {
        let mut c = Cursor::new(self.shared.clone(), 0);
        c.seek_to_end();
        c
    }

    /// The first retained offset whose record was stamped at or after
    /// `timestamp_ns` (nanoseconds since the Unix epoch), or the end offset
    /// if every retained record is older; the oldest retained offset if the
    /// time is before them all.
    ///
    /// It costs two binary searches, `O(log segments + log records in one
    /// segment)`: over the segments by the timestamp of their first record,
    /// then inside the one segment where the time falls.
    ///
    /// # When timestamps are out of order
    ///
    /// A publisher stamps a record just before it reserves its offset, so
    /// records published at once from several threads can be stamped out of
    /// offset order by the time between the two (publishing from one thread,
    /// they are in order). The search treats timestamps as sorted, and what
    /// it finds is then defined as: an offset `o` where the record before
    /// `o` (if any is retained) was stamped before `timestamp_ns` and the
    /// record at `o` (if any) at or after it. With ordered timestamps that is
    /// the first such record; with a few out of order, it is one of the
    /// places where the stamps cross the time, within the disorder around
    /// it: a record stamped a little before the time may follow it, and one
    /// stamped a little after it may precede it. A record still being
    /// written (reserved, not committed) counts as at or after the time (it
    /// is as new as anything in the log), so the search never moves past it.
    ///
    /// # Examples
    ///
    /// ```
    /// use rill::log::{Log, LogConfig, Record};
    ///
    /// let log = Log::new(&LogConfig::default())?;
    /// log.append_batch(&[Record::new(b"a"), Record::new(b"b")], &mut Vec::new())?;
    /// let mut cursor = log.cursor_from_first();
    /// let first = cursor.read().expect("nothing was trimmed").expect("committed").timestamp_ns();
    /// assert_eq!(log.offset_at_time(0), 0); // before every record: the oldest
    /// assert_eq!(log.offset_at_time(first), 0);
    /// assert_eq!(log.offset_at_time(u64::MAX), 2); // after every record: the end
    /// # Ok::<(), rill::Error>(())
    /// ```
    pub fn offset_at_time(&self, timestamp_ns: u64) -> u64 {
        let guard = epoch::pin();
        let dir = self.shared.dir(&guard);
        // Record `index` of `seg` counts as at or after the time.
        let at_or_after = |seg: &Segment, index: u64| match seg.committed(index) {
            Some(pos) => seg.view(index, pos).timestamp_ns() >= timestamp_ns,
            None => true,
        };
        // Segments whose first record is older than the time form a prefix;
        // the time falls in the last of them (or before them all). A segment
        // without records (sealed early, or the newest, still empty) goes
        // with the next one that has some, which keeps the prefix a prefix;
        // so the last segment of the prefix has records.
        let segs = &dir.segs;
        let older_from = |i: usize| segs[i..].iter().find(|s| s.reserved() > 0).is_some_and(|seg| !at_or_after(seg, 0));
        let (mut lo, mut hi) = (0, segs.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if older_from(mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let older = lo;
        let Some(seg) = older.checked_sub(1).map(|i| &segs[i]) else {
            return dir.first_offset();
        };
        // Inside it, record 0 is older; find the first of the rest that is not.
        let count = seg.reserved();
        let (mut lo, mut hi) = (1, count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if at_or_after(seg, mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        // `lo - 1` is committed, so `lo` is at most the segment's true count
        // (a reservation that overfilled it is never committed): either a
        // record here or the next segment's first offset (or the end).
        seg.base() + lo
    }
}
