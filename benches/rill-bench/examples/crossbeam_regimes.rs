//! crossbeam-channel one-to-one in four plain loops that differ only in what
//! the sender does besides sending, to show how far its rate moves with that:
//!
//! ```text
//! cargo run --release -p rill-bench --example crossbeam_regimes -- [ROUNDS] [MS] [receiver-first]
//! ```
//!
//! * `send only`: the sender writes a sequence number into a `[u8; 64]` and
//!   sends it, nothing more (the loop of the issue's "plain Rust loop");
//! * `+ a little`: the sender first writes the sequence number and a
//!   timestamp word (zero except on 1 in 64 messages, as rill-bench's
//!   producers stamp) into a heap buffer and copies the message out of it,
//!   a few nanoseconds more per message, as any producer that builds its
//!   message has; the 8-byte stores read back by the 64-byte copy are a
//!   store-forwarding stall each;
//! * `in place`: the same sequence number and timestamp word, written
//!   straight into the message (no buffer, no copy, no stall);
//! * `copy only`: the message copied out of a heap buffer that nothing
//!   writes (what rill-bench's plain loop does);
//! * `rill-bench`: rill-bench's own plain loop for crossbeam one-to-one
//!   (`plain::run`), the self-check's reference, which must run at the
//!   rates of the loops above to be one.
//!
//! The receiver `black_box`es and counts in a local until the channel
//! disconnects; `bounded(4096)`, as in rill-bench. It starts after the
//! sender, or (`receiver-first`) before it, waiting on the empty channel as
//! rill-bench's plain loop's receiver does. Rounds alternate between the
//! loops; each prints its rate and the median.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Messages a sender sends between two looks at the clock.
const CLOCK_EVERY: u64 = 256;
/// One in this many messages carries a timestamp in the `+ a little` loop.
const STAMP_EVERY: u64 = 64;

/// What a sender does besides sending.
#[derive(Clone, Copy, PartialEq)]
enum Sender {
    SendOnly,
    ALittle,
    InPlace,
    CopyOnly,
    RillBench,
}

/// One round of rill-bench's plain loop for crossbeam one-to-one.
fn rill_bench_round(run: Duration) -> f64 {
    use rill_bench::measure::Amount;
    use rill_bench::systems::{Env, System};
    let shape = rill_bench::measure::Shape {
        amount: Amount::Seconds(run.as_secs_f64()),
        ..rill_bench::scenarios::base_shape()
    };
    let env = Env::default();
    rill_bench::plain::run(System::Crossbeam, &shape, &env).expect("crossbeam has a plain loop").msgs_per_sec()
}

fn round(sender_does: Sender, receiver_first: bool, run: Duration) -> f64 {
    if sender_does == Sender::RillBench {
        return rill_bench_round(run);
    }
    let (tx, rx) = crossbeam_channel::bounded::<[u8; 64]>(4096);
    let receive = move || rx.into_iter().map(black_box).count();
    let mut receive = Some(receive);
    let early = receiver_first.then(|| std::thread::spawn(receive.take().expect("not taken yet")));
    let start = Instant::now();
    let sender = std::thread::spawn(move || {
        let mut msg = [7u8; 64];
        let mut buf = vec![5u8; 64];
        let mut seq = 0u64;
        let mut until_stamp = STAMP_EVERY;
        let end = Instant::now() + run;
        loop {
            for _ in 0..CLOCK_EVERY {
                let mut stamp = || {
                    until_stamp -= 1;
                    if until_stamp == 0 {
                        until_stamp = STAMP_EVERY;
                        start.elapsed().as_nanos() as u64
                    } else {
                        0
                    }
                };
                match sender_does {
                    Sender::SendOnly => msg[..8].copy_from_slice(&seq.to_le_bytes()),
                    Sender::ALittle => {
                        buf[..8].copy_from_slice(&seq.to_le_bytes());
                        buf[8..16].copy_from_slice(&stamp().to_le_bytes());
                        msg.copy_from_slice(&buf);
                    }
                    Sender::InPlace => {
                        msg[..8].copy_from_slice(&seq.to_le_bytes());
                        msg[8..16].copy_from_slice(&stamp().to_le_bytes());
                    }
                    Sender::CopyOnly => msg.copy_from_slice(&buf),
                    Sender::RillBench => unreachable!("run by rill_bench_round"),
                }
                if tx.send(msg).is_err() {
                    return;
                }
                seq += 1;
            }
            if Instant::now() >= end {
                return;
            }
        }
    });
    let received = match early {
        Some(h) => h.join().expect("the receiver"),
        None => std::thread::spawn(receive.take().expect("not taken yet")).join().expect("the receiver"),
    };
    let elapsed = start.elapsed();
    sender.join().expect("the sender");
    received as f64 / elapsed.as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(10, |s| s.parse().expect("a round count"));
    let ms: u64 = args.next().map_or(300, |s| s.parse().expect("milliseconds per round"));
    let receiver_first = args.next().is_some_and(|a| a == "receiver-first");
    let run = Duration::from_millis(ms);
    let loops = [
        ("send only", Sender::SendOnly),
        ("+ a little", Sender::ALittle),
        ("in place", Sender::InPlace),
        ("copy only", Sender::CopyOnly),
        ("rill-bench", Sender::RillBench),
    ];
    let mut rates = vec![Vec::new(); loops.len()];
    for _ in 0..rounds {
        for ((_, sender_does), r) in loops.iter().zip(&mut rates) {
            r.push(round(*sender_does, receiver_first, run));
        }
    }
    for ((name, _), r) in loops.iter().zip(&mut rates) {
        let all: Vec<String> = r.iter().map(|x| format!("{:.1}", x / 1e6)).collect();
        println!("{name:>10}: median {:.1} M msgs/s; rounds {}", median(r) / 1e6, all.join(" "));
    }
}
