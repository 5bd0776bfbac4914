//! Each peer in the plain loop a user would write, outside the harness: the
//! self-check of every comparison.
//!
//! A harness adds work around a system (counting, sampling, finishing a run on
//! time), and that work can change how the system behaves, not just add a
//! constant: a receiver slowed by a few nanoseconds can push a bounded channel
//! from spinning into blocking, and the peer then runs at a fraction of its
//! speed while rill, slower per message already, barely notices. So every
//! comparison also times the peer in the loop its user would write, with
//! nothing of ours in it, and reports the harnessed peer's rate over this one:
//! below [`VALID_SHARE`], the comparison is marked invalid.
//!
//! The plain loops: the producer threads (released together) send the same
//! payload type the harness sends ([`PeerPayload::resolve`]), one message at a
//! time, each made from the producer's bytes as a user makes it (a `[u8; 64]`
//! copied out, an `Arc<[u8]>` allocated, then cloned per receiver), checking
//! the clock once per [`CLOCK_EVERY`] sends, for the run's duration (or count),
//! then drop their senders; every receiver `black_box`es
//! each message and counts it in a local until the channel disconnects. The
//! rate is messages received per receiver per second, from the producers'
//! release to the last receiver's end. rill and bare-log have none: rill is
//! what is measured, and bare-log is written here (its loop is the harness).

use std::hint::black_box;
#[cfg(feature = "peers")]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::measure::{Amount, Shape, voluntary_switches};
use crate::systems::channels::send_each;
use crate::systems::{Env, Inline, MAX_ARRAY_PAYLOAD, Payload, PeerPayload, System};

/// A harnessed peer slower than this share of its plain loop makes the
/// comparison invalid: the harness, not the peer, would set the ratio.
pub const VALID_SHARE: f64 = 0.8;

/// Sends between two looks at the clock in a duration-bounded plain loop.
pub const CLOCK_EVERY: u64 = 1024;

/// One run of a plain loop.
#[derive(Debug, Clone, Serialize)]
pub struct Plain {
    /// Messages sent (all producers).
    pub published: u64,
    /// Messages received, summed over receivers.
    pub delivered: u64,
    /// Receivers.
    pub subscribers: usize,
    /// From releasing the producers to the last receiver's end.
    pub elapsed_ns: u64,
    /// Voluntary context switches of the process during the run.
    pub ctx_switches: u64,
}

impl Plain {
    /// Messages received per receiver per second.
    pub fn msgs_per_sec(&self) -> f64 {
        if self.elapsed_ns == 0 || self.subscribers == 0 {
            return 0.0;
        }
        self.delivered as f64 / self.subscribers as f64 / (self.elapsed_ns as f64 / 1e9)
    }

    /// Voluntary context switches per 1,000 received messages.
    pub fn switches_per_1k(&self) -> f64 {
        if self.delivered == 0 { 0.0 } else { self.ctx_switches as f64 * 1000.0 / self.delivered as f64 }
    }
}

/// Whether `system` has a plain loop for `shape` (not rill or bare-log, not a
/// paced shape, and not bus with several producers).
pub fn available(system: System, shape: &Shape) -> bool {
    !matches!(system, System::Rill | System::BareLog)
        && system.built()
        && shape.rate.is_none()
        && !(system == System::Bus && shape.producers > 1)
}

/// Runs `system`'s plain loop once in `shape` (`None` if it has none).
pub fn run(system: System, shape: &Shape, env: &Env) -> Option<Plain> {
    if !available(system, shape) {
        return None;
    }
    #[cfg(feature = "peers")]
    if system == System::Disruptor {
        return Some(disruptor(shape));
    }
    Some(match (env.peer_payload.resolve(shape), shape.payload) {
        (PeerPayload::Vec, _) => typed::<Vec<u8>>(system, shape, env),
        (PeerPayload::Arc, _) => typed::<Arc<[u8]>>(system, shape, env),
        (_, 64) => typed::<[u8; 64]>(system, shape, env),
        (_, 256) => typed::<[u8; 256]>(system, shape, env),
        (_, 1024) => typed::<[u8; 1024]>(system, shape, env),
        (_, MAX_ARRAY_PAYLOAD) => typed::<[u8; MAX_ARRAY_PAYLOAD]>(system, shape, env),
        (_, 0..=64) => typed::<Inline<64>>(system, shape, env),
        (_, 65..=256) => typed::<Inline<256>>(system, shape, env),
        (_, 257..=1024) => typed::<Inline<1024>>(system, shape, env),
        _ => typed::<Inline<MAX_ARRAY_PAYLOAD>>(system, shape, env),
    })
}

