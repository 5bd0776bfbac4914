//! What a publish costs by how the broker keeps its log, with no
//! subscriber, past the log's first fill: in memory (`mem`), on a data
//! directory for one process (`exclusive`), or on one shared by processes
//! (`processes`), both directories on `/dev/shm` (tmpfs, so no disk under
//! them). One publisher thread, 64-byte records, a retention of 16 MiB in
//! segments of 4 MiB, so a timed run rolls and trims every few tens of
//! thousands of publishes; rounds interleave the three logs, each on a
//! fresh broker and warmed past its retention before it is timed.
//!
//! ```text
//! cargo run --release -p rill-bench --example sharing_cost -- [rounds] [mem|exclusive|processes] [--consumer]
//! ```
//!
//! (a second argument runs that log alone, for a profiler or `strace`).
//! `--consumer` adds a pull consumer (a group of one, on a thread of its
//! own, polling batches of up to 256 with a 100 ms timeout) that reads the
//! topic as it is written: what a reader that is not a push subscription
//! asks of the publisher (its wake-ups, and across processes the
//! doorbell's).
//!
//! Prints, a round a line and a log a column, ns per publish and the
//! share of the publishing thread's CPU time spent in the kernel
//! (`getrusage(RUSAGE_THREAD)`): what the roll and the trim ask of it
//! (file creation and its allocation, unmapping, page faults). The `ipc`
//! scenario measures rill across processes with subscribers; this isolates
//! the publisher's side of a shared log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rill::log::Fsync;
use rill::{Broker, BrokerConfig, ConsumerOptions, Record, Sharing, TopicOptions};

/// Publishes timed per run, after as many to fill the retention.
const PUBLISHES: u64 = 2_000_000;
/// Rounds when no argument is given.
const DEFAULT_ROUNDS: usize = 3;
/// The topic's retention and segment size.
const RETENTION: u64 = 16 << 20;
const SEGMENT: usize = 4 << 20;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Mem,
    Exclusive,
    Processes,
}

/// User and system CPU time of the calling thread, in ns.
fn thread_cpu() -> (u64, u64) {
    // SAFETY: getrusage writes the struct it is given, which is ours and
    // zeroed (a valid `rusage`).
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (ns(usage.ru_utime), ns(usage.ru_stime))
}

/// ns per publish, and the kernel's share of the thread's CPU time.
fn run(mode: Mode, consumer: bool) -> rill::Result<(f64, f64)> {
    let dir = std::path::PathBuf::from(format!("/dev/shm/rill-sharing-cost-{}", std::process::id()));
    let config = match mode {
        Mode::Mem => BrokerConfig::default(),
        Mode::Exclusive => BrokerConfig { data_dir: Some(dir.clone()), fsync: Fsync::Never, ..BrokerConfig::default() },
        Mode::Processes => BrokerConfig {
            data_dir: Some(dir.clone()),
            fsync: Fsync::Never,
            sharing: Sharing::Processes,
            ..BrokerConfig::default()
        },
    };
    let broker = Broker::new(config)?;
    let options =
        TopicOptions { retention_bytes: Some(RETENTION), segment_bytes: Some(SEGMENT), ..TopicOptions::default() };
    broker.create_topic("t", &options)?;
    let publisher = broker.publisher("t")?;
    let done = Arc::new(AtomicBool::new(false));
    let reader = match consumer {
        true => {
            let mut c = broker.consumer("readers", "t", ConsumerOptions::default())?;
            let done = done.clone();
            Some(std::thread::spawn(move || -> rill::Result<u64> {
                let mut read = 0;
                // Relaxed: a stop flag; the join below orders the rest.
                while !done.load(Ordering::Relaxed) {
                    read += c.poll(256, Duration::from_millis(100))?.len() as u64;
                }
                Ok(read)
            }))
        }
        false => None,
    };
    let payload = [0x5a; 64];
    let record = Record::new(&payload);
    for _ in 0..PUBLISHES {
        publisher.publish(&record)?;
    }
    let (user, system) = thread_cpu();
    let started = Instant::now();
    for _ in 0..PUBLISHES {
        publisher.publish(&record)?;
    }
    let ns = started.elapsed().as_nanos() as f64 / PUBLISHES as f64;
    let (user2, system2) = thread_cpu();
    let kernel = (system2 - system) as f64 / ((user2 - user) + (system2 - system)).max(1) as f64;
    done.store(true, Ordering::Relaxed);
    if let Some(reader) = reader {
        let read = reader.join().expect("the consumer thread panicked")?;
        assert!(read > 0, "the consumer read nothing");
    }
    drop(publisher);
    drop(broker);
    if mode != Mode::Mem {
        std::fs::remove_dir_all(&dir).map_err(|e| rill::Error::io(&dir, &e))?;
    }
    Ok((ns, kernel))
}

fn main() -> rill::Result<()> {
    let consumer = std::env::args().any(|a| a == "--consumer");
    let args: Vec<String> = std::env::args().filter(|a| a != "--consumer").collect();
    let rounds = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(DEFAULT_ROUNDS);
    if let Some(only) = args.get(2) {
        // One log only (`mem`, `exclusive` or `processes`), for a profiler
        // or `strace` to look at without the others.
        let mode = match only.as_str() {
            "mem" => Mode::Mem,
            "exclusive" => Mode::Exclusive,
            "processes" => Mode::Processes,
            other => panic!("no log {other:?}: mem, exclusive or processes"),
        };
        for round in 1..=rounds {
            let (ns, kernel) = run(mode, consumer)?;
            println!("{only}, round {round}: {ns:.1} ns a publish ({:.0}% in the kernel)", kernel * 100.0);
        }
        return Ok(());
    }
    let reader = if consumer { "a pull consumer" } else { "no subscriber" };
    println!("ns per publish (kernel share of the publishing thread's CPU), {reader}, 64 B, tmpfs");
    println!("| round | mem | exclusive | processes | processes / exclusive |");
    println!("|---|---|---|---|---|");
    for round in 1..=rounds {
        let (mem, mem_k) = run(Mode::Mem, consumer)?;
        let (exclusive, exclusive_k) = run(Mode::Exclusive, consumer)?;
        let (processes, processes_k) = run(Mode::Processes, consumer)?;
        println!(
            "| {round} | {mem:.1} ({:.0}%) | {exclusive:.1} ({:.0}%) | {processes:.1} ({:.0}%) | {:.2}x |",
            mem_k * 100.0,
            exclusive_k * 100.0,
            processes_k * 100.0,
            processes / exclusive
        );
    }
    Ok(())
}
