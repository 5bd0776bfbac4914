//! bus: one `Bus::new(capacity)`, a `BusReader` per subscriber (added before
//! publishing starts) on its own thread iterating `rx.iter()`, and the single
//! producer calling `broadcast` (which blocks while the ring is full). bus is
//! single-producer by design (`broadcast` takes `&mut self`), so shapes with
//! more producers are reported as unsupported rather than wrapped in a lock.

use bus::Bus;

use super::env::Env;
use super::payload::Payload;
use crate::measure::{Outcome, ProducerFn, Run, Shape, Stamp, Status, drive, execute, stamp_of};

/// Runs `shape` once.
pub fn run<P: Payload>(shape: &Shape, env: &Env) -> Outcome {
    if shape.producers != 1 {
        return Outcome::not_run(
            Status::Unsupported("bus has a single producer (Bus::broadcast takes &mut self)".into()),
            shape.subscribers,
        );
    }
    let run = Run::new(shape);
    let mut bus: Bus<P> = Bus::new(shape.capacity.max(1));
    let subs: Vec<_> = (0..shape.subscribers)
        .map(|i| {
            let mut rx = bus.add_rx();
            let mut t = run.tally(i);
            std::thread::Builder::new()
                .name(format!("bench-sub-{i}"))
                .spawn(move || {
                    for m in rx.iter() {
                        t.on(m.bytes(), || stamp_of(m.bytes()));
                    }
                })
                .expect("spawn a subscriber")
        })
        .collect();
    let producer: ProducerFn<'_> = Box::new(move |run: &Run| {
        drive(shape, run, 0, Stamp::for_peer(shape), |bufs| {
            for b in bufs {
                bus.broadcast(P::copy_from(b));
            }
            true
        })
        // Dropping the bus here disconnects the readers once they drain.
    });
    let out = execute(&run, env.timeout, vec![producer]);
    for s in subs {
        let _ = s.join();
    }
    out
}
