//! `rill-bench`: measures rill's log throughput on this machine.
//!
//! For now it drives the raw log: publishers append 64-byte records while
//! readers follow with their own cursors and touch every payload byte.

use std::sync::Barrier;
use std::time::Instant;

use rill::log::{Log, LogConfig, Record};

fn run(publishers: usize, readers: usize, per_publisher: u64, payload: usize) -> f64 {
    let log = Log::new(&LogConfig::default()).expect("default config");
    let total = per_publisher * publishers as u64;
    let body = vec![0x5Au8; payload];
    let barrier = Barrier::new(publishers + readers + 1);
    let start = std::thread::scope(|s| {
        for _ in 0..readers {
            let mut cursor = log.cursor_from_end();
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                let mut read = 0;
                let mut sum = 0u64;
                while read < total {
                    match cursor.read_batch(256) {
                        Ok(b) if b.is_empty() => std::thread::yield_now(),
                        Ok(b) => {
                            for r in b {
                                sum = sum.wrapping_add(r.payload().iter().map(|&x| x as u64).sum::<u64>());
                                read += 1;
                            }
                        }
                        Err(lag) => read += lag.missed,
                    }
                }
                std::hint::black_box(sum);
            });
        }
        for _ in 0..publishers {
            let (log, body, barrier) = (&log, &body, &barrier);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..per_publisher {
                    log.append(&Record::new(body)).expect("append");
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    total as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let n: u64 = 5_000_000;
    println!("{:<28} {:>14} {:>10}", "scenario (64 B payloads)", "msgs/s", "MB/s");
    for (p, r) in [(1, 0), (2, 0), (1, 1), (1, 4), (4, 1)] {
        let rate = run(p, r, n / p as u64, 64);
        println!("{:<28} {:>14.0} {:>10.1}", format!("{p} publisher(s) -> {r} reader(s)"), rate, rate * 64.0 / 1e6);
    }
}
