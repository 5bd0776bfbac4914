//! disruptor (v4 API): a ring of `capacity` (rounded up to a power of two)
//! pre-allocated events, each a payload buffer of the run's size (the
//! producer's timestamp, when it stamps one, is in the payload), filled in
//! place by the producer (the Disruptor's own idiom: no
//! allocation per message). Every subscriber is an event handler closure on a
//! processor thread the Disruptor manages, with the `BusySpin` wait strategy
//! its documentation uses. One producer uses `build_single_producer`, several
//! use `build_multi_producer` and clone the producer; batches go through
//! `batch_publish`.
//!
//! Busy-spinning processors need a core each: with more threads than cores they
//! spin through their time slices while the thread that has work waits. The
//! harness publishes with `try_publish` and gives up when the run's time cap
//! passes, so such a run ends as a timeout instead of hanging.

use disruptor::{BusySpin, MissingFreeSlots, Producer, RingBufferFull, Sequence};

use super::env::Env;
use crate::measure::{Outcome, ProducerFn, Run, Shape, Stamp, Tally, drive, execute, stamp_of};

/// One slot of the ring.
#[derive(Debug)]
struct Event {
    data: Vec<u8>,
}

fn handler(mut t: Tally) -> impl FnMut(&Event, Sequence, bool) + Send + 'static {
    move |e: &Event, _seq: Sequence, _end_of_batch: bool| t.on(&e.data, || stamp_of(&e.data))
}

/// Runs `shape` once.
pub fn run(shape: &Shape, env: &Env) -> Outcome {
    let run = Run::new(shape);
    let size = shape.capacity.max(2).next_power_of_two();
    let payload = shape.payload;
    let factory = move || Event { data: vec![0; payload] };
    let (single_producer, single_consumer) = (shape.producers == 1, shape.subscribers == 1);
    if single_producer {
        if single_consumer {
            let p = disruptor::build_single_producer(size, factory, BusySpin)
                .handle_events_with(handler(run.tally(0)))
                .build();
            drive_all(shape, env, &run, vec![p])
        } else {
            let mut b = disruptor::build_single_producer(size, factory, BusySpin).with_multi_consumer();
            for i in 0..shape.subscribers {
                b = b.handle_events_with(handler(run.tally(i)));
            }
            drive_all(shape, env, &run, vec![b.build()])
        }
    } else if single_consumer {
        let p =
            disruptor::build_multi_producer(size, factory, BusySpin).handle_events_with(handler(run.tally(0))).build();
        let mut ps: Vec<_> = (1..shape.producers).map(|_| p.clone()).collect();
        ps.push(p);
        drive_all(shape, env, &run, ps)
    } else {
        let mut b = disruptor::build_multi_producer(size, factory, BusySpin).with_multi_consumer();
        for i in 0..shape.subscribers {
            b = b.handle_events_with(handler(run.tally(i)));
        }
        let p = b.build();
        let mut ps: Vec<_> = (1..shape.producers).map(|_| p.clone()).collect();
        ps.push(p);
        drive_all(shape, env, &run, ps)
    }
}

fn drive_all<P: Producer<Event> + Send>(
    shape: &Shape,
    env: &Env,
    run: &std::sync::Arc<Run>,
    producers: Vec<P>,
) -> Outcome {
    let fns: Vec<ProducerFn<'_>> = producers
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| {
            Box::new(move |run: &Run| {
                drive(shape, run, i, Stamp::for_peer(shape), |bufs| publish(&mut p, bufs, run))
                // Dropping the last producer shuts the Disruptor down: it waits
                // for the processors to handle everything published.
            }) as ProducerFn<'_>
        })
        .collect();
    execute(run, env.timeout, fns)
}

fn publish<P: Producer<Event>>(p: &mut P, bufs: &[Vec<u8>], run: &Run) -> bool {
    if let [one] = bufs {
        loop {
            let fill = |e: &mut Event| e.data.copy_from_slice(one);
            match p.try_publish(fill) {
                Ok(_) => return true,
                Err(RingBufferFull) if run.aborted() => return false,
                Err(RingBufferFull) => std::hint::spin_loop(),
            }
        }
    }
    loop {
        let published = p.try_batch_publish(bufs.len(), |events| {
            for (e, b) in events.zip(bufs) {
                e.data.copy_from_slice(b);
            }
        });
        match published {
            Ok(_) => return true,
            Err(MissingFreeSlots(_)) if run.aborted() => return false,
            Err(MissingFreeSlots(_)) => std::hint::spin_loop(),
        }
    }
}
