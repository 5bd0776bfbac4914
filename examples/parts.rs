//! One-to-one taken apart: what a publish costs alone, what a subscriber's
//! drain costs alone, and what the two cost when they run at once on two
//! cores. `cargo run --release --example parts [MESSAGES] [ROUNDS]`.
//!
//! Each round, on a fresh broker, 64-byte payloads, the topic already
//! filled past its 64 MiB retention (so the segments recycle, as in
//! rill-bench's one-to-one):
//!
//! * **publish alone**: `MESSAGES` publishes through a `Publisher`, no
//!   subscriber;
//! * **drain alone**: a subscription from `Earliest` reads the retained
//!   backlog (what the publisher left, about 700,000 records) with nothing
//!   publishing, timed from `subscribe` to `wait_idle`;
//! * **together**: `MESSAGES` publishes with that subscription reading behind
//!   them (`Overflow::Block`, lag limit 4096, as rill-bench), timed until the
//!   subscriber has read the last one.
//!
//! Each part runs on the pool and on a dedicated thread, the order of the
//! two alternating by round (`ONLY=pool` or `ONLY=dedicated` runs one). The handler `black_box`es the payload and
//! counts in a local, like rill-bench's `--work minimal`. If the parts add
//! up to less than the whole, the two sides slow each other down: the
//! difference is what they cost each other (cache lines that move between
//! the cores, and waits), not work either side does.
//!
//! The same three parts are taken of `bare`, a featureless frame ring in
//! the style of rill-bench's bare-log (one `fetch_add` claims a 128-byte
//! frame, the payload is copied in and committed with a `Release` store of
//! its sequence number; the reader polls the next frame's header and
//! publishes its position once per 64 frames). It stamps nothing (unlike
//! bare-log, which stamps each publish call), pins nothing and has no
//! index, topics or wake-ups: what a log's hand-off costs with no work
//! around it. Its ring holds 4096 frames (512 KiB, which fits this
//! machine's L2) except for its drain alone, which reads a backlog of the
//! same length as rill's from a ring big enough to hold it.
//!
//! Counts are checked, so a build that drops messages cannot pass for a
//! fast one. The numbers depend on the machine's state: on a shared VM, run
//! a cross-core ping-pong (`ffi/bench/pingpong.c`, which
//! `ffi/bench/run.sh` builds into `target/release/pingpong`) before and
//! after, as rill-bench does (docs/PERFORMANCE.md, "The noise probes").

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rill::{
    Ack, Broker, BrokerConfig, Message, Overflow, Publisher, Record, StartPosition, Subscription, SubscriptionOptions,
    TopicOptions,
};

const RETENTION: u64 = 64 << 20;
const LAG_LIMIT: u64 = 4096;
const PAYLOAD: [u8; 64] = [7u8; 64];
/// The bare ring's backlog: about as many records as rill's retention holds.
const BACKLOG: u64 = 750_000;
const WAIT: Duration = Duration::from_secs(120);

/// A subscription whose handler counts what it sees in a local and stores
/// the count in `seen`: a plain store to a line no other thread touches
/// until the part is over, so it stays in the drainer's cache.
fn subscribe(broker: &Broker, topic: &str, options: SubscriptionOptions, seen: &Arc<AtomicU64>) -> Subscription {
    let seen = seen.clone();
    let mut count = 0u64;
    broker
        .subscribe(topic, options, move |m: &Message<'_>| {
            black_box(m.payload());
            count += 1;
            // Relaxed: read after `wait_idle`, which orders every handler
            // call before it returns.
            seen.store(count, Ordering::Relaxed);
            Ack::Success
        })
        .expect("subscribe")
}

fn publish(publisher: &Publisher, n: u64) {
    let record = Record::new(&PAYLOAD);
    for _ in 0..n {
        black_box(publisher.publish(black_box(&record)).expect("publish"));
    }
}

