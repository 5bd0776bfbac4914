//! A driver for the dedicated-thread idle policy: 1 producer -> S push
//! subscribers, each on a thread of its own (`Overflow::Block`, lag limit
//! 4096, as rill-bench's fan-out-8-threads), N messages of 64 bytes, R rounds:
//!
//! ```text
//! cargo run --release --example fanthreads -- [S] [N] [R] [RATE] [pool]
//! ```
//!
//! With `pool` the subscribers share the broker's worker pool instead: what
//! a pool drainer's linger before going idle costs at low rates.
//!
//! With RATE (messages a second) the producer sleeps between messages to
//! keep that pace (a pacing, not a synchronisation): what the idle policy
//! costs when the drainers are mostly caught up.
//!
//! Prints per round the wall-clock rate per subscriber and what the process
//! spent: CPU ns per published message (user + system, all threads), and
//! voluntary and involuntary context switches per 1,000 messages. The CPU
//! per message is the figure that survives a shared machine best: a
//! subscriber that polls or yields without work shows there, whoever else
//! holds the cores.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rill::{Ack, Broker, BrokerConfig, Message, Overflow, Record, Subscription, SubscriptionOptions, TopicOptions};

/// The process's user + system CPU time in ns, and its voluntary and
/// involuntary context switches.
fn usage() -> (u64, u64, u64) {
    // SAFETY: getrusage writes one `rusage` into the zeroed value we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (ns(ru.ru_utime) + ns(ru.ru_stime), ru.ru_nvcsw as u64, ru.ru_nivcsw as u64)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let subs: usize = args.next().map_or(8, |s| s.parse().expect("a subscriber count"));
    let n: u64 = args.next().map_or(2_000_000, |s| s.parse().expect("a message count"));
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("a round count"));
    // A RATE of 0: unpaced (to give `pool` without a rate).
    let gap = args
        .next()
        .map(|s| s.parse::<f64>().expect("a rate"))
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs(1).div_f64(r));
    let dedicated = args.next().is_none_or(|m| m != "pool");
    rill::clock::warm_up();
    let payload = [7u8; 64];
    for _ in 0..rounds {
        let broker = Broker::new(BrokerConfig::default()).expect("broker");
        broker.create_topic("t", &TopicOptions::default()).expect("topic");
        let seen: Vec<Arc<AtomicU64>> = (0..subs).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let list: Vec<Subscription> = seen
            .iter()
            .map(|seen| {
                let seen = seen.clone();
                let options = SubscriptionOptions {
                    dedicated_thread: dedicated,
                    overflow: Overflow::Block,
                    lag_limit: Some(4096),
                    ..Default::default()
                };
                broker
                    .subscribe("t", options, move |m: &Message<'_>| {
                        black_box(m.payload());
                        // Relaxed: read after wait_all_idle, which orders it.
                        seen.fetch_add(1, Ordering::Relaxed);
                        Ack::Success
                    })
                    .expect("subscribe")
            })
            .collect();
        let refs: Vec<&Subscription> = list.iter().collect();
        let publisher = broker.publisher("t").expect("publisher");
        let (cpu0, v0, i0) = usage();
        let t0 = Instant::now();
        for i in 0..n {
            black_box(publisher.publish(&Record::new(&payload)).expect("publish"));
            if let Some(gap) = gap {
                let due = t0 + gap.mul_f64((i + 1) as f64);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
        }
        assert!(rill::broker::wait_all_idle(&refs, Duration::from_secs(600)).expect("wait"));
        let wall = t0.elapsed();
        let (cpu1, v1, i1) = usage();
        for s in &seen {
            assert_eq!(s.load(Ordering::Relaxed), n);
        }
        let k = n as f64 / 1000.0;
        println!(
            "{subs} subs: {:.2} M msgs/s per subscriber, {:.0} ns CPU per message, csw/1k voluntary {:.2} involuntary {:.2}",
            n as f64 / wall.as_secs_f64() / 1e6,
            (cpu1 - cpu0) as f64 / n as f64,
            (v1 - v0) as f64 / k,
            (i1 - i0) as f64 / k
        );
    }
}
