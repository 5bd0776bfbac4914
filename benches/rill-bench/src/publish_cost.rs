//! The publisher's own cost per call (`rill-bench --publish-cost`):
//! `Publisher::publish` of a 64-byte payload with no subscriber, and with 8
//! push subscribers on rill's pool that are caught up when the timing starts
//! and keep up meanwhile, beside a peer's send in the same run.
//!
//! The peer is what a user without rill would write for the same job:
//! crossbeam-channel `unbounded::<[u8; 64]>()` and `send` by value (no
//! backpressure, like rill's default subscription policy). With no
//! subscriber, one channel whose receiver is alive and never read (the send
//! never blocks and never wakes anyone); with 8, eight channels, each drained
//! by its own thread that `black_box`es the payload and counts it in a local,
//! and a publish is eight sends, one per channel.
//!
//! The no-subscriber and keeping-up rows are each run twice on rill's side:
//! on a new topic, whose first retention of appends faults its memory in
//! (what a publisher pays in a topic's first minutes), and *past its
//! retention*: the topic was filled with one and a half retentions before
//! the subscribers attached, so its segments have been trimmed and
//! recycled and appends write memory already mapped (every later minute;
//! rill-bench's throughput scenarios measure this state too). The peer is
//! the same in both: its channel grows into fresh memory with nobody
//! reading, and is drained, its blocks freed and reused, with readers.
//!
//! Only the publishing thread's time is counted: from before the first call to
//! after the last, divided by the messages; draining what is left afterwards
//! is not timed. Pairs alternate their order (rill, peer, then peer, rill), so
//! neither side always runs warm. No thresholds: this reports, it does not judge.
//!
//! A third row publishes to 8 *idle* subscribers: before every call each of
//! them has caught up and gone idle, so every publish wakes all eight (rill:
//! moves their state words and queues their drains on the pool; the peer:
//! eight sends, each to a reader thread that has received everything before
//! it and waits in `recv`). Between calls the publisher polls until all are
//! idle, yielding, on both sides (rill: `wait_idle` with a zero timeout on
//! each subscription, true once it has handled everything and gone idle; the
//! peer: the readers' counts). rill's side used to sleep in `wait_all_idle`
//! instead; a publisher woken from that came back late, after the pool's
//! workers had gone to sleep too, and its call paid for waking them, a cost
//! the peer, whose readers were polled for, never had (rill's row read
//! slower than crossbeam's then). The wait between calls is not timed: each call is
//! timed on its own with `rill::clock::now_ns` (the time-stamp counter), and
//! the cost of the two clock reads, measured the same way in the same loop,
//! is subtracted. Fewer messages are run (a hundredth, 1,000 to 20,000),
//! since every one waits for eight wake-ups.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rill::{Ack, Broker, BrokerConfig, Message, Record, Subscription, SubscriptionOptions, TopicOptions};

use crate::stats::{median, pair_stats};

/// The payload size the cost is measured at.
pub const PAYLOAD: usize = 64;
/// Subscribers (and peer receivers) in the fan-out row.
pub const FAN_OUT: usize = 8;
/// Messages published untimed before each timed run, so both sides start with
/// their threads up and their first allocations made.
const WARM_UP: u64 = 10_000;
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

/// One row: publish ns per call for rill and its peer, one entry per pair.
#[derive(Debug, Clone)]
pub struct Row {
    pub subscribers: usize,
    /// The subscribers are idle before every call (each publish wakes them).
    pub idle: bool,
    /// rill's topic was filled past its retention before the subscribers
    /// attached (its segments recycled); else it is new.
    pub steady: bool,
    pub rill_ns: Vec<f64>,
    pub peer_ns: Vec<f64>,
}

impl Row {
    /// `peer / rill` per pair, so above 1 means rill's publish is cheaper.
    pub fn ratios(&self) -> Vec<f64> {
        self.rill_ns.iter().zip(&self.peer_ns).map(|(r, p)| p / r).collect()
    }
}

/// The rows, as (subscribers, idle, steady): see the module docs.
const ROWS: [(usize, bool, bool); 5] =
    [(0, false, false), (0, false, true), (FAN_OUT, false, false), (FAN_OUT, false, true), (FAN_OUT, true, false)];

