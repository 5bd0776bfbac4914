//! When a drain that found work waits for more before it takes it: the
//! run-wait policy of a lingering pool drain (`idle::linger_for_work`,
//! `idle.rs`) and of a dedicated drainer spinning for work with the
//! default policy (`idle::spin_for_work`; one with an `idle_spin`
//! budget asked for latency, and takes what it finds at once). Not
//! built under loom, like the linger: it changes when a drain looks at the
//! log, never what it may conclude from a look, so it adds nothing to check.

/// The run of records a lingering drain waits for once messages come
/// faster than it drains them ([`RunWait`]), up to the linger's end.
///
/// Why: a drain that takes each record as soon as it is committed reads
/// the lines the publisher is writing at the head: the slot it polls
/// shares its index line with the next ones, and a record shares its data
/// lines with the next record. Each of those reads costs the publisher's
/// next store there an invalidation, which its next locked instruction (F1,
/// the pin) waits for. A drain that waits until the record this far ahead
/// is committed looks at one slot a line or two ahead of the publisher and
/// then reads lines it has finished with; once it has taken the run, it
/// leaves the head to the next round ([`RunWait::stops_chase`]). Why 32:
/// a shorter run, or the same run with a shorter wait, leaves the drain
/// close enough to the head to keep reading the publisher's lines, and a
/// longer one gains nothing more. Measured by rill-bench's `one-to-one`
/// and `mpsc-4` scenarios (`--scenario one-to-one,mpsc-4 --pairs 3`, pool,
/// `Block` lag 4096), alternating builds with and without the wait.
pub(super) const LINGER_RUN: u64 = 32;

/// The run a drain waits for: [`LINGER_RUN`], or half the subscription's
/// lag limit if that is less. Why: a drain waiting for a run lets its lag
/// grow by the run, and at its lag limit a subscription drops the oldest
/// messages (`DropOldest`), is closed (`Disconnect`), or holds its
/// publishers back (`Block`, where publishers stop a limit past the
/// position it last published, so a run longer than that never comes and
/// every wait would last the whole linger).
fn run_len(lag_limit: Option<u64>) -> u64 {
    lag_limit.map_or(LINGER_RUN, |limit| LINGER_RUN.min(limit.div_ceil(2)))
}

/// The share of lingers whose first look finds work (in 1/1024ths, a
/// moving average over about [`RUN_WAIT_WEIGHT`] lingers) above which a
/// drain waits for runs ([`RunWait`]).
///
/// Why a third: on the pool with one subscriber, the share of first looks
/// (one pause after a round caught up) that find work is well above a
/// third with the publisher flat out, and well below it at rates the drain
/// keeps up with, whether it waits for runs or not; a third lies between.
/// Measured with rill-bench's `one-to-one` scenario, flat out and with
/// `--rate` (`-p 1 -s 1 --rate N`).
const RUN_WAIT_ABOVE: u32 = 1024 / 3;
/// The moving average's weight: each linger moves it by 1/64 of the way,
/// so about 26 first looks in a row that find work turn the wait on.
///
/// Why this slow: at a rate the drain keeps up with, it still falls behind
/// now and then (a preemption, a burst from the publisher) and its next few
/// rounds find work at once. A faster average (1/16: 7 such rounds turn it
/// on) let those bursts turn the wait on, and a dedicated subscriber's
/// tail latency rose several times over; with 1/64 it stays where it is
/// without the wait. Flat out, the average settles at the same share
/// either way. Measured with `rill-bench -p 1 -s 1 --rate N` (the p90 of
/// its latency histogram), pool and `--dedicated`.
const RUN_WAIT_WEIGHT: u32 = 64;

