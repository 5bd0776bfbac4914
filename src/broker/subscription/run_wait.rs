//! When a drain that found work waits for more before it takes it: the
//! run-wait policy of a lingering pool drain (`SubCore::linger_for_work`,
//! `drain.rs`) and of a dedicated drainer spinning for work with the
//! default policy (`SubCore::spin_for_work`; one with an `idle_spin`
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
/// leaves the head to the next round ([`RunWait::stops_chase`]). Measured with
/// `rill-bench --scenario one-to-one,mpsc-4 --pairs 3` (pool, `Block` lag
/// 4096, alternating builds), waiting for a run to the end of the linger:
/// one-to-one 10.9-11.4 M msgs/s against 5.8-6.0 M taking each record at
/// once, mpsc-4 10.4-11.1 M against 6.8-7.5 M; with the same run but the
/// wait cut to 1 µs, 8.1 M; a run of 16, 9.5 M; 64 or 128, no better.
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
/// Why a third: on the pool with one subscriber, the first look (one pause
/// after a round caught up) found work in 41% of lingers with the
/// publisher flat out and 9% at 3 M msgs/s, taking each record at once;
/// waiting for runs, 41-43% flat out and at 6 M msgs/s, 21-23% at 3 M.
const RUN_WAIT_ABOVE: u32 = 1024 / 3;
/// The moving average's weight: each linger moves it by 1/64 of the way,
/// so about 26 first looks in a row that find work turn the wait on.
///
/// Why this slow: at 3 M msgs/s a drain falls behind now and then (a
/// preemption, a burst from the publisher) and its next few rounds find
/// work at once. With 1/16 (7 such rounds turn it on) those bursts turned
/// the wait on: a dedicated subscriber's p90 latency went from 445-531 ns
/// to 1.19-1.62 µs; with 1/64, 397-465 ns, and the pool's 390-392 ns.
/// Flat out, the average settles at the same share either way.
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
/// handler summing the 64-byte payload (`ffi/examples/rust_baseline.rs`,
/// 2 M messages): rounds of about 15 messages, fewer than 1 linger in 100
/// waiting for runs, 5.6-10.6 M msgs/s; with this, 11.9-14.0 M
/// (`rill-bench --work touch` one-to-one: 5.1-5.8 M before, 10.0-12.1 M
/// after, pool and dedicated). At 3 M msgs/s 1.4% of rounds reached 4
/// messages, at full speed 77%.
///
/// Why after the first batch: what a round finds waiting when it starts
/// is not chasing, and after a wait for a run it is the whole run. Counted
/// over the whole round, every round after a wait counted as chased, so
/// the wait, once on, kept itself on: at 3 M msgs/s (`rill-bench -p 1 -s 1
/// --rate 3000000`) the p50 latency went from 216 ns to 1.43 µs. Counted
/// after the first batch, 212-224 ns. Each partition's first batch, not
/// the round's: a round over several partitions finds a little waiting in
/// each at rates it keeps up with, and none of that is chasing either.
const CHASED_ROUND: usize = 4;

/// A wait for a run that lasts the whole linger with fewer than
/// 1/`STARVED_WAIT` of its run waiting, in all the subscription's
/// partitions together, halves [`RunWait`]'s average: two in a row turn
/// the wait off even when every first look found work, and then about ten
/// first looks that find work bring it back above [`RUN_WAIT_ABOVE`].
/// With a run of 32 and a linger of 2 µs: records coming at under about
/// 4 M msgs/s.
///
/// Why: the average measures how often the drain finds the publisher
/// ahead, not whether a run comes within the linger, and the two part
/// when a subscription reads several partitions. Its looks cover them all,
/// but a run must come in one: one pool subscriber of 4 partitions at 2 M
/// msgs/s (`rill-bench -p 1 -s 1 --partitions 4 --rate 2000000`) waited in
/// 312,641 lingers, 312,603 of them to the end, about one record a
/// partition each time, for a p50 latency of 1.1-2.0 µs at 2-3 M msgs/s
/// (262-305 ns with this). Expiry alone is not the signal: flat out, 66%
/// of waits expired too (226,409 of 344,118 in `--scenario one-to-one
/// --pairs 3`), each with most of its run there, and halving on every
/// expiry took one-to-one from 11.6-12.5 M msgs/s to 7.4-7.7 M and mpsc-4
/// from 10.8-11.8 M to 8.5-8.8 M. Counted per partition (a quarter of the
/// run in one of them), it also cost 4 partitions flat out 9% (8.6-8.9 M
/// msgs/s to 7.9-8.1 M), where records come fast in all of them together
/// and slowly in each.
const STARVED_WAIT: u64 = 4;