/// Runs `pairs` interleaved pairs of `messages` publishes for each row.
pub fn run(messages: u64, pairs: usize) -> Vec<Row> {
    let idle_messages = (messages / 100).clamp(1_000, 20_000);
    ROWS.into_iter()
        .map(|(subscribers, idle, steady)| {
            let mut row = Row { subscribers, idle, steady, rill_ns: Vec::new(), peer_ns: Vec::new() };
            let rill = || {
                if idle { rill_idle_ns(idle_messages, subscribers) } else { rill_ns(messages, subscribers, steady) }
            };
            let peer = || if idle { peer_idle_ns(idle_messages, subscribers) } else { peer_ns(messages, subscribers) };
            for pair in 0..pairs {
                if pair % 2 == 0 {
                    row.rill_ns.push(rill());
                    row.peer_ns.push(peer());
                } else {
                    row.peer_ns.push(peer());
                    row.rill_ns.push(rill());
                }
            }
            row
        })
        .collect()
}

/// Mean ns of `call`, each call timed on its own by two reads of rill's
/// clock, less the mean of two back-to-back reads (taken alternately with
/// the calls, so both see the same machine); `between` runs untimed before
/// each call.
fn timed_alone(messages: u64, mut between: impl FnMut(), mut call: impl FnMut()) -> f64 {
    let (mut timed, mut clock) = (0u64, 0u64);
    for _ in 0..messages {
        between();
        let a = rill::clock::now_ns();
        call();
        let b = rill::clock::now_ns();
        let c = rill::clock::now_ns();
        let d = black_box(rill::clock::now_ns());
        timed += b - a;
        clock += d - c;
    }
    timed.saturating_sub(clock) as f64 / messages as f64
}

/// `n` subscriptions to the `publish-cost` topic whose handlers `black_box`
/// the payload and count it, with their counters.
fn counting_subscribers(broker: &Broker, n: usize) -> (Vec<Arc<AtomicU64>>, Vec<Subscription>) {
    let counts: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let subs: Vec<Subscription> = counts
        .iter()
        .map(|count| {
            let count = count.clone();
            broker
                .subscribe("publish-cost", SubscriptionOptions::default(), move |m: &Message<'_>| {
                    black_box(m.payload());
                    // Relaxed: a private counter, read after `wait_all_idle`, which orders it.
                    count.fetch_add(1, Ordering::Relaxed);
                    Ack::Success
                })
                .expect("subscribe")
        })
        .collect();
    (counts, subs)
}

/// rill: `Publisher::publish` ns per call when `subscribers` are idle
/// before every call, so each call wakes all of them.
pub fn rill_idle_ns(messages: u64, subscribers: usize) -> f64 {
    let broker = Broker::new(BrokerConfig::default()).expect("broker");
    broker.create_topic("publish-cost", &TopicOptions::default()).expect("topic");
    let (counts, subs) = counting_subscribers(&broker, subscribers);
    let refs: Vec<&Subscription> = subs.iter().collect();
    let publisher = broker.publisher("publish-cost").expect("publisher");
    let payload = [0x5au8; PAYLOAD];
    let record = Record::new(&payload);
    let warm_up = WARM_UP / 10;
    for _ in 0..warm_up {
        black_box(publisher.publish(&record).expect("publish"));
    }
    // Polled, as the peer's wait is (see the module docs).
    let idle = || {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while !refs.iter().all(|s| s.wait_idle(Duration::ZERO).expect("wait")) {
            assert!(Instant::now() < deadline, "a subscriber is stuck");
            thread::yield_now();
        }
    };
    let ns = timed_alone(messages, idle, || {
        black_box(publisher.publish(black_box(&record)).expect("publish"));
    });
    idle();
    for count in &counts {
        // Relaxed: ordered by `wait_all_idle` above.
        assert_eq!(count.load(Ordering::Relaxed), warm_up + messages, "a subscriber missed messages");
    }
    ns
}

