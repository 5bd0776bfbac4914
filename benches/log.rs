//! Raw log throughput: append from 1 and 2 threads, batched append, and
//! append with a reader following, all with 64-byte payloads; and append to
//! a durable (file-backed) log beside the in-memory one, with `Never` (the
//! copy into the page cache and the checksum) and `Always` (group commit).
//!
//! Run with `cargo bench --bench log`. Criterion reports time per record
//! (as elements/s throughput).

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rill::Fsync;
use rill::log::{DurableLog, Log, LogConfig, Record};

const PAYLOAD: [u8; 64] = [0xA5; 64];

fn new_log() -> Log {
    Log::new(&LogConfig::default()).expect("default config is valid")
}

/// The configuration of the durable group, for its in-memory and durable
/// logs alike: 64 MiB of retention (16 segments of 4 MiB), so both reach the
/// steady state where retention trims (and segments are reused) within the
/// warm-up, and the durable log's files fit a small temp disk.
fn durable_group_config() -> LogConfig {
    LogConfig { retention_bytes: Some(DURABLE_GROUP_RETENTION), ..LogConfig::default() }
}

/// Retention of the logs of the durable group.
const DURABLE_GROUP_RETENTION: u64 = 64 << 20;

/// Appends `n` records split across `threads` publishers; returns the wall time.
fn append_parallel(log: &Log, threads: u64, n: u64) -> Duration {
    let barrier = Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..n / threads {
                    black_box(log.append(&Record::new(&PAYLOAD)).unwrap());
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // Scope end joins the publishers.
        start
    })
    .elapsed()
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("log_append_64B");
    g.throughput(Throughput::Elements(1));
    g.bench_function("1_publisher", |b| {
        let log = new_log();
        b.iter(|| black_box(log.append(&Record::new(black_box(&PAYLOAD))).unwrap()))
    });
    g.bench_function("2_publishers", |b| {
        let log = new_log();
        b.iter_custom(|iters| append_parallel(&log, 2, iters.max(2)))
    });
    g.bench_function("batch_of_64", |b| {
        let log = new_log();
        let records = vec![Record::new(&PAYLOAD); 64];
        let mut offsets = Vec::with_capacity(64);
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters.div_ceil(64) {
                log.append_batch(&records, &mut offsets).unwrap();
            }
            start.elapsed()
        })
    });
    g.finish();
}

/// A durable log in a fresh directory under the temp dir (removed at drop).
struct DurableBench {
    log: Option<Log>,
    dir: std::path::PathBuf,
}