/// A round that delivered at least this many messages after each
/// partition's first batch was chasing the publisher: records kept being
/// committed while it handled the ones before, and it took them a batch of
/// one or two at a time, reading the lines the publisher was writing. The
/// first look after it counts toward [`RunWait`] as one that found work.
///
/// Why: the first look alone missed it. A round goes on while records are
/// committed, so a drain on the publisher's heels chases it inside the
/// round and ends caught up; one pause later, its first look usually finds
/// nothing. One subscriber with the default options on the pool, its
/// handler summing the payload, made rounds of a dozen or so messages and
/// almost never waited for a run, at about half the rate it reaches with
/// this (`ffi/examples/rust_baseline.rs`, and rill-bench's `one-to-one`
/// with `--work touch`, pool and dedicated). Why 4: flat out most rounds
/// reach it, at rates the drain keeps up with almost none do.
///
/// Why after the first batch: what a round finds waiting when it starts
/// is not chasing, and after a wait for a run it is the whole run. Counted
/// over the whole round, every round after a wait counted as chased, so
/// the wait, once on, kept itself on, and at rates the drain keeps up with
/// the median latency rose to about the linger (`rill-bench -p 1 -s 1
/// --rate N`); counted after the first batch, it stays as it is without
/// the wait. Each partition's first batch, not
/// the round's: a round over several partitions finds a little waiting in
/// each at rates it keeps up with, and none of that is chasing either.
const CHASED_ROUND: usize = 4;

/// A wait for a run that lasts the whole linger with fewer than
/// 1/`STARVED_WAIT` of its run waiting, in all the subscription's
/// partitions together, halves [`RunWait`]'s average: two in a row turn
/// the wait off even when every first look found work, and then about ten
/// first looks that find work bring it back above [`RUN_WAIT_ABOVE`].
/// With a run of [`LINGER_RUN`] and the linger's length (`LINGER_NS`,
/// `drain.rs`): records coming at under a quarter of a run per linger.
///
/// Why: the average measures how often the drain finds the publisher
/// ahead, not whether a run comes within the linger, and the two part
/// when a subscription reads several partitions. Its looks cover them all,
/// but a run must come in one: one pool subscriber of 4 partitions at a
/// moderate rate (`rill-bench -p 1 -s 1 --partitions 4 --rate N`) waited
/// almost every linger to its end, about one record a partition each
/// time, and its median latency became the linger's. Expiry alone is not
/// the signal: flat out, most waits expire too, each with most of its run
/// there, and halving on every expiry took back most of what the wait
/// gains in the `one-to-one` and `mpsc-4` scenarios. Counted per partition
/// (a quarter of the run in one of them), it also cost 4 partitions flat
/// out, where records come fast in all of them together and slowly in
/// each.
const STARVED_WAIT: u64 = 4;

/// Whether a drain waits for a run of [`LINGER_RUN`] records before it
/// takes what it finds, or takes it at once.
///
/// A drain waits only while messages come about as fast as it drains
/// them or faster: while more than [`RUN_WAIT_ABOVE`] of its lingers find
/// work at their first look (the publisher was ahead again before the
/// drain had paused once) or follow a round that chased the publisher
/// ([`CHASED_ROUND`]). Why: waiting delays the records it waits
/// behind, by up to the linger: waiting after every round put the median
/// latency at about the linger at rates the drain keeps up with, which
/// gain nothing from it, while at a rate one subscriber taking each record
/// at once cannot keep up with, waiting keeps up. On the pool only drains that
/// linger wait, so a subscription woken after a long idle spell never does.
/// A dedicated drainer (default policy) waits for runs the same way.
/// Measured with rill-bench's `one-to-one` and `one-to-one-dedicated`
/// scenarios, flat out and with `--rate N` for latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RunWait {
    /// The moving average of first looks that found work, in 1/1024ths.
    found: u32,
    /// Messages the current round (once it ended, the last one) delivered
    /// after each partition's first batch; from [`CHASED_ROUND`] on, the
    /// next first look counts as one that found work.
    chased: usize,
    /// The run waited for: [`run_len`] of the subscription's lag limit.
    run: u64,
}

impl RunWait {
    /// A drain's policy, for a subscription with this lag limit: it starts
    /// taking what it finds at once.
    pub(super) fn new(lag_limit: Option<u64>) -> Self {
        RunWait { found: 0, chased: 0, run: run_len(lag_limit) }
    }

    /// The records a waiting look waits for (at least 1).
    pub(super) fn run(&self) -> u64 {
        self.run
    }

    /// A drain round begins.
    pub(super) fn round_started(&mut self) {
        self.chased = 0;
    }

    /// The round delivered `n` messages in a batch after a partition's first.
    pub(super) fn delivered_after_first(&mut self, n: usize) {
        self.chased += n;
    }