/// The peer with idle receivers: before every publish each of the
/// `subscribers` reader threads has received everything sent so far and
/// waits in `recv`; a publish is a send to each channel.
pub fn peer_idle_ns(messages: u64, subscribers: usize) -> f64 {
    let payload = [0x5au8; PAYLOAD];
    let received: Arc<Vec<AtomicU64>> = Arc::new((0..subscribers).map(|_| AtomicU64::new(0)).collect());
    let mut senders = Vec::new();
    let mut readers = Vec::new();
    for i in 0..subscribers {
        let (tx, rx) = crossbeam_channel::unbounded::<[u8; PAYLOAD]>();
        senders.push(tx);
        let received = received.clone();
        readers.push(thread::spawn(move || {
            while let Ok(m) = rx.recv() {
                black_box(&m);
                // Release: the publisher's Acquire load of it sees the reader
                // done with the message before it sends the next.
                received[i].fetch_add(1, Ordering::Release);
            }
        }));
    }
    let sent = std::cell::Cell::new(0u64);
    let caught_up = |sent: u64| {
        // Acquire: pairs with the readers' Release count.
        while received.iter().any(|r| r.load(Ordering::Acquire) < sent) {
            thread::yield_now();
        }
    };
    let ns = timed_alone(
        messages,
        || caught_up(sent.get()),
        || {
            let m = black_box(payload);
            for tx in &senders {
                tx.send(m).expect("send");
            }
            sent.set(sent.get() + 1);
        },
    );
    caught_up(sent.get());
    drop(senders);
    for r in readers {
        r.join().expect("reader");
    }
    ns
}

/// rill: `Publisher::publish` ns per call with `subscribers` keeping up, on
/// a new topic or (`steady`) one filled past its retention first.
pub fn rill_ns(messages: u64, subscribers: usize, steady: bool) -> f64 {
    let broker = Broker::new(BrokerConfig::default()).expect("broker");
    broker.create_topic("publish-cost", &TopicOptions::default()).expect("topic");
    let publisher = broker.publisher("publish-cost").expect("publisher");
    if steady {
        // Before anyone subscribes: subscriptions start at the end.
        crate::systems::rill_sys::fill_past_retention(&publisher, 1, PAYLOAD, rill::log::DEFAULT_RETENTION_BYTES)
            .expect("fill past retention");
    }
    let (counts, subs) = counting_subscribers(&broker, subscribers);
    let refs: Vec<&Subscription> = subs.iter().collect();
    let payload = [0x5au8; PAYLOAD];
    let record = Record::new(&payload);
    for _ in 0..WARM_UP {
        black_box(publisher.publish(&record).expect("publish"));
    }
    assert!(rill::broker::wait_all_idle(&refs, DRAIN_TIMEOUT).expect("wait"), "the subscribers did not catch up");
    let started = Instant::now();
    for _ in 0..messages {
        black_box(publisher.publish(black_box(&record)).expect("publish"));
    }
    let elapsed = started.elapsed();
    assert!(rill::broker::wait_all_idle(&refs, DRAIN_TIMEOUT).expect("wait"), "the subscribers did not catch up");
    for count in &counts {
        // Relaxed: ordered by `wait_all_idle` above.
        assert_eq!(count.load(Ordering::Relaxed), WARM_UP + messages, "a subscriber missed messages");
    }
    elapsed.as_nanos() as f64 / messages as f64
}

/// The peer: crossbeam-channel `send` of a `[u8; 64]` ns per publish, to
/// `subscribers` channels (or one nobody reads).
pub fn peer_ns(messages: u64, subscribers: usize) -> f64 {
    let payload = [0x5au8; PAYLOAD];
    if subscribers == 0 {
        let (tx, rx) = crossbeam_channel::unbounded::<[u8; PAYLOAD]>();
        for _ in 0..WARM_UP {
            tx.send(payload).expect("send");
        }
        let started = Instant::now();
        for _ in 0..messages {
            tx.send(black_box(payload)).expect("send");
        }
        let elapsed = started.elapsed();
        assert_eq!(rx.len() as u64, WARM_UP + messages);
        return elapsed.as_nanos() as f64 / messages as f64;
    }
    let mut senders = Vec::new();
    let mut readers = Vec::new();
    // Told by the publisher once the warm-up was received by every reader.
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<()>(subscribers);
    for _ in 0..subscribers {
        let (tx, rx) = crossbeam_channel::unbounded::<[u8; PAYLOAD]>();
        senders.push(tx);
        let ready = ready_tx.clone();
        readers.push(thread::spawn(move || {
            let mut got = 0u64;
            while let Ok(m) = rx.recv() {
                black_box(&m);
                got += 1;
                if got == WARM_UP {
                    ready.send(()).expect("ready");
                }
            }
            got
        }));
    }
    for _ in 0..WARM_UP {
        for tx in &senders {
            tx.send(payload).expect("send");
        }
    }
    // Caught up: every reader received the warm-up and waits in `recv`.
    for _ in 0..subscribers {
        ready_rx.recv().expect("a reader quit");
    }
    let started = Instant::now();
    for _ in 0..messages {
        let m = black_box(payload);
        for tx in &senders {
            tx.send(m).expect("send");
        }
    }
    let elapsed = started.elapsed();
    drop(senders);
    for r in readers {
        assert_eq!(r.join().expect("reader"), WARM_UP + messages, "a reader missed messages");
    }
    elapsed.as_nanos() as f64 / messages as f64
}

