//! tokio::sync::broadcast: one channel of `capacity`, a `Receiver` per
//! subscriber (created with `subscribe()` before publishing starts), producers
//! on OS threads calling the synchronous `Sender::send`.
//!
//! * async (`tokio`): each receiver is a task on a multi-thread runtime with
//!   one worker per core, looping on `recv().await`;
//! * blocking (`tokio-blocking`): each receiver is an OS thread looping on
//!   `blocking_recv()`, as tokio documents for use outside a runtime.
//!
//! broadcast never blocks the sender: a receiver that falls `capacity` behind
//! gets `RecvError::Lagged(n)` and skips `n` messages. Those are counted as
//! lost and earn no throughput.

use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use super::env::Env;
use super::payload::Payload;
use crate::measure::{Outcome, ProducerFn, Run, Shape, Stamp, Status, Tally, drive, execute, stamp_of};

/// Runs `shape` once; `blocking` picks OS threads over async tasks.
pub fn run<P: Payload>(shape: &Shape, env: &Env, blocking: bool) -> Outcome {
    let run = Run::new(shape);
    let (tx, _) = broadcast::channel::<P>(shape.capacity.max(1));
    let rxs: Vec<_> = (0..shape.subscribers).map(|_| tx.subscribe()).collect();
    let mut threads = Vec::new();
    let mut tasks = Vec::new();
    let rt = if blocking {
        None
    } else {
        match tokio::runtime::Builder::new_multi_thread().worker_threads(env.workers()).build() {
            Ok(rt) => Some(rt),
            Err(e) => return Outcome::not_run(Status::Failed(e.to_string()), shape.subscribers),
        }
    };
    for (i, mut rx) in rxs.into_iter().enumerate() {
        let mut t = run.tally(i);
        match &rt {
            Some(rt) => tasks.push(rt.spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(m) => t.on(m.bytes(), || stamp_of(m.bytes())),
                        Err(RecvError::Lagged(n)) => t.missed(n),
                        Err(RecvError::Closed) => break,
                    }
                }
            })),
            None => threads.push(
                std::thread::Builder::new()
                    .name(format!("bench-sub-{i}"))
                    .spawn(move || blocking_loop(&mut rx, &mut t))
                    .expect("spawn a subscriber"),
            ),
        }
    }
    let producers: Vec<ProducerFn<'_>> = (0..shape.producers)
        .map(|p| {
            let tx = tx.clone();
            Box::new(move |run: &Run| {
                drive(shape, run, p, Stamp::for_peer(shape), |bufs| {
                    bufs.iter().all(|b| tx.send(P::copy_from(b)).is_ok())
                })
            }) as ProducerFn<'_>
        })
        .collect();
    drop(tx);
    let out = execute(&run, env.timeout, producers);
    for t in threads {
        let _ = t.join();
    }
    if let Some(rt) = rt {
        rt.block_on(async {
            for t in tasks {
                let _ = t.await;
            }
        });
    }
    out
}

fn blocking_loop<P: Payload>(rx: &mut broadcast::Receiver<P>, t: &mut Tally) {
    loop {
        match rx.blocking_recv() {
            Ok(m) => t.on(m.bytes(), || stamp_of(m.bytes())),
            Err(RecvError::Lagged(n)) => t.missed(n),
            Err(RecvError::Closed) => break,
        }
    }
}