    /// The first look of a linger found work, or found none. After a round
    /// that chased the publisher it counts as one that found work.
    pub(super) fn first_look(&mut self, found: bool) {
        let sample = if found || self.chased >= CHASED_ROUND { 1024 } else { 0 };
        // found + (sample - found) / weight, in integers that stay in 0..=1024.
        self.found = (self.found * (RUN_WAIT_WEIGHT - 1) + sample) / RUN_WAIT_WEIGHT;
    }

    /// A wait for a run lasted the whole linger and found fewer than
    /// [`least`](RunWait::least) records waiting: they come too slowly for
    /// the wait, which only delayed them. Halves the moving average
    /// ([`STARVED_WAIT`], why).
    pub(super) fn wait_expired(&mut self) {
        self.found /= 2;
    }

    /// The least of a run that, waiting when a wait expires, shows that
    /// the records are coming fast enough to wait for ([`STARVED_WAIT`]).
    pub(super) fn least(&self) -> u64 {
        (self.run / STARVED_WAIT).max(1)
    }

    /// Whether a look that found work waits for a run.
    pub(super) fn waits(&self) -> bool {
        self.found > RUN_WAIT_ABOVE
    }

    /// Whether a round whose first batch in a partition delivered
    /// `first_batch` messages stops there, rather than go on, once less
    /// than a run is committed behind it: while the drain waits for runs,
    /// and only after a first batch that held one.
    ///
    /// Why: a round goes on while records are committed, and after the run
    /// it waited for, the batches it finds get shorter (the publisher
    /// committed a few while it handled the run, then fewer) until they
    /// are the record at the head, whose index and data lines the publisher
    /// is still writing: the tail of every such round is the chase the
    /// wait was to end. Left for the next round, the tail becomes part of
    /// the next run. Measured by one-to-one taken apart
    /// (`examples/parts.rs`, the cost a message of publish and drain
    /// together) and by rill-bench's `one-to-one`, `one-to-one-dedicated`,
    /// `mpsc-4` and `fan-out-8-threads` scenarios, alternating builds
    /// without and with it: it lowered the first and raised the others.
    ///
    /// What it costs: the tail waits for the next run, or for the linger's
    /// end, so at rates where the wait is on and bursts bring a whole run,
    /// latency may rise; `rill-bench -p 1 -s 1 --rate N` (pool, and
    /// `--dedicated`) measures it. Where the wait is mostly off, the
    /// median latencies stayed within each other's spread.
    ///
    /// Why only after a run: a first batch shorter than a run came from a
    /// wait that expired or from records found at once, at a rate the wait
    /// does not pay at; stopping there too would leave every round's tail
    /// to a linger's end. (A first version that stopped after any first
    /// batch tripled the median latency on the pool at a rate the drain
    /// keeps up with, `rill-bench -p 1 -s 1 --rate N`.)
    pub(super) fn stops_chase(&self, first_batch: usize) -> bool {
        self.waits() && first_batch as u64 >= self.run
    }

    /// A wait that is on, as after many lingers whose first look found
    /// work (for tests that need a drain to stop its chase).
    #[cfg(test)]
    pub(super) fn waiting() -> Self {
        RunWait { found: 1024, chased: 0, run: LINGER_RUN }
    }
}

#[cfg(test)]
mod tests {
    use super::{LINGER_RUN, RunWait, run_len};

    #[test]
    fn a_drain_waits_for_no_more_than_half_its_lag_limit() {
        assert_eq!(run_len(None), LINGER_RUN);
        assert_eq!(run_len(Some(4096)), LINGER_RUN);
        assert_eq!(run_len(Some(8)), 4);
        assert_eq!(run_len(Some(1)), 1);
    }