/// Whether a drain waits for a run of [`LINGER_RUN`] records before it
/// takes what it finds, or takes it at once.
///
/// A drain waits only while messages come about as fast as it drains
/// them or faster: while more than [`RUN_WAIT_ABOVE`] of its lingers find
/// work at their first look (the publisher was ahead again before the
/// drain had paused once) or follow a round that chased the publisher
/// ([`CHASED_ROUND`]). Why: waiting delays the records it waits
/// behind, by up to the linger (2 µs): at 3 M msgs/s on the pool, waiting
/// after every round put the p50 latency at 1.45 µs against 0.21-0.25 µs,
/// and a rate the drain keeps up with gains nothing from it. At 6 M msgs/s,
/// which one subscriber taking each record at once did not keep up with
/// (5.46 M), waiting kept up (p50 1.4 µs). On the pool only drains that
/// linger wait, so a subscription woken after a long idle spell never does.
/// A dedicated drainer (default policy) waited for runs the same way:
/// one-to-one 13.6-14.4 M msgs/s against 5.6-6.3 M, p50 latency at 3 M
/// msgs/s 161-175 ns against 172-184 ns.
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
    /// the next run. Alternating builds on 4 December (without this, then
    /// with it):
    ///
    /// * one-to-one taken apart (`examples/parts.rs`, 6 rounds each of 4 M
    ///   messages), ns a message together: pool 70.0 (61.2-73.0) against
    ///   56.7 (52.1-63.6), dedicated 63.6 (56.7-64.9) against 56.1
    ///   (44.3-64.4); a publish alone is 30-50;
    /// * `rill-bench`, 3 pairs, in the fast state: one-to-one 15.6 M against
    ///   17.6 M msgs/s (0.48x and 0.57x bare-log), dedicated 16.6 M against
    ///   21.8 M (0.53x, 0.63x), mpsc-4 16.1 M against 16.9 M (0.52x,
    ///   0.62x), fan-out-8 with a thread each 6.02 M against 6.13 M.
    ///
    /// What it costs: the tail waits for the next run, or for the linger's
    /// end, so at rates where the wait is on and bursts bring a whole run,
    /// latency rises. One subscriber at 6 M msgs/s (`-p 1 -s 1 --rate
    /// 6000000`, 5 alternating runs each): p50 1.58-1.68 µs against
    /// 1.70-2.18 µs on the pool, 1.74-1.88 µs against 1.95-3.20 µs on a
    /// dedicated thread. At 1 M and 3 M msgs/s, where the wait is mostly
    /// off, the p50s stayed within each other's spread (3 M, pool: 187-887
    /// ns against 188-230 ns).
    ///
    /// Why only after a run: a first batch shorter than a run came from a
    /// wait that expired or from records found at once, at a rate the wait
    /// does not pay at; stopping there too would leave every round's tail
    /// to a linger's end. (A first version that stopped after any first
    /// batch, at 3 M msgs/s on the pool in one pair of runs: p50 681 ns
    /// against 215 ns, p90 5.3 µs against 339 ns.)
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
        // Flat out, 41-45% of first looks found work: still waiting.
        look(&mut w, &[true, false], 4 * weight);
        assert!(w.waits(), "half the looks find work");
        // At 3 M msgs/s, 5-9% (taking records at once) to 23% (waiting).
        let one_in_ten = [true, false, false, false, false, false, false, false, false, false];
        look(&mut w, &one_in_ten, weight);
        assert!(!w.waits(), "one look in ten finds work");
        look(&mut w, &[false], 4 * weight);
        assert!(!w.waits());
        look(&mut w, &[true], 4 * weight);
        assert!(w.waits(), "and back when the rate comes back");
    }
}
