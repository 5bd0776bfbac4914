//! The cross-core ping-pong probe: two threads (pinned to two different cores
//! where the OS allows) bounce a counter through one atomic, and the probe
//! reports nanoseconds per round trip. Anything that moves data between cores
//! scales with this number, so it tells a reader which state a shared VM was
//! in when a run was taken.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::stats::median;

/// What the probe measured.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// Median of the probe's rounds, ns per round trip.
    pub round_trip_ns: f64,
    /// Fastest round.
    pub min_ns: f64,
    /// Slowest round.
    pub max_ns: f64,
    /// Whether the two threads were pinned to distinct cores.
    pub pinned: bool,
}

impl Probe {
    /// One line for the table output.
    pub fn describe(&self) -> String {
        format!(
            "cross-core ping-pong: {:.0} ns per round trip (median of rounds; fastest {:.0}, slowest {:.0}{})",
            self.round_trip_ns,
            self.min_ns,
            self.max_ns,
            if self.pinned { ", threads pinned to cores 0 and 1" } else { ", threads not pinned" }
        )
    }
}

/// Bounces an atomic between two threads for `rounds` rounds of about `each`.
pub fn ping_pong(rounds: usize, each: Duration) -> Probe {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let pinned = cores.len() >= 2;
    let flag = AtomicU64::new(0);
    let barrier = Barrier::new(2);
    let stop = AtomicU64::new(u64::MAX);
    let mut results = Vec::with_capacity(rounds);
    std::thread::scope(|s| {
        let (flag, barrier, stop) = (&flag, &barrier, &stop);
        let (c0, c1) = if pinned { (Some(cores[0]), Some(cores[1])) } else { (None, None) };
        // The ponger: answers every odd value with the next even one.
        s.spawn(move || {
            if let Some(c) = c1 {
                core_affinity::set_for_current(c);
            }
            for _ in 0..rounds {
                barrier.wait();
                let mut seen = 0;
                loop {
                    let v = flag.load(Ordering::Acquire);
                    if v != seen && v % 2 == 1 {
                        flag.store(v + 1, Ordering::Release);
                        seen = v + 1;
                    }
                    if v >= stop.load(Ordering::Relaxed) {
                        break;
                    }
                    std::hint::spin_loop();
                }
                barrier.wait();
            }
        });
        let pinger = s.spawn(move || {
            if let Some(c) = c0 {
                core_affinity::set_for_current(c);
            }
            let mut out = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                stop.store(u64::MAX, Ordering::Relaxed);
                flag.store(0, Ordering::Release);
                barrier.wait();
                let start = Instant::now();
                let mut trips = 0u64;
                let mut v = 0u64;
                loop {
                    flag.store(v + 1, Ordering::Release);
                    while flag.load(Ordering::Acquire) != v + 2 {
                        std::hint::spin_loop();
                    }
                    v += 2;
                    trips += 1;
                    if trips.is_multiple_of(256) && start.elapsed() >= each {
                        break;
                    }
                }
                let ns = start.elapsed().as_nanos() as f64 / trips as f64;
                // Release the ponger: a value at or past `stop` ends its loop.
                stop.store(v + 1, Ordering::Relaxed);
                flag.store(v + 1, Ordering::Release);
                barrier.wait();
                out.push(ns);
            }
            out
        });
        results = pinger.join().expect("probe thread");
    });
    Probe {
        round_trip_ns: median(&results),
        min_ns: results.iter().copied().fold(f64::INFINITY, f64::min),
        max_ns: results.iter().copied().fold(0.0, f64::max),
        pinned,
    }
}

/// What the hiccup probe measured: how long a spinning thread went without
/// running (the gaps between consecutive clock reads), the floor under any
/// latency tail on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Hiccups {
    /// How long the probe spun, ms.
    pub spun_ms: f64,
    /// Gaps of at least [`HICCUP_NS`] seen, per second of spinning.
    pub per_sec: f64,
    /// 99th percentile of all gaps, ns.
    pub p99_ns: u64,
    /// 99.99th percentile of all gaps, ns.
    pub p9999_ns: u64,
    /// Longest gap, ns.
    pub max_ns: u64,
}

/// A gap between two clock reads this long counts as a hiccup.
pub const HICCUP_NS: u64 = 1_000;