    #[test]
    fn a_round_that_chased_the_publisher_counts_as_a_first_look_that_found_work() {
        let mut w = RunWait::new(None);
        let weight = super::RUN_WAIT_WEIGHT as usize;
        // A round that delivered `chased` messages after its first batches.
        let round = |w: &mut RunWait, chased: usize| {
            w.round_started();
            w.delivered_after_first(chased);
        };
        for _ in 0..2 * weight {
            // Rounds of 15 messages taken one or two at a time, then a
            // first look (one pause later) that finds nothing.
            round(&mut w, 14);
            w.first_look(false);
        }
        assert!(w.waits(), "a drain that chases the publisher inside its rounds waits for runs");
        for _ in 0..4 * weight {
            // After each wait: the run in the first batch, 2 more behind it.
            round(&mut w, 2);
            w.first_look(false);
        }
        assert!(!w.waits(), "a drain that keeps up after its waits turns the wait off");
        for _ in 0..4 * weight {
            round(&mut w, 0);
            w.first_look(false);
        }
        assert!(!w.waits(), "rounds of one batch are a drain that keeps up");
        round(&mut w, super::CHASED_ROUND);
        w.first_look(false);
        round(&mut w, super::CHASED_ROUND - 1);
        let before = w;
        w.first_look(false);
        assert!(w.found <= before.found, "below the threshold a round is not a chase");
    }

    #[test]
    fn a_round_leaves_the_head_only_after_a_run_while_the_drain_waits() {
        // A drain for this lag limit whose first looks all found work.
        let waiting = |lag_limit| {
            let mut w = RunWait::new(lag_limit);
            for _ in 0..4 * super::RUN_WAIT_WEIGHT {
                w.first_look(true);
            }
            assert!(w.waits());
            w
        };
        assert!(!RunWait::new(None).stops_chase(LINGER_RUN as usize), "a drain that does not wait takes what it finds");
        let w = waiting(None);
        assert!(w.stops_chase(LINGER_RUN as usize), "after the run it waited for, the head is left");
        assert!(w.stops_chase(10 * LINGER_RUN as usize), "and after a backlog");
        assert!(!w.stops_chase(LINGER_RUN as usize - 1), "a wait that expired short of a run is chased to the end");
        let small = waiting(Some(8));
        assert!(small.stops_chase(4), "the run is the lag limit's half");
        assert!(!small.stops_chase(3));
    }

    #[test]
    fn a_wait_that_starves_turns_the_wait_off_for_a_while() {
        let weight = super::RUN_WAIT_WEIGHT as usize;
        let mut w = RunWait::new(None);
        assert_eq!(w.least(), LINGER_RUN / super::STARVED_WAIT);
        assert_eq!(RunWait::new(Some(2)).least(), 1, "a run of one: any record is enough");
        for _ in 0..4 * weight {
            w.first_look(true);
        }
        assert!(w.waits());
        // From an average where every first look finds work: two.
        w.wait_expired();
        w.wait_expired();
        assert!(!w.waits(), "starved waits in a row stop the waiting");
        let mut looks = 0;
        while !w.waits() {
            w.first_look(true);
            looks += 1;
        }
        assert!((4..=weight).contains(&looks), "busy first looks bring it back, not at once: {looks}");
    }

    #[test]
    fn runs_are_waited_for_only_while_most_first_looks_find_work() {
        let look = |w: &mut RunWait, pattern: &[bool], times: usize| {
            for _ in 0..times {
                for &found in pattern {
                    w.first_look(found);
                }
            }
        };
        let weight = super::RUN_WAIT_WEIGHT as usize;
        let mut w = RunWait::new(None);
        assert_eq!(w.run(), LINGER_RUN);
        assert_eq!(RunWait::new(Some(8)).run(), 4);
        assert!(!w.waits(), "a new drain takes what it finds");
        look(&mut w, &[true], 8);
        assert!(!w.waits(), "a burst of busy looks is not a trend");
        look(&mut w, &[true], 2 * weight);
        assert!(w.waits(), "the publisher is ahead at every look");
        // Flat out, well over a third of first looks find work: still waiting.
        look(&mut w, &[true, false], 4 * weight);
        assert!(w.waits(), "half the looks find work");
        // At rates the drain keeps up with, well under a third.
        let one_in_ten = [true, false, false, false, false, false, false, false, false, false];
        look(&mut w, &one_in_ten, weight);
        assert!(!w.waits(), "one look in ten finds work");
        look(&mut w, &[false], 4 * weight);
        assert!(!w.waits());
        look(&mut w, &[true], 4 * weight);
        assert!(w.waits(), "and back when the rate comes back");
    }
}
