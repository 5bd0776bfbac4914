//! The ack deadline (`ack_timeout`): noticing a handler call that runs too
//! long, and what a member does after its stalled call finally returns.
//!
//! # The watch, under a small lock
//!
//! With an `ack_timeout`, the drainer records each handler call in
//! `SubCore::call` (`Call`): when it started (the cheap TSC clock,
//! `clock::now_ns`), the call's number, its partition and the offset its
//! reader resumes at if the call's ack never counts. A job on a timer of
//! the broker (`AckWatch`, on the broker's ack-watch timer thread) looks at
//! that record: a call older than the deadline is a stall. The watch is on
//! the timer only while the subscription may be running a handler: the
//! drainer arms it when a drain starts (if it is not armed), and each watch
//! puts itself back on the timer (at the deadline of the call in flight,
//! or one `ack_timeout` later between calls) while the subscription is
//! `ACTIVE`, and lets go otherwise. An idle subscription costs nothing:
//! no job, no wake-up.
//!
//! A lock is right here, not a lock-free word: the record is a few fields
//! that must change together (a call's number, start, partition and
//! offset; whether it was handed over), and the hand-over has to take the
//! broker's control mutex anyway. The lock is taken twice per handler call
//! (start, end) and only with an `ack_timeout`; nobody else takes it but
//! the watch, once per check, so it is uncontended: a handler that needs a
//! deadline is slow next to two uncontended lock round-trips. Without an
//! `ack_timeout` the cost is one predictable branch per call. The arming
//! is race-free for the same reason: the drainer arms after it became the
//! drainer (its state is `ACTIVE`), under the lock; a watch that lets go
//! does so under the lock after it saw a state other than `ACTIVE`; so
//! either the watch saw the drain and re-armed, or the drainer found the
//! watch gone and armed it.
//!
//! # A stall, and the hand-over
//!
//! The watch marks the call reported (so one call counts once in
//! `ack_timeouts`) and asks the broker (`env.on_stall`, shared members
//! only) to move the member's partitions. Under the control mutex, if some
//! other live member is not itself stalled, the broker claims the call
//! (`claim_stalled_call`: only if that very call is still in flight),
//! takes the member out of the assignment, and hands every partition the
//! member reads to the new owners on paper (`surrender`), each from its
//! last acked offset: the stuck partition from the call's resume offset
//! (everything before it in the batch was settled), the others from their
//! published positions, which the drainer stored before the call began
//! (the `call` lock orders that store before the watch's read). So the
//! stuck message is delivered again, once, by another member; nothing
//! acked is delivered twice. With no member to take over, nothing moves:
//! the stall is counted and logged, and the call's ack counts when it
//! comes; `close` waits for the call as always. Nor does anything move
//! when the stuck message is one that already came again after a stall
//! (`SharedGroup::came_again`): a stuck message comes again once, not
//! from member to member.
//!
//! # Reported before it shows
//!
//! A stall is visible in three places: `ack_timeouts` in the stats, the
//! reason in `last_error`, and (when the partitions move) the stuck message
//! at its new owner. The report comes first (`report_stall`): `last_error`
//! is written, then the count is added with a Release that the stats'
//! Acquire load of it pairs with; and the broker's hook calls the report
//! once it has decided, under the control mutex, before it hands any
//! partition over (attaching a reader to the new owner and waking it
//! follows the report in the hook's thread). So whoever sees the count, or
//! sees the stuck message delivered again, sees why. The race this closes:
//! the watch used to count first, then hand over, then write `last_error`;
//! a look at the stats between the two (a test waiting for the count, or
//! for the new owner's call) found a stall with no report.
//!
//! # After the stalled call returns
//!
//! The drainer ends each call under the lock and learns whether it was
//! claimed. A claimed call's ack is discarded: no settle, so no position
//! moves, no retry is scheduled and nothing is dead-lettered (the new owner
//! has the message). The drainer then lets go of every reader the
//! hand-over took (those whose position is no longer tracked) and clears
//! `stalled`. It stays a live member holding no partitions: the group
//! keeps it out of rebalances until a later join or leave of the
//! subscription finds `stalled` cleared and spreads partitions over it
//! again (a join or leave before that keeps it out, unless every member is
//! stalled: then nobody is left out, so no partition is orphaned).