/// One of the machine's floors: what a step every publish takes costs here,
/// measured in the same run as the rows.
#[derive(Debug, Clone)]
pub struct Floor {
    pub what: &'static str,
    /// ns per step, one entry per repeat.
    pub ns: Vec<f64>,
}

/// Bytes a floor log reserves per record: a 32-byte header (length, stamp,
/// padding) and the 64-byte payload, as rill's in-memory records of this
/// size take about the same.
const FLOOR_RECORD: usize = 32 + PAYLOAD;
/// The floor log's ring: rill's default segment size.
const FLOOR_RING: usize = 4 << 20;
/// The region of the composed floor: rill's default retention of a
/// partition, so the memory its appends write is as far from the caches as
/// rill's. Its pages are faulted in before the timing, as a partition's are
/// once its retention has been filled and it recycles its segments: the
/// floor of rill's rows past their retention. Its rows on a new topic also
/// pay for faulting their pages in (in 2 MiB pages where the kernel has
/// them: in 4 KiB ones this floor reads far higher, and varies more).
const FLOOR_RETAINED: usize = rill::log::DEFAULT_RETENTION_BYTES as usize;

/// The floors under a publish on this machine, each `repeats` times, `steps`
/// steps a time: a read of rill's clock (the stamp every record carries),
/// an uncontended `fetch_add` (a reservation), an epoch pin and unpin
/// (crossbeam-epoch's, as rill's publisher takes), and a minimal log append
/// with and without the stamp: reserve `FLOOR_RECORD` bytes of a ring with
/// one `fetch_add`, write the header and the payload, commit with a
/// `Release` store. No pin, no routing, no checks, no subscribers: the
/// least a log that stamps each record with this clock pays here. Last, the
/// steps composed as rill's publish composes them: pinned (the stamp read
/// first, as rill reads it), into a region the size of rill's default
/// retention (`FLOOR_RETAINED`); the floor for rill's row with no
/// subscriber past its retention, which adds routing, checks and the offset
/// index (and, on a new topic, faulting its memory in).
pub fn floors(steps: u64, repeats: usize) -> Vec<Floor> {
    type Step = fn(u64) -> f64;
    let kinds: [(&'static str, Step); 6] = [
        ("a clock read (`rill::clock::now_ns`, the time-stamp counter)", |n| {
            per_step(n, || {
                black_box(rill::clock::now_ns());
            })
        }),
        ("an uncontended `fetch_add` (a `lock xadd`)", |n| {
            let word = AtomicU64::new(0);
            per_step(n, || {
                // Relaxed: the instruction is what is timed; a RMW on x86 is locked whatever the ordering.
                black_box(word.fetch_add(1, Ordering::Relaxed));
            })
        }),
        ("an epoch pin and unpin (`crossbeam_epoch::pin`)", |n| {
            per_step(n, || {
                black_box(crossbeam_epoch::pin());
            })
        }),
        ("a log append: reserve, write 96 B, commit (no stamp)", |n| log_append_ns(n, Append::Bare)),
        ("the same with a clock read for the stamp", |n| log_append_ns(n, Append::Stamped)),
        ("the same, pinned, into 256 MiB already mapped (rill's default retention)", |n| {
            log_append_ns(n, Append::Composed)
        }),
    ];
    let mut out: Vec<Floor> = kinds.iter().map(|(what, _)| Floor { what, ns: Vec::new() }).collect();
    for _ in 0..repeats {
        for (floor, (_, step)) in out.iter_mut().zip(&kinds) {
            floor.ns.push(step(steps));
        }
    }
    out
}

/// Mean ns of `step` over `n` back-to-back runs.
fn per_step(n: u64, mut step: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        step();
    }
    started.elapsed().as_nanos() as f64 / n as f64
}

/// The floor log's appends: see [`floors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Append {
    /// Reserve, write, commit, in a [`FLOOR_RING`].
    Bare,
    /// The same, with a stamp.
    Stamped,
    /// Stamped, then pinned, in a [`FLOOR_RETAINED`] region whose pages are
    /// faulted in first.
    Composed,
}