/// ns per message of publish alone, drain alone and both together.
fn round(n: u64, dedicated: bool) -> (f64, f64, f64) {
    let broker = Broker::new(BrokerConfig::default()).expect("broker");
    let options = TopicOptions { retention_bytes: Some(RETENTION), ..TopicOptions::default() };
    broker.create_topic("t", &options).expect("topic");
    let publisher = broker.publisher("t").expect("publisher");
    // Past retention: every later segment is a recycled one.
    publish(&publisher, 2 * RETENTION / 64);

    let start = Instant::now();
    publish(&publisher, n);
    let alone = start.elapsed().as_nanos() as f64 / n as f64;

    let stats = &broker.topic_stats("t").expect("stats").partitions[0];
    let retained = stats.next_offset - stats.first_offset;
    let seen = Arc::new(AtomicU64::new(0));
    let backlog =
        SubscriptionOptions { start: StartPosition::Earliest, dedicated_thread: dedicated, ..Default::default() };
    let start = Instant::now();
    let sub = subscribe(&broker, "t", backlog, &seen);
    assert!(sub.wait_idle(WAIT).expect("wait"));
    let drain = start.elapsed().as_nanos() as f64 / retained as f64;
    drop(sub);
    assert_eq!(seen.swap(0, Ordering::Relaxed), retained, "the backlog's drain saw every retained record");

    let chase = SubscriptionOptions {
        dedicated_thread: dedicated,
        overflow: Overflow::Block,
        lag_limit: Some(LAG_LIMIT),
        ..Default::default()
    };
    let sub = subscribe(&broker, "t", chase, &seen);
    let start = Instant::now();
    publish(&publisher, n);
    assert!(sub.wait_idle(WAIT).expect("wait"));
    let together = start.elapsed().as_nanos() as f64 / n as f64;
    drop(sub);
    assert_eq!(seen.load(Ordering::Relaxed), n, "the subscriber saw every message");
    (alone, drain, together)
}

/// The featureless frame ring (see the module's documentation).
mod bare {
    use std::cell::UnsafeCell;
    use std::hint::black_box;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Instant;

    use crossbeam_utils::{Backoff, CachePadded};

    /// 8-byte words per frame: the header, then the 64-byte payload, padded
    /// to two cache lines.
    const WORDS: usize = 16;
    /// Frames the reader takes before it publishes its position.
    const READ_RUN: u64 = 64;

    pub struct Ring {
        buf: Box<[UnsafeCell<u64>]>,
        mask: u64,
        tail: CachePadded<AtomicU64>,
        /// The reader's next frame; `u64::MAX` while there is no reader.
        reader: CachePadded<AtomicU64>,
    }

    // SAFETY: a frame's body is written only by the producer that claimed it,
    // after the reader has left its previous use (acquired from `reader`),
    // and read only after its commit (acquired from the header).
    unsafe impl Sync for Ring {}

    impl Ring {
        pub fn new(frames: u64) -> Ring {
            let frames = frames.next_power_of_two();
            Ring {
                buf: (0..frames as usize * WORDS).map(|_| UnsafeCell::new(0)).collect(),
                mask: frames - 1,
                tail: CachePadded::new(AtomicU64::new(0)),
                reader: CachePadded::new(AtomicU64::new(u64::MAX)),
            }
        }

        fn header(&self, seq: u64) -> &AtomicU64 {
            let word = self.buf[((seq & self.mask) as usize) * WORDS].get();
            // SAFETY: the header word is only ever accessed atomically, and
            // AtomicU64 has u64's size and (on x86-64) alignment.
            unsafe { &*word.cast::<AtomicU64>() }
        }