// `env` is the tokio loop's alone.
#[cfg_attr(not(feature = "peers"), allow(unused_variables))]
fn typed<P: Payload>(system: System, shape: &Shape, env: &Env) -> Plain {
    let cap = shape.capacity.max(1);
    match system {
        System::Crossbeam => channels(
            shape,
            || crossbeam_channel::bounded::<P>(cap),
            |rx| rx.into_iter().map(black_box).count(),
            |tx, m| tx.send(m).is_ok(),
        ),
        #[cfg(feature = "peers")]
        System::Flume => channels(
            shape,
            || flume::bounded::<P>(cap),
            |rx| rx.into_iter().map(black_box).count(),
            |tx, m| tx.send(m).is_ok(),
        ),
        #[cfg(feature = "peers")]
        System::Tokio | System::TokioBlocking => {
            tokio_loop::<P>(system == System::TokioBlocking, shape, env, &vec![0x5A; shape.payload])
        }
        #[cfg(feature = "peers")]
        System::Bus => {
            let body = vec![0x5A; shape.payload];
            let subs = shape.subscribers.max(1);
            let mut bus = bus::Bus::<P>::new(cap);
            let receivers = (0..subs)
                .map(|_| {
                    let mut rx = bus.add_rx();
                    receiver(move || rx.iter().map(black_box).count())
                })
                .collect();
            let mut bus = Some(bus);
            timed(shape, receivers, |_| {
                let mut bus = bus.take().expect("one producer");
                let body = body.clone();
                move || {
                    bus.broadcast(P::copy_from(&body));
                    true
                }
            })
        }
        // Rill, bare-log and disruptor have none; the others are built with `peers`.
        _ => unreachable!("no generic plain loop for {}", system.name()),
    }
}

/// A bounded channel per receiver (`make` builds one): each producer sends
/// every message to every channel, the receivers count until disconnected.
/// `count` and `send` are closure types, not fn pointers, so the send inlines
/// into the producer's loop as in a user's.
fn channels<P, Tx, Rx, C, S>(shape: &Shape, make: impl Fn() -> (Tx, Rx), count: C, send: S) -> Plain
where
    P: Payload,
    Tx: Clone + Send + 'static,
    Rx: Send + 'static,
    C: Fn(Rx) -> usize + Copy + Send + 'static,
    S: Fn(&Tx, P) -> bool + Copy + Send + 'static,
{
    let body = vec![0x5A; shape.payload];
    let (txs, rxs): (Vec<Tx>, Vec<Rx>) = (0..shape.subscribers.max(1)).map(|_| make()).unzip();
    let receivers = rxs.into_iter().map(|rx| receiver(move || count(rx))).collect();
    // `move`: the producers' clones are the only senders once `make` is dropped.
    timed(shape, receivers, move |_| {
        let (txs, body) = (txs.clone(), body.clone());
        move || send_each(&txs, P::copy_from(&body), send)
    })
}

/// A receiver thread running `count` (which returns when its channel
/// disconnects, with what it received) and noting when it ended.
fn receiver(count: impl FnOnce() -> usize + Send + 'static) -> JoinHandle<(u64, Instant)> {
    std::thread::Builder::new()
        .name("plain-recv".into())
        .spawn(move || (count() as u64, Instant::now()))
        .expect("spawn a receiver")
}

