//! crossbeam-channel and flume, used the way a user fans out with an MPMC
//! channel: one bounded channel per subscriber, a thread per subscriber
//! receiving in a loop, and every producer sending each message to every
//! channel (a clone for all but the last). With several producers each holds
//! a clone of every `Sender` (the channels' own many-producer mode). The
//! channel carries the payload type alone (`[u8; 64]`, `Arc<[u8]>` or
//! `Vec<u8>`); a producer's timestamp, when it stamps one, is in the payload.

use std::thread::JoinHandle;

use super::env::Env;
use super::payload::Payload;
use crate::measure::{Outcome, ProducerFn, Run, Shape, Stamp, Tally, drive, execute, stamp_of};

/// crossbeam-channel: `bounded(capacity)` per subscriber.
pub fn run_crossbeam<P: Payload>(shape: &Shape, env: &Env) -> Outcome {
    run_channels(
        shape,
        env,
        crossbeam_channel::bounded::<P>,
        |tx, m| tx.send(m).is_ok(),
        |rx, mut t: Tally| {
            for m in rx {
                t.on(m.bytes(), || stamp_of(m.bytes()));
            }
        },
    )
}

/// flume: `bounded(capacity)` per subscriber.
#[cfg(feature = "peers")]
pub fn run_flume<P: Payload>(shape: &Shape, env: &Env) -> Outcome {
    run_channels(
        shape,
        env,
        flume::bounded::<P>,
        |tx, m| tx.send(m).is_ok(),
        |rx, mut t: Tally| {
            for m in rx {
                t.on(m.bytes(), || stamp_of(m.bytes()));
            }
        },
    )
}

/// Sends `m` on every channel in `txs`, a clone to all but the last; false
/// (and nothing more sent) as soon as one send fails, or with no channel.
///
/// `send` has one call site, as in a user's loop, and the harness and the
/// plain loop (`plain.rs`) share this code, so the self-check compares the
/// same send. It does not settle which of its two states one-to-one
/// crossbeam runs in here (the ring full and the sender waiting, the fast
/// one, or the ring empty and the receiver waiting on the sender's line,
/// several times slower): that changes from build to build with the code
/// around the loop (the plain-loop self-check of each comparison shows
/// which; see "How a comparison is made" in docs/PERFORMANCE.md).
#[inline(always)]
pub(crate) fn send_each<P: Clone, Tx>(txs: &[Tx], m: P, send: impl Fn(&Tx, P) -> bool) -> bool {
    let mut m = Some(m);
    for (i, tx) in txs.iter().enumerate() {
        let Some(msg) = (if i + 1 == txs.len() { m.take() } else { m.clone() }) else { return false };
        if !send(tx, msg) {
            return false;
        }
    }
    m.is_none()
}

fn run_channels<P, Tx, Rx, S>(
    shape: &Shape,
    env: &Env,
    make: fn(usize) -> (Tx, Rx),
    send: S,
    consume: fn(Rx, Tally),
) -> Outcome
where
    P: Payload,
    Tx: Clone + Send,
    Rx: Send + 'static,
    // A closure type, not a fn pointer: the send inlines into the producer loop.
    S: Fn(&Tx, P) -> bool + Copy + Send,
{
    let run = Run::new(shape);
    let (txs, rxs): (Vec<Tx>, Vec<Rx>) = (0..shape.subscribers).map(|_| make(shape.capacity.max(1))).unzip();
    let subs: Vec<JoinHandle<()>> = rxs
        .into_iter()
        .enumerate()
        .map(|(i, rx)| {
            let tally = run.tally(i);
            std::thread::Builder::new()
                .name(format!("bench-sub-{i}"))
                .spawn(move || consume(rx, tally))
                .expect("spawn a subscriber")
        })
        .collect();
    let producers: Vec<ProducerFn<'_>> = (0..shape.producers)
        .map(|p| {
            let txs = txs.clone();
            Box::new(move |run: &Run| {
                drive(shape, run, p, Stamp::for_peer(shape), |bufs| {
                    bufs.iter().all(|b| send_each(&txs, P::copy_from(b), send))
                })
            }) as ProducerFn<'_>
        })
        .collect();
    // Only the producers hold senders now: when they finish, the channels
    // disconnect and the subscriber threads end.
    drop(txs);
    let out = execute(&run, env.timeout, producers);
    for s in subs {
        let _ = s.join();
    }
    out
}
