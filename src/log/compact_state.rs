//! What compaction has done to one log, and where it stands: the data a
//! log's shared state holds for `compact.rs`, which runs the passes.

use crate::sync::Mutex;
use crate::sync::atomic::AtomicU64;

/// What compaction has done to one log, and when it next has work.
#[derive(Debug, Default)]
pub(super) struct Compaction {
    /// Records removed so far.
    pub(super) records: AtomicU64,
    /// Their bytes (encoded, as they took in their segments).
    pub(super) bytes: AtomicU64,
    /// Passes run.
    pub(super) passes: AtomicU64,
    /// Distinct keys of the sealed segments with a record kept, after the
    /// last pass.
    pub(super) keys: AtomicU64,
    /// Serialises passes, and says whether the next one has anything to do.
    pub(super) progress: Mutex<Progress>,
    /// Processes mode: the partition's `compact.lock` file, opened by the
    /// first pass: the lock that elects the compacting process, and the
    /// swap generation (see "The swap across processes" in `compact.rs`).
    #[cfg(not(loom))]
    pub(super) across: std::sync::OnceLock<super::file::LockFile>,
}

/// Where the passes stand (see "Incremental passes" in `compact.rs`). In
/// memory only, for durable logs too: an open starts from the default (no
/// clean prefix), and the first pass recomputes it (see "On a data
/// directory" in `compact.rs`). Each process sharing a partition has its
/// own, which stays true whoever compacts ("Who compacts, and what each
/// process knows" in `compact.rs`).
#[derive(Debug)]
pub(super) struct Progress {
    /// The end offset of the sealed segments when a pass last looked: a
    /// pass may have work once more are sealed.
    pub(super) through: u64,
    /// The *clean* prefix's end, a segment base: below it the sealed
    /// segments hold at most one record of each key (the newest of its key
    /// when the last pass ran). A pass maps the keys of the *dirty* part,
    /// from here to `through`, only.
    pub(super) clean: u64,
    /// The earliest time (ns) at which a record the last pass kept becomes
    /// removable (a superseded record leaving the lag, a tombstone
    /// expiring); `u64::MAX` if none.
    pub(super) due_ns: u64,
    /// When (ns) a dirty part too small to start a pass starts one anyway,
    /// if nothing more is sealed before (see `QUIET_PASS_NS` in
    /// `compact.rs`); `u64::MAX` once a pass ran after the last seal.
    pub(super) quiet_ns: u64,
    /// How long (ns) the last pass took, by the clock.
    pub(super) last_pass_ns: u64,
    /// The last pass left work it could not do yet (a record still being
    /// written, a directory that stalled, a rebuilt segment not installed):
    /// the next call runs a pass whatever the dirty share.
    pub(super) retry: bool,
    /// Processes mode: the swap generation (in `compact.lock`) this
    /// process last followed, even (see "The swap across processes" in
    /// `compact.rs`). Processes mode only, which loom compiles out.
    #[cfg_attr(loom, allow(dead_code))]
    pub(super) followed: u64,
    /// Processes mode: when (ns) this process next reads the swap
    /// generation to follow other processes' swaps (see `FOLLOW_EVERY_NS`
    /// in `compact.rs`).
    #[cfg_attr(loom, allow(dead_code))]
    pub(super) next_follow_ns: u64,
    /// Processes mode: the base of this process's newest segment when it
    /// last followed. Its mappings of the segments before it are of the
    /// files their names held after the swaps of `followed`; from it on,
    /// a segment sealed in this process's view since then may still be a
    /// mapping of a file another process rebuilt (it was this process's
    /// newest, which a follow does not replace), until the next follow
    /// looks at it. A pass rebuilds none of those.
    #[cfg_attr(loom, allow(dead_code))]
    pub(super) followed_newest: u64,
}

impl Default for Progress {
    /// No pass yet: nothing clean, nothing due.
    fn default() -> Progress {
        Progress {
            through: 0,
            clean: 0,
            due_ns: 0,
            quiet_ns: u64::MAX,
            last_pass_ns: 0,
            retry: false,
            followed: 0,
            next_follow_ns: 0,
            followed_newest: 0,
        }
    }
}