/// Runs `shape.producers` producer threads, each calling the step that
/// `make(i)` returns (one message per call; false stops it) for the shape's
/// duration or count, then dropping it; waits for `receivers` and measures.
fn timed<S: FnMut() -> bool + Send>(
    shape: &Shape,
    receivers: Vec<JoinHandle<(u64, Instant)>>,
    mut make: impl FnMut(usize) -> S,
) -> Plain {
    let steps: Vec<S> = (0..shape.producers.max(1)).map(&mut make).collect();
    drop(make); // the producers now hold the only senders
    let barrier = Barrier::new(steps.len() + 1);
    let switches = voluntary_switches();
    let (start, published) = std::thread::scope(|s| {
        let handles: Vec<_> = steps
            .into_iter()
            .map(|mut step| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let sent = send_for(shape, &mut step);
                    drop(step);
                    sent
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        (start, handles.into_iter().map(|h| h.join().expect("plain producer")).sum::<u64>())
    });
    finish(shape, start, published, switches, receivers)
}

/// Calls `step` for the shape's count, or until its duration has passed.
///
/// `step` has one call site, whichever the amount, as in the loop a user
/// writes (two loops, one per amount, gave the compiler two copies to
/// inline or not).
fn send_for(shape: &Shape, step: &mut impl FnMut() -> bool) -> u64 {
    let (limit, deadline) = match shape.amount {
        Amount::Messages(n) => (n, None),
        Amount::Seconds(secs) => (u64::MAX, Some(Instant::now() + Duration::from_secs_f64(secs))),
    };
    let mut sent = 0u64;
    loop {
        let chunk = (limit - sent).min(CLOCK_EVERY);
        if chunk == 0 {
            return sent;
        }
        for _ in 0..chunk {
            if !step() {
                return sent;
            }
            sent += 1;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return sent;
        }
    }
}

fn finish(
    shape: &Shape,
    start: Instant,
    published: u64,
    switches: u64,
    receivers: Vec<JoinHandle<(u64, Instant)>>,
) -> Plain {
    let mut delivered = 0;
    let mut end = start;
    for r in receivers {
        let (n, at) = r.join().expect("plain receiver");
        delivered += n;
        end = end.max(at);
    }
    Plain {
        published,
        delivered,
        subscribers: shape.subscribers.max(1),
        elapsed_ns: end.duration_since(start).as_nanos().max(1) as u64,
        ctx_switches: voluntary_switches().saturating_sub(switches),
    }
}

/// tokio broadcast: receivers as tasks on a multi-thread runtime, or on
/// threads with `blocking_recv`; a lagged receiver skips (counts nothing).
#[cfg(feature = "peers")]
fn tokio_loop<P: Payload>(blocking: bool, shape: &Shape, env: &Env, body: &[u8]) -> Plain {
    use tokio::sync::broadcast::{self, error::RecvError};
    let (tx, _) = broadcast::channel::<P>(shape.capacity.max(1));
    let rt = (!blocking).then(|| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(env.workers()).build().expect("a tokio runtime")
    });
    let mut tasks = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..shape.subscribers.max(1) {
        let mut rx = tx.subscribe();
        match &rt {
            Some(rt) => tasks.push(rt.spawn(async move {
                let mut n = 0u64;
                loop {
                    match rx.recv().await {
                        Ok(m) => {
                            black_box(m);
                            n += 1;
                        }
                        Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return (n, Instant::now()),
                    }
                }
            })),
            None => receivers.push(receiver(move || {
                let mut n = 0usize;
                loop {
                    match rx.blocking_recv() {
                        Ok(m) => {
                            black_box(m);
                            n += 1;
                        }
                        Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return n,
                    }
                }
            })),
        }
    }
    let barrier = Barrier::new(shape.producers.max(1) + 1);
    let switches = voluntary_switches();
    let (start, published) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..shape.producers.max(1))
            .map(|_| {
                let (tx, body, barrier) = (tx.clone(), body.to_vec(), &barrier);
                s.spawn(move || {
                    barrier.wait();
                    // A send fails only with no receiver left; the message is
                    // then simply not delivered, as for a user.
                    send_for(shape, &mut || {
                        let _ = tx.send(P::copy_from(&body));
                        true
                    })
                })
            })
            .collect();
        drop(tx);
        barrier.wait();
        let start = Instant::now();
        (start, handles.into_iter().map(|h| h.join().expect("plain producer")).sum::<u64>())
    });
    let mut plain = finish(shape, start, published, switches, receivers);
    if let Some(rt) = rt {
        let ends: Vec<(u64, Instant)> =
            rt.block_on(async { futures_join(tasks).await }).into_iter().flatten().collect();
        plain.delivered += ends.iter().map(|e| e.0).sum::<u64>();
        let end = ends.iter().map(|e| e.1).max().unwrap_or(start);
        plain.elapsed_ns = end.duration_since(start).as_nanos().max(1) as u64;
        plain.ctx_switches = voluntary_switches().saturating_sub(switches);
    }
    plain
}

/// Awaits every task, in order.
#[cfg(feature = "peers")]
async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<Option<T>> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.ok());
    }
    out
}

/// A processor's count, published when the Disruptor drops its handler (on
/// shutdown, after the processor handled everything).
#[cfg(feature = "peers")]
struct Counter {
    n: u64,
    out: Arc<AtomicU64>,
    end: Arc<std::sync::Mutex<Option<Instant>>>,
}

#[cfg(feature = "peers")]
impl Counter {
    #[inline]
    fn add(&mut self) {
        self.n += 1;
    }
}

#[cfg(feature = "peers")]
impl Drop for Counter {
    fn drop(&mut self) {
        self.out.fetch_add(self.n, Ordering::Relaxed);
        let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
        *end = Some(end.map_or(Instant::now(), |e| e.max(Instant::now())));
    }
}