use std::cell::Cell;
use std::time::Duration;

use super::core::{AckWatch, DrainState, Stall, SubCore};
use crate::broker::dispatch::Job;
use crate::broker::partition::state::Phase;
use crate::sync::atomic::Ordering;
use crate::sync::{Arc, Name};

impl Job for AckWatch {
    fn run(self) {
        check_ack_deadline(&self.0);
    }
}

/// Puts the watch on the timer if it is not there: a drain is starting.
pub(super) fn arm_ack_watch(this: &Arc<SubCore>) {
    let (Some(timeout), Some(timer)) = (this.ack_timeout_ns, &this.env.ack_watch) else { return };
    let mut call = this.call.lock();
    if !call.armed {
        call.armed = true;
        timer.schedule(Duration::from_nanos(timeout), AckWatch(this.clone()));
    }
}

/// Records the start of a handler call on `partition`; `resume` is
/// where its reader goes on if the call's ack is void.
#[inline]
pub(super) fn call_started(core: &SubCore, partition: u32, resume: u64) {
    let now = crate::clock::now_ns();
    let mut call = core.call.lock();
    call.since = Some(now);
    call.seq = call.seq.wrapping_add(1);
    call.partition = partition;
    call.resume = resume;
    call.reported = false;
}

/// Records the end of the handler call; true if the call was claimed by
/// a hand-over, so its ack must be discarded.
#[inline]
pub(super) fn call_ended(core: &SubCore) -> bool {
    let mut call = core.call.lock();
    call.since = None;
    std::mem::take(&mut call.timed_out)
}

/// The timer's look at the call in flight (see the module docs).
fn check_ack_deadline(this: &Arc<SubCore>) {
    let (Some(timeout), Some(timer)) = (this.ack_timeout_ns, &this.env.ack_watch) else { return };
    let now = crate::clock::now_ns();
    let mut call = this.call.lock();
    let overdue = match call.since {
        Some(since) if !call.reported && now.saturating_sub(since) >= timeout => {
            call.reported = true;
            Some((call.seq, call.partition, now.saturating_sub(since)))
        }
        _ => None,
    };
    let next = match call.since {
        // Look again at this call's deadline.
        Some(since) if !call.reported => Some((since.saturating_add(timeout)).saturating_sub(now).max(1)),
        // Reported, or between calls of a running drain: the next call
        // cannot be overdue before one more timeout.
        Some(_) => Some(timeout),
        None if this.state.get() == Phase::Active => Some(timeout),
        None => None,
    };
    match next {
        Some(ns) => timer.schedule(Duration::from_nanos(ns), AckWatch(this.clone())),
        None => call.armed = false,
    }
    drop(call);
    let Some((seq, partition, ran)) = overdue else { return };
    // The hook reports before it moves anything; a report it made is not
    // made again here, one it did not make is (the stall is counted once).
    let reported = Cell::new(false);
    let report = |stall: Stall| {
        if !reported.replace(true) {
            report_stall(this, partition, timeout, stall);
        }
    };
    let stall = this.env.on_stall.as_ref().map_or(Stall::Alone, |hand_over| hand_over(this, seq, &report));
    report(stall);
    // Logged here, outside the broker's control mutex the hook took: a
    // logger is user code.
    ::log::warn!(
        target: "rill::subscription",
        "subscription {:?}: a handler call on partition {partition} has run {:?}, past its ack_timeout of {:?}: {}",
        this.name,
        Duration::from_nanos(ran),
        Duration::from_nanos(timeout),
        what_moved(stall)
    );
}