impl Hiccups {
    /// One line for the table output.
    pub fn describe(&self) -> String {
        format!(
            "hiccup probe: a spinning thread stalled >= 1 µs {:.0} times a second; gaps p99 {} ns, p99.99 {}, max {} ({:.0} ms spun)",
            self.per_sec,
            self.p99_ns,
            crate::stats::fmt_ns(self.p9999_ns),
            crate::stats::fmt_ns(self.max_ns),
            self.spun_ms
        )
    }
}

/// Spins on the clock for `each` and records every gap between consecutive
/// reads: whatever stops a thread (the hypervisor, an interrupt, another
/// process) shows as a gap, and delays any message in flight just as long.
pub fn hiccups(each: Duration) -> Hiccups {
    let mut h = crate::measure::new_histogram();
    let start = Instant::now();
    let mut last = rill::clock::now_ns();
    let mut long = 0u64;
    loop {
        let now = rill::clock::now_ns();
        let gap = now.saturating_sub(last);
        last = now;
        h.saturating_record(gap.clamp(1, crate::measure::MAX_LATENCY_NS));
        if gap >= HICCUP_NS {
            long += 1;
            if start.elapsed() >= each {
                break;
            }
        } else if h.len().is_multiple_of(4096) && start.elapsed() >= each {
            break;
        }
    }
    let spun = start.elapsed().as_secs_f64();
    Hiccups {
        spun_ms: spun * 1e3,
        per_sec: long as f64 / spun,
        p99_ns: h.value_at_quantile(0.99),
        p9999_ns: h.value_at_quantile(0.9999),
        max_ns: h.max(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hiccup_probe_measures_gaps() {
        let h = super::hiccups(std::time::Duration::from_millis(20));
        assert!(h.spun_ms >= 20.0);
        assert!(h.p99_ns <= h.p9999_ns && h.p9999_ns <= h.max_ns, "{h:?}");
    }

    #[test]
    fn the_idle_probe_delivers_to_every_subscription_and_counts_cpu() {
        let wall = std::time::Duration::from_millis(50);
        let idle = super::idle(20, wall).expect("idle probe");
        assert_eq!(idle.subscriptions, 20);
        assert_eq!(idle.wall_ms, 50.0);
        // CPU time cannot go backwards, nor exceed what the machine's cores
        // could have given the process over the interval as it took (other
        // tests of this binary run beside it, and the sleep may end late),
        // plus the clock granularity of getrusage.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        for (cpu, took) in [(idle.pool_cpu_ms, idle.pool_wall_ms), (idle.dedicated_cpu_ms, idle.dedicated_wall_ms)] {
            assert!(took >= 50.0, "{idle:?}");
            assert!(cpu.is_finite() && cpu >= 0.0 && cpu <= cores * took + 10.0, "{idle:?}");
        }
    }

    #[test]
    fn the_probe_measures_something() {
        let p = super::ping_pong(3, std::time::Duration::from_millis(5));
        assert!(p.round_trip_ns > 0.0 && p.round_trip_ns.is_finite());
        assert!(p.min_ns <= p.round_trip_ns && p.round_trip_ns <= p.max_ns);
    }
}

/// The disk's own limits where the `persist-*` scenarios write: what a
/// durable broker is measured against.
#[derive(Debug, Clone, Serialize)]
pub struct Disk {
    /// The directory probed.
    pub dir: String,
    /// Sequential write bandwidth, MB/s: 64 MiB in 1 MiB writes, then one
    /// `fdatasync` (included).
    pub seq_write_mb_s: f64,
    /// `fdatasync` calls per second, each after appending 4 KiB (what one
    /// `Fsync::Always` publish costs at best).
    pub fdatasync_per_s: f64,
    /// Median duration of one of those `fdatasync` calls (write excluded),
    /// µs: what an `Fsync::Always` publish's p50 is read against.
    pub fdatasync_p50_us: f64,
    /// Median `fdatasync` after rewriting 64 bytes in place in that file
    /// (already allocated and written: no size or extent change to commit),
    /// µs: the cheapest sync the disk offers, as most `Always` publishes of
    /// small records into a preallocated segment file are.
    pub fdatasync_rewrite_p50_us: f64,
}

impl Disk {
    /// One line for the report's notes.
    pub fn describe(&self) -> String {
        format!(
            "disk at {}: sequential write {:.0} MB/s (64 MiB in 1 MiB writes + one fdatasync); \
             {:.0} fdatasync/s (4 KiB appended before each), p50 {:.0} µs per fdatasync; \
             p50 {:.0} µs per fdatasync after a 64 B rewrite in place",
            self.dir, self.seq_write_mb_s, self.fdatasync_per_s, self.fdatasync_p50_us, self.fdatasync_rewrite_p50_us
        )
    }
}

/// Measures the disk under `dir` (a scratch file, removed again).
pub fn disk(dir: &std::path::Path) -> std::io::Result<Disk> {
    use std::io::Write;
    const CHUNK: usize = 1 << 20;
    const TOTAL: usize = 64 << 20;
    const SYNC_BYTES: usize = 4096;
    const SYNC_FOR: Duration = Duration::from_millis(500);
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("rill-bench-disk-probe-{}", std::process::id()));
    let result = (|| {
        let chunk = vec![0x5au8; CHUNK];
        let mut f = std::fs::File::create(&path)?;
        let started = Instant::now();
        for _ in 0..TOTAL / CHUNK {
            f.write_all(&chunk)?;
        }
        f.sync_data()?;
        let seq_write_mb_s = TOTAL as f64 / 1e6 / started.elapsed().as_secs_f64();
        drop(f);
        let mut f = std::fs::File::create(&path)?;
        let small = &chunk[..SYNC_BYTES];
        let started = Instant::now();
        let mut each = Vec::new();
        while started.elapsed() < SYNC_FOR {
            f.write_all(small)?;
            let t = Instant::now();
            f.sync_data()?;
            each.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let fdatasync_per_s = each.len() as f64 / started.elapsed().as_secs_f64();
        let fdatasync_p50_us = median(&each);
        let started = Instant::now();
        let mut rewrites = Vec::new();
        while started.elapsed() < SYNC_FOR / 2 {
            use std::os::unix::fs::FileExt;
            f.write_all_at(&small[..64], 0)?;
            let t = Instant::now();
            f.sync_data()?;
            rewrites.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(Disk {
            dir: dir.display().to_string(),
            seq_write_mb_s,
            fdatasync_per_s,
            fdatasync_p50_us,
            fdatasync_rewrite_p50_us: median(&rewrites),
        })
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// What the idle probe measured: the CPU time this process used while a
/// broker held caught-up subscriptions and nothing was published. It should
/// be about zero: a subscription with nothing to deliver must not spin.
#[derive(Debug, Clone, Serialize)]
pub struct Idle {
    /// Subscriptions of each kind held during the interval.
    pub subscriptions: usize,
    /// Wall time asked of each idle interval, ms.
    pub wall_ms: f64,
    /// Process CPU time (user + system, every thread) over the interval with
    /// pool subscriptions, ms.
    pub pool_cpu_ms: f64,
    /// The same with a dedicated thread per subscription, ms.
    pub dedicated_cpu_ms: f64,
    /// Wall time each interval took as measured, ms: at least `wall_ms`, and
    /// more when the sleeping thread wakes late on a busy machine (the CPU
    /// time above is over these): the pool's interval.
    pub pool_wall_ms: f64,
    /// The dedicated threads' interval, as measured, ms.
    pub dedicated_wall_ms: f64,
}

impl Idle {
    /// One line for the table output.
    pub fn describe(&self) -> String {
        format!(
            "idle probe: {} caught-up subscriptions, nothing published for {:.0} ms: process CPU {:.1} ms on the pool \
             ({:.2}% of a core), {:.1} ms with a thread each ({:.2}%)",
            self.subscriptions,
            self.wall_ms,
            self.pool_cpu_ms,
            100.0 * self.pool_cpu_ms / self.pool_wall_ms,
            self.dedicated_cpu_ms,
            100.0 * self.dedicated_cpu_ms / self.dedicated_wall_ms
        )
    }
}

/// User + system CPU time of every thread of this process so far, ns.
pub fn process_cpu_ns() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; getrusage only writes it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: zero-initialised above (a valid `rusage`) and filled by getrusage.
    let usage = unsafe { usage.assume_init() };
    let ns = |t: libc::timeval| t.tv_sec.max(0) as u64 * 1_000_000_000 + t.tv_usec.max(0) as u64 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// Subscribes `n` times (on the pool, then with a thread each), delivers one
/// message to every subscription, waits until all are idle, and measures
/// the process's CPU time over `each` with nothing published.
pub fn idle(n: usize, each: Duration) -> rill::Result<Idle> {
    let (pool_cpu, pool_wall) = idle_once(n, false, each)?;
    let (dedicated_cpu, dedicated_wall) = idle_once(n, true, each)?;
    Ok(Idle {
        subscriptions: n,
        wall_ms: each.as_secs_f64() * 1e3,
        pool_cpu_ms: pool_cpu as f64 / 1e6,
        dedicated_cpu_ms: dedicated_cpu as f64 / 1e6,
        pool_wall_ms: pool_wall.as_secs_f64() * 1e3,
        dedicated_wall_ms: dedicated_wall.as_secs_f64() * 1e3,
    })
}

/// One interval: the process CPU time over it, ns, and how long it took.
fn idle_once(n: usize, dedicated: bool, each: Duration) -> rill::Result<(u64, Duration)> {
    use rill::{Ack, Broker, BrokerConfig, Message, Record, SubscriptionOptions, TopicOptions};
    let broker = Broker::new(BrokerConfig::default())?;
    broker.create_topic("idle", &TopicOptions::default())?;
    let seen = std::sync::Arc::new(AtomicU64::new(0));
    let subs = (0..n)
        .map(|_| {
            let seen = seen.clone();
            let options = SubscriptionOptions { dedicated_thread: dedicated, ..Default::default() };
            broker.subscribe("idle", options, move |_: &Message<'_>| {
                // Relaxed: read after wait_all_idle, which orders it.
                seen.fetch_add(1, Ordering::Relaxed);
                Ack::Success
            })
        })
        .collect::<rill::Result<Vec<_>>>()?;
    broker.publish("idle", &Record::new(b"wake every subscription once"))?;
    let refs: Vec<_> = subs.iter().collect();
    if !rill::broker::wait_all_idle(&refs, Duration::from_secs(60))? {
        return Err(rill::Error::Timeout);
    }
    let delivered = seen.load(Ordering::Relaxed);
    if delivered != n as u64 {
        return Err(rill::Error::InvalidArgument(format!("idle probe: {delivered} deliveries for {n} subscriptions")));
    }
    // The interval: this thread sleeps (it is what is being measured, not a
    // synchronisation), so the CPU counted is the broker's.
    let (before, start) = (process_cpu_ns(), Instant::now());
    std::thread::sleep(each);
    let (cpu, took) = (process_cpu_ns().saturating_sub(before), start.elapsed());
    drop(subs);
    broker.close();
    Ok((cpu, took))
}

/// Whether, and how much, the machine hands memory its processes free back
/// to a hypervisor (Linux's free page reporting, with a `virtio_balloon`
/// device): memory new to a process then costs a host fault beside the
/// zeroed page, and a measurement that writes fresh memory (`--scenario
/// fresh`, `--compaction`) varies with how much of it the host still backs
/// (see "Memory new to a VM" in docs/PERFORMANCE.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Reporting {
    /// KiB reported to the host so far, where the kernel says
    /// (`reported_kib` among `page_reporting`'s parameters); `None` where it
    /// reports but does not count.
    pub reported_kib: Option<u64>,
}

const PAGE_REPORTING: &str = "/sys/module/page_reporting";
const BALLOON: &str = "/sys/bus/virtio/drivers/virtio_balloon";

/// `Some` if this machine reports freed memory to a host: the kernel has
/// page reporting and a balloon device is bound to its driver.
pub fn memory_reporting() -> Option<Reporting> {
    let device =
        std::fs::read_dir(BALLOON).ok()?.flatten().any(|e| e.file_name().to_string_lossy().starts_with("virtio"));
    if !device || !std::path::Path::new(PAGE_REPORTING).exists() {
        return None;
    }
    let reported_kib = std::fs::read_to_string(format!("{PAGE_REPORTING}/parameters/reported_kib"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Some(Reporting { reported_kib })
}

/// The line a fresh-memory measurement prints after its tables, given what
/// [`memory_reporting`] said before it ran; `None` on a machine that does
/// not report.
pub fn memory_reporting_note(before: Option<Reporting>) -> Option<String> {
    let before = before?;
    let during = match (before.reported_kib, memory_reporting().and_then(|r| r.reported_kib)) {
        (Some(a), Some(b)) => {
            format!(": {} GiB since boot, {} MiB during this run", b >> 20, b.saturating_sub(a) >> 10)
        }
        _ => String::new(),
    };
    Some(format!(
        "memory: this machine hands memory its processes free back to its host (page reporting{during}); memory new \
         to a process then costs a host fault too, and figures that write fresh memory vary from run to run (see \
         \"Memory new to a VM\" in docs/PERFORMANCE.md)\n"
    ))
}