impl DurableBench {
    fn new(name: &str, fsync: Fsync, config: &LogConfig) -> DurableBench {
        let dir = std::env::temp_dir().join(format!("rill-bench-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let durable = DurableLog { dir: dir.clone(), fsync, repair: false };
        let (log, _) = Log::open(config, 0, &durable).expect("a durable log in the temp dir");
        DurableBench { log: Some(log), dir }
    }

    fn log(&self) -> &Log {
        self.log.as_ref().expect("open until drop")
    }
}

impl Drop for DurableBench {
    fn drop(&mut self) {
        drop(self.log.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn append_durable(c: &mut Criterion) {
    let mut g = c.benchmark_group("log_append_64B_durable");
    g.throughput(Throughput::Elements(1));
    // In the same group, so the two are measured back to back.
    g.bench_function("in_memory_1_publisher", |b| {
        let log = Log::new(&durable_group_config()).expect("a valid config");
        b.iter(|| black_box(log.append(&Record::new(black_box(&PAYLOAD))).unwrap()))
    });
    g.bench_function("never_1_publisher", |b| {
        let d = DurableBench::new("never", Fsync::Never, &durable_group_config());
        b.iter(|| black_box(d.log().append(&Record::new(black_box(&PAYLOAD))).unwrap()))
    });
    // The same, with logs that live across criterion's samples: past the
    // first 64 MiB, retention trims and segments (buffers, or files) are
    // reused, which is the steady state of a long-running partition. The
    // two above pay for a fresh log in every sample instead.
    let log = Log::new(&durable_group_config()).expect("a valid config");
    g.bench_function("in_memory_1_publisher_steady", |b| {
        b.iter(|| black_box(log.append(&Record::new(black_box(&PAYLOAD))).unwrap()))
    });
    drop(log);
    let d = DurableBench::new("never-steady", Fsync::Never, &durable_group_config());
    g.bench_function("never_1_publisher_steady", |b| {
        b.iter(|| black_box(d.log().append(&Record::new(black_box(&PAYLOAD))).unwrap()))
    });
    drop(d);
    g.bench_function("always_1_publisher", |b| {
        let d = DurableBench::new("always1", Fsync::Always, &durable_group_config());
        b.iter_custom(|iters| append_parallel(d.log(), 1, iters))
    });
    g.bench_function("always_4_publishers", |b| {
        let d = DurableBench::new("always4", Fsync::Always, &durable_group_config());
        b.iter_custom(|iters| append_parallel(d.log(), 4, iters.max(4)))
    });
    g.finish();
}

/// 4 KiB records into a durable log with `Never`, in bytes per second, to
/// hold against the disk's sequential write bandwidth (`dd` beside it): the
/// log lives across samples, so this is its steady state (files reused).
fn append_durable_4k(c: &mut Criterion) {
    let mut g = c.benchmark_group("log_append_4KiB_durable");
    let payload = [0xA5u8; 4096];
    g.throughput(Throughput::Bytes(payload.len() as u64));
    let d = DurableBench::new("never-4k", Fsync::Never, &durable_group_config());
    g.bench_function("never_1_publisher_steady", |b| {
        b.iter(|| black_box(d.log().append(&Record::new(black_box(&payload))).unwrap()))
    });
    drop(d);
    g.finish();
}

/// Recovery of a 64 MiB partition (1 KiB records) beside reading its files
/// from the page cache: the two run back to back on the same files.
fn recover(c: &mut Criterion) {
    let mut g = c.benchmark_group("log_recover_64MiB");
    let d = DurableBench::new("recover", Fsync::Never, &LogConfig::default());
    let payload = [0x5Au8; 1000];
    let records = (64 << 20) / 1032;
    for _ in 0..records {
        d.log().append(&Record::new(&payload)).unwrap();
    }
    d.log().sync().unwrap();
    g.throughput(Throughput::Bytes(64 << 20));
    g.bench_function("read_files", |b| {
        b.iter(|| {
            let mut n = 0;
            for e in std::fs::read_dir(&d.dir).unwrap() {
                n += std::fs::read(e.unwrap().path()).unwrap().len();
            }
            black_box(n)
        })
    });
    g.bench_function("open", |b| {
        // Recovery of a copy, so each open sees the same files (an open
        // seals the active segment and starts a new one).
        let copy = std::env::temp_dir().join(format!("rill-bench-recover-copy-{}", std::process::id()));
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let _ = std::fs::remove_dir_all(&copy);
                std::fs::create_dir_all(&copy).unwrap();
                for e in std::fs::read_dir(&d.dir).unwrap() {
                    let e = e.unwrap();
                    std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
                }
                let durable = DurableLog { dir: copy.clone(), fsync: Fsync::Never, repair: false };
                let start = Instant::now();
                let (log, report) = Log::open(&LogConfig::default(), 0, &durable).unwrap();
                total += start.elapsed();
                assert_eq!(report.records, records);
                drop(log);
            }
            let _ = std::fs::remove_dir_all(&copy);
            total
        })
    });
    g.finish();
}

fn append_and_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("log_append_read_64B");
    g.throughput(Throughput::Elements(1));
    g.bench_function("1_publisher_1_reader", |b| {
        b.iter_custom(|iters| {
            let log = new_log();
            let mut cursor = log.cursor_from_end();
            std::thread::scope(|s| {
                let start = Instant::now();
                s.spawn(|| {
                    for _ in 0..iters {
                        log.append(&Record::new(&PAYLOAD)).unwrap();
                    }
                });
                // The reader touches every payload byte.
                let mut read = 0;
                let mut sum = 0u64;
                while read < iters {
                    let batch = cursor.read_batch(256).unwrap();
                    if batch.is_empty() {
                        std::hint::spin_loop();
                    }
                    for r in batch {
                        sum += r.payload().iter().map(|&b| b as u64).sum::<u64>();
                        read += 1;
                    }
                }
                black_box(sum);
                start.elapsed()
            })
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = append, append_and_read, append_durable, append_durable_4k, recover
}
criterion_main!(benches);