        pub fn publish(&self, payload: &[u8; 64]) {
            // Relaxed: one producer here; the claim orders nothing.
            let seq = self.tail.fetch_add(1, Ordering::Relaxed);
            let backoff = Backoff::new();
            // Acquire: the reader's reads of the frame's last use happen
            // before this write over it.
            while let r = self.reader.load(Ordering::Acquire)
                && r != u64::MAX
                && seq - r > self.mask
            {
                backoff.snooze();
            }
            let body = self.buf[((seq & self.mask) as usize) * WORDS + 1].get().cast::<u8>();
            // SAFETY: the frame is claimed and no reader is on it (above);
            // its body is 15 words, room for the 64 bytes.
            unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), body, 64) };
            // Release: the body's bytes before the commit the reader acquires.
            self.header(seq).store(seq + 1, Ordering::Release);
        }

        /// Reads frames `from..to` as they are committed.
        pub fn read(&self, from: u64, to: u64) {
            let backoff = Backoff::new();
            let mut seq = from;
            while seq < to {
                // Acquire: pairs with the commit's Release.
                if self.header(seq).load(Ordering::Acquire) != seq + 1 {
                    backoff.snooze();
                    continue;
                }
                backoff.reset();
                let body = self.buf[((seq & self.mask) as usize) * WORDS + 1].get().cast::<[u8; 64]>();
                // SAFETY: committed, and the producer does not write it again
                // until this reader's position passes it.
                black_box(unsafe { &*body });
                seq += 1;
                if seq.is_multiple_of(READ_RUN) || seq == to {
                    // Release: the reads above before the producer's reuse.
                    self.reader.store(seq, Ordering::Release);
                }
            }
        }
    }

    /// ns per message of publish alone, drain alone and both together.
    pub fn round(n: u64, backlog: u64, frames: u64) -> (f64, f64, f64) {
        let payload = [7u8; 64];
        let ring = Ring::new(frames);
        let start = Instant::now();
        for _ in 0..n {
            ring.publish(black_box(&payload));
        }
        let alone = start.elapsed().as_nanos() as f64 / n as f64;

        let big = Ring::new(backlog);
        for _ in 0..backlog {
            big.publish(&payload);
        }
        big.reader.store(0, Ordering::Release);
        let start = Instant::now();
        std::thread::scope(|s| s.spawn(|| big.read(0, backlog)).join().expect("reader"));
        let drain = start.elapsed().as_nanos() as f64 / backlog as f64;

        let ring = Arc::new(Ring::new(frames));
        ring.reader.store(0, Ordering::Release);
        let ready = AtomicBool::new(false);
        let start = std::thread::scope(|s| {
            s.spawn(|| {
                ready.store(true, Ordering::Release);
                ring.read(0, n)
            });
            while !ready.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let start = Instant::now();
            for _ in 0..n {
                ring.publish(black_box(&payload));
            }
            start
        });
        let together = start.elapsed().as_nanos() as f64 / n as f64;
        (alone, drain, together)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(4_000_000, |s| s.parse().expect("a message count"));
    let rounds: u32 = args.next().map_or(3, |s| s.parse().expect("a round count"));
    rill::clock::warm_up();
    println!("ns per message, 64 B, {n} messages a part; together's rate in brackets");
    println!(
        "{:>5}  {:>10}  {:>14}  {:>11}  {:>8}  {:>22}",
        "round", "drainer", "publish alone", "drain alone", "sum", "together"
    );
    let only = std::env::var("ONLY").ok();
    for r in 0..rounds {
        let order = if r % 2 == 0 { [false, true] } else { [true, false] };
        for dedicated in order {
            if only.as_deref().is_some_and(|o| (o == "pool") == dedicated) {
                continue;
            }
            let (alone, drain, together) = round(n, dedicated);
            println!(
                "{r:>5}  {:>10}  {alone:>14.1}  {drain:>11.1}  {:>8.1}  {together:>10.1} ({:>5.2} M/s)",
                if dedicated { "dedicated" } else { "pool" },
                alone + drain,
                1e3 / together
            );
        }
        let (alone, drain, together) = bare::round(n, BACKLOG, LAG_LIMIT);
        println!(
            "{r:>5}  {:>10}  {alone:>14.1}  {drain:>11.1}  {:>8.1}  {together:>10.1} ({:>5.2} M/s)",
            "bare",
            alone + drain,
            1e3 / together
        );
    }
}