/// Reports a stall of a handler call on `partition`: `last_error`, then
/// the count (see "Reported before it shows").
fn report_stall(core: &SubCore, partition: u32, timeout: u64, stall: Stall) {
    core.set_last_error(format!(
        "a handler call on partition {partition} ran past the ack_timeout of {:?} ({})",
        Duration::from_nanos(timeout),
        what_moved(stall)
    ));
    // Release: pairs with the Acquire load in `stats`, so a reader that
    // sees the count sees the `last_error` stored above. The watch is the
    // only writer, but the timer may run two watches of one subscription,
    // so add atomically.
    core.counters.ack_timeouts.fetch_add(1, Ordering::Release);
}

/// True from a hand-over of this member's partitions until its drainer
/// has let go of them: rebalances leave it out.
pub(crate) fn is_stalled(core: &SubCore) -> bool {
    core.call.lock().stalled
}

/// Claims call `seq` for a hand-over if it is still in flight (and not
/// claimed) and `may_move(partition, resume)` agrees: its ack becomes
/// void. Returns its partition and resume offset. Called under the
/// broker's control mutex.
pub(crate) fn claim_stalled_call(
    core: &SubCore,
    seq: u64,
    may_move: impl FnOnce(u32, u64) -> bool,
) -> Option<(u32, u64)> {
    let mut call = core.call.lock();
    if call.seq != seq || call.since.is_none() || call.timed_out || !may_move(call.partition, call.resume) {
        return None;
    }
    call.timed_out = true;
    call.stalled = true;
    Some((call.partition, call.resume))
}

/// Stops reading every partition (merged or pending) for a hand-over:
/// no longer a listener, no longer tracked. Returns (topic, partition,
/// offset to resume at): `stuck` resumes at `resume`, the others at
/// their positions. Called under the broker's control mutex, with the
/// member's stalled call claimed.
pub(crate) fn surrender(core: &SubCore, stuck: u32, resume: u64) -> Vec<(Name, u32, u64)> {
    let tracked = std::mem::take(&mut *core.positions.lock());
    tracked
        .into_iter()
        .map(|(topic, p, position)| {
            p.remove_listener(core.id);
            // Relaxed: stored by the drainer before the stalled call
            // began, which the `call` lock orders before this read.
            let offset = if p.index == stuck { resume } else { position.load(Ordering::Relaxed) };
            (topic, p.index, offset)
        })
        .collect()
}

/// The drainer's half, after a claimed call returned: drops the readers
/// the hand-over took (their positions are no longer tracked), keeps
/// any given to the member since, and makes it eligible for partitions
/// again.
pub(super) fn let_go_after_stall(core: &SubCore, st: &mut DrainState) {
    let tracked = core.positions.lock();
    let kept =
        |position: &Arc<crate::sync::atomic::AtomicU64>| tracked.iter().any(|(_, _, q)| Arc::ptr_eq(q, position));
    let retry_position = st.retry.as_ref().map(|r| st.readers[r.reader].position.clone());
    st.readers.retain(|r| kept(&r.position));
    core.pending.lock().retain(|r| kept(&r.position));
    drop(tracked);
    // A dropped reader's retry goes with it (its message is the new
    // owner's now); a kept reader's retry follows its reader's index.
    let retry_reader = retry_position.and_then(|pos| st.readers.iter().position(|r| Arc::ptr_eq(&r.position, &pos)));
    match retry_reader {
        Some(i) => {
            if let Some(r) = &mut st.retry {
                r.reader = i;
            }
        }
        None => st.retry = None,
    }
    st.carry.clear();
    st.next = 0;
    core.call.lock().stalled = false;
}

/// What a stall's report says happened.
fn what_moved(stall: Stall) -> &'static str {
    match stall {
        Stall::Moved => {
            "its partitions went to the other members, which deliver again from the last acked offsets; \
             the call's ack will be discarded"
        }
        Stall::Alone => "no other member can take its partitions over, so nothing moved",
        Stall::CameAgain => {
            "its message had already come again after a stall at another member, so nothing moved \
             (a stuck message is delivered again once)"
        }
        Stall::Returned => "the call returned meanwhile, so nothing moved",
    }
}