/// disruptor: a ring of pre-allocated payload buffers filled in place with
/// `publish`, `BusySpin` processors whose handlers `black_box` and count.
#[cfg(feature = "peers")]
fn disruptor(shape: &Shape) -> Plain {
    use disruptor::{BusySpin, Sequence};
    let size = shape.capacity.max(2).next_power_of_two();
    let payload = shape.payload;
    let body = vec![0x5A; payload];
    let factory = move || vec![0u8; payload];
    let total = Arc::new(AtomicU64::new(0));
    let end = Arc::new(std::sync::Mutex::new(None));
    let handler = || {
        let mut c = Counter { n: 0, out: total.clone(), end: end.clone() };
        move |e: &Vec<u8>, _: Sequence, _: bool| {
            black_box(e);
            c.add();
        }
    };
    let subs = shape.subscribers.max(1);
    let switches = voluntary_switches();
    let (start, published) = if shape.producers <= 1 {
        let mut b = disruptor::build_single_producer(size, factory, BusySpin).with_multi_consumer();
        for _ in 0..subs {
            b = b.handle_events_with(handler());
        }
        let p = b.build();
        run_disruptor(shape, &body, vec![p])
    } else {
        let mut b = disruptor::build_multi_producer(size, factory, BusySpin).with_multi_consumer();
        for _ in 0..subs {
            b = b.handle_events_with(handler());
        }
        let p = b.build();
        let mut ps: Vec<_> = (1..shape.producers).map(|_| p.clone()).collect();
        ps.push(p);
        run_disruptor(shape, &body, ps)
    };
    let end = end.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(start);
    Plain {
        published,
        delivered: total.load(Ordering::Relaxed),
        subscribers: subs,
        elapsed_ns: end.duration_since(start).as_nanos().max(1) as u64,
        ctx_switches: voluntary_switches().saturating_sub(switches),
    }
}

/// Releases the producers together; each publishes for the shape's duration
/// and then drops its handle (the last drop waits for the processors).
#[cfg(feature = "peers")]
fn run_disruptor<P: disruptor::Producer<Vec<u8>> + Send>(shape: &Shape, body: &[u8], ps: Vec<P>) -> (Instant, u64) {
    let barrier = Barrier::new(ps.len() + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = ps
            .into_iter()
            .map(|mut p| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let sent = send_for(shape, &mut || {
                        p.publish(|e| e.copy_from_slice(body));
                        true
                    });
                    drop(p);
                    sent
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        (start, handles.into_iter().map(|h| h.join().expect("plain producer")).sum::<u64>())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{Delivery, SubMode, Work};
    use crate::systems::RillOverflow;

    #[test]
    fn every_plain_loop_delivers_everything_it_sent() {
        for (producers, subscribers) in [(1, 1), (2, 1), (1, 3)] {
            let shape = Shape {
                producers,
                subscribers,
                mode: SubMode::Pool,
                partitions: 1,
                payload: 64,
                batch: 1,
                poll_batch: 64,
                amount: Amount::Messages(5000),
                rate: None,
                capacity: 64,
                delivery: Delivery::AtLeastOnce,
                sample_every: 64,
                idle_spin_us: 0,
                work: Work::Minimal,
                handler: crate::measure::HandlerCost::Free,
                persist: None,
            };
            let env = Env {
                workers: Some(2),
                retention_mib: 1,
                warmup: false,
                overflow: RillOverflow::Block,
                batch_handler: false,
                peer_payload: PeerPayload::Auto,
                timeout: Duration::from_secs(60),
                state_probes: false,
            };
            let systems = [System::Crossbeam, System::Flume, System::Bus, System::Disruptor, System::TokioBlocking];
            for system in systems.into_iter().filter(|s| s.built()) {
                let what = format!("{system:?}, {producers} -> {subscribers}");
                let Some(p) = run(system, &shape, &env) else {
                    assert!(system == System::Bus && producers > 1, "{what}");
                    continue;
                };
                assert_eq!(p.published, 5000 * producers as u64, "{what}");
                if system == System::TokioBlocking {
                    assert!(p.delivered <= p.published * subscribers as u64, "{what}");
                } else {
                    assert_eq!(p.delivered, p.published * subscribers as u64, "{what}");
                }
                assert!(p.msgs_per_sec() > 0.0, "{what}");
            }
            assert!(run(System::Rill, &shape, &env).is_none());
            assert!(run(System::BareLog, &shape, &env).is_none());
        }
    }
}