/// The floor log's append, `n` times: see [`floors`].
fn log_append_ns(n: u64, kind: Append) -> f64 {
    let size = if kind == Append::Composed { FLOOR_RETAINED } else { FLOOR_RING };
    let mut ring = vec![0u8; size];
    if kind == Append::Composed {
        // Fault every page in before the timing (a store of 1: a store of
        // the 0 the allocation already holds could be left out).
        ring.iter_mut().step_by(4096).for_each(|b| *b = 1);
    }
    let tail = AtomicU64::new(0);
    let committed = AtomicU64::new(0);
    let payload = [0x5au8; PAYLOAD];
    let ns = per_step(n, || {
        let ts = if kind == Append::Bare { 0 } else { rill::clock::now_ns() };
        let guard = (kind == Append::Composed).then(crossbeam_epoch::pin);
        // Relaxed: one writer here; the locked instruction is what is timed.
        let at = tail.fetch_add(FLOOR_RECORD as u64, Ordering::Relaxed) as usize % size;
        let at = at.min(size - FLOOR_RECORD);
        let rec = &mut ring[at..at + FLOOR_RECORD];
        rec[..8].copy_from_slice(&(PAYLOAD as u64).to_le_bytes());
        rec[8..16].copy_from_slice(&ts.to_le_bytes());
        rec[32..].copy_from_slice(black_box(&payload));
        // Release: what a log's commit is; a reader would Acquire it.
        committed.store(at as u64, Ordering::Release);
        drop(black_box(guard));
    });
    black_box(&ring);
    ns
}

/// The floors as a Markdown table.
pub fn floors_table(floors: &[Floor]) -> String {
    let mut out = String::from("| a step of every publish, alone | ns (median of repeats, range) |\n|---|---:|\n");
    for f in floors {
        let (lo, hi) = f.ns.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        out.push_str(&format!("| {} | {:.1} ({lo:.1}-{hi:.1}) |\n", f.what, median(&f.ns)));
    }
    out
}

/// The rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| publish, 64 B | rill `Publisher::publish` ns/call | crossbeam `send` ns/publish | peer / rill (median, worst pair) |\n|---|---:|---:|---:|\n",
    );
    for row in rows {
        let topic = if row.steady { ", past its retention" } else { ", new topic" };
        let what = if row.subscribers == 0 {
            format!("no subscriber{topic} (peer: 1 channel, never read)")
        } else if row.idle {
            format!(
                "{} idle subscribers, all woken by each call, each call timed alone (peer: {} channels, a reader thread each, waiting in `recv`)",
                row.subscribers, row.subscribers
            )
        } else {
            format!(
                "{} subscribers keeping up{topic} (peer: {} channels, a reader thread each)",
                row.subscribers, row.subscribers
            )
        };
        let ratio = pair_stats(&row.ratios()).map_or("-".into(), |s| format!("{:.2}x ({:.2}x)", s.median, s.worst));
        out.push_str(&format!("| {what} | {:.1} | {:.1} | {ratio} |\n", median(&row.rill_ns), median(&row.peer_ns)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_rows_run_every_pair_and_deliver_everything() {
        // The runs assert that every subscriber and every reader received
        // every message; here, that each row has a finite time per pair.
        let rows = run(2_000, 2);
        assert_eq!(rows.iter().map(|r| (r.subscribers, r.idle, r.steady)).collect::<Vec<_>>(), ROWS);
        for row in &rows {
            assert_eq!((row.rill_ns.len(), row.peer_ns.len()), (2, 2));
            assert!(row.rill_ns.iter().chain(&row.peer_ns).all(|ns| ns.is_finite() && *ns > 0.0), "{row:?}");
        }
        let table = table(&rows);
        assert_eq!(table.lines().count(), 2 + ROWS.len(), "{table}");
        assert_eq!(table.matches("past its retention").count(), 2, "{table}");
    }

    #[test]
    fn every_floor_is_measured_at_every_repeat() {
        let floors = floors(10_000, 3);
        assert_eq!(floors.len(), 6);
        for f in &floors {
            assert_eq!(f.ns.len(), 3, "{f:?}");
            assert!(f.ns.iter().all(|ns| ns.is_finite() && *ns > 0.0), "{f:?}");
        }
        assert_eq!(floors_table(&floors).lines().count(), 8);
    }
}
