//! bare-log: the practical ceiling. The smallest log that does the same work
//! as rill's, written here so that rill can be measured against it in the
//! same run: a frame ring with no topics, partitions, retention, attributes,
//! keys, acks, filters or wake-ups, in the style of an Aeron log buffer.
//!
//! * A producer claims frames with one `fetch_add` on the tail (several
//!   producers may share it), waits until the slowest reader has left those
//!   frames, copies the timestamp and payload in, and commits each frame with
//!   a `Release` store of its sequence number into the frame's header.
//! * Each subscriber is a thread with its own position. It polls the header
//!   of its next frame with `Acquire`, hands the payload to the tally in
//!   place (no copy), and publishes its position once per run of up to 64
//!   frames, so the producer's view of it costs one cache line transfer per
//!   run rather than per message.
//! * An idle subscriber spins, then yields, then sleeps 20 µs at a time (an
//!   Aeron-style backoff idle strategy), so it needs no wake-up from the
//!   producer and runs with more threads than cores.
//!
//! Frames are fixed-size (the run's payload size), which a log with
//! variable-size records cannot assume; so this is a generous ceiling.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_utils::{Backoff, CachePadded};
use rill::clock::now_ns;

use super::env::Env;
use crate::measure::{Outcome, ProducerFn, Run, Shape, Stamp, Tally, drive, execute};

/// Frames a subscriber reads before it publishes its position.
const READ_RUN: u64 = 64;

/// A frame's header word before its first commit.
const EMPTY: u64 = 0;

/// The shared ring.
struct Ring {
    /// `frames` frames of `words` 8-byte words each: the commit header
    /// (sequence number + 1), the timestamp, then the payload.
    buf: Box<[UnsafeCell<u64>]>,
    words: usize,
    mask: u64,
    frames: u64,
    payload: usize,
    /// The next frame to claim.
    tail: CachePadded<AtomicU64>,
    /// Each subscriber's next frame to read.
    readers: Box<[CachePadded<AtomicU64>]>,
}

// SAFETY: frame bodies are written by the one producer that claimed the
// frame, only after every reader has moved past its previous use (acquired
// from their positions), and read only after its commit (acquired from the
// header): accesses to a frame body never overlap. Headers are atomics.
unsafe impl Sync for Ring {}

impl Ring {
    fn new(capacity: usize, payload: usize, subscribers: usize) -> Ring {
        let frames = capacity.max(2).next_power_of_two();
        let words = (2 + payload.div_ceil(8)).next_multiple_of(8);
        Ring {
            buf: (0..frames * words).map(|_| UnsafeCell::new(EMPTY)).collect(),
            words,
            mask: frames as u64 - 1,
            frames: frames as u64,
            payload,
            tail: CachePadded::new(AtomicU64::new(0)),
            readers: (0..subscribers).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
        }
    }

    /// The first word of frame `seq`.
    #[inline]
    fn frame(&self, seq: u64) -> *mut u64 {
        self.buf[((seq & self.mask) as usize) * self.words].get()
    }

    #[inline]
    fn header(&self, seq: u64) -> &AtomicU64 {
        // SAFETY: the header word is 8-aligned, inside `buf`, and only ever
        // accessed atomically (through this function).
        unsafe { AtomicU64::from_ptr(self.frame(seq)) }
    }

    /// The slowest reader's position.
    #[inline]
    fn min_reader(&self) -> u64 {
        // Acquire: pairs with the readers' Release stores, so their reads of a
        // frame happen before the producer overwrites it.
        self.readers.iter().map(|r| r.load(Ordering::Acquire)).min().unwrap_or(u64::MAX)
    }

    /// Publishes `bufs` (one frame each); false if the run was aborted while
    /// waiting for room. `limit` caches the producer's last view of the room.
    fn publish(&self, bufs: &[Vec<u8>], limit: &mut u64, run: &Run) -> bool {
        let n = bufs.len() as u64;
        // Relaxed: the claim only has to hand out disjoint frames; the frames'
        // contents are published by the header stores below.
        let first = self.tail.fetch_add(n, Ordering::Relaxed);
        let backoff = Backoff::new();
        while first + n > *limit {
            *limit = self.min_reader().saturating_add(self.frames);
            if first + n <= *limit {
                break;
            }
            if run.aborted() {
                return false;
            }
            backoff.snooze();
        }
        let ts = now_ns();
        for (k, b) in bufs.iter().enumerate() {
            let seq = first + k as u64;
            let f = self.frame(seq);
            // SAFETY: frame `seq` is ours (claimed above) and every reader has
            // passed its previous use (the wait above); the body is `words - 1`
            // words long, room for the timestamp and `payload` bytes.
            unsafe {
                f.add(1).write(ts);
                std::ptr::copy_nonoverlapping(b.as_ptr(), f.add(2).cast::<u8>(), b.len().min(self.payload));
            }
            // Release: pairs with the reader's Acquire of the header, so it
            // sees the body written above.
            self.header(seq).store(seq + 1, Ordering::Release);
        }
        true
    }

    /// Subscriber `i`'s loop until its tally has everything or the run ends.
    fn read(&self, i: usize, mut t: Tally, run: &Run) {
        let mut pos = 0u64;
        let mut published = 0u64;
        let backoff = Backoff::new();
        while !t.done() && !run.aborted() {
            // Acquire: pairs with the producer's Release of the header.
            if self.header(pos).load(Ordering::Acquire) == pos + 1 {
                let f = self.frame(pos);
                // SAFETY: frame `pos` is committed (header above) and the
                // producer will not reuse it until our position passes it.
                let payload = unsafe { std::slice::from_raw_parts(f.add(2).cast::<u8>(), self.payload) };
                // SAFETY: as above; the timestamp word is part of the same committed frame.
                t.on(payload, || unsafe { f.add(1).read() });
                pos += 1;
                if pos - published >= READ_RUN {
                    // Release: see `min_reader`.
                    self.readers[i].store(pos, Ordering::Release);
                    published = pos;
                }
                backoff.reset();
                continue;
            }
            if pos != published {
                // Release: see `min_reader`. Caught up: let the producer reuse
                // everything read so far.
                self.readers[i].store(pos, Ordering::Release);
                published = pos;
            }
            if backoff.is_completed() {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                backoff.snooze();
            }
        }
    }
}

/// Runs `shape` once.
pub fn run(shape: &Shape, env: &Env) -> Outcome {
    let run = Run::new(shape);
    let ring = Arc::new(Ring::new(shape.capacity, shape.payload, shape.subscribers));
    let subs: Vec<_> = (0..shape.subscribers)
        .map(|i| {
            let (ring, run, t) = (ring.clone(), run.clone(), run.tally(i));
            std::thread::Builder::new()
                .name(format!("bench-sub-{i}"))
                .spawn(move || ring.read(i, t, &run))
                .expect("spawn a subscriber")
        })
        .collect();
    let producers: Vec<ProducerFn<'_>> = (0..shape.producers)
        .map(|p| {
            let ring = ring.clone();
            Box::new(move |run: &Run| {
                let mut limit = 0;
                // Stamp::Never: like rill, the log stamps every frame itself.
                drive(shape, run, p, Stamp::Never, |bufs| ring.publish(bufs, &mut limit, run))
            }) as ProducerFn<'_>
        })
        .collect();
    let out = execute(&run, env.timeout, producers);
    for s in subs {
        let _ = s.join();
    }
    out
}
