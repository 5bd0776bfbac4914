//! `--compaction`: issue 41's speed lines for compacted topics, three
//! measurements, each in `--pairs` interleaved rounds:
//!
//! 1. **Publishing.** One publisher and one push subscriber (on the worker
//!    pool), [`PAYLOAD`]-byte payloads with [`KEY`]-byte keys over
//!    [`PUBLISH_KEYS`] keys, into a compacted topic (its compactor running
//!    as it does) against a plain one: messages per second from the first
//!    publish to the subscriber's last message (`--messages`, default
//!    [`DEFAULT_MESSAGES`]).
//! 2. **A pass.** One compaction pass (`Log::compact`) over an in-memory
//!    log of `--compaction-mib` MiB (default [`DEFAULT_MIB`], a partition's
//!    default retention; the figure is 1024) whose records carry
//!    [`PASS_KEYS`] distinct keys, against copying as many bytes into fresh
//!    memory (`Vec::clone`, its page faults included) in the same round.
//! 3. **A publisher beside a pass.** A thread appending to such a log while
//!    the pass runs on another, against the same thread appending to a like
//!    log for as long with no pass: appends per second. Beside each rate,
//!    the appender thread's CPU time (`getrusage(RUSAGE_THREAD)`) over the
//!    wall time (its share of a core) and its appends per CPU second: a
//!    publisher slowed by sharing the cores (with the pass and whatever
//!    else runs) keeps its appends per CPU second and loses share; one
//!    slowed by what the pass does to its path (a lock, a shared line, the
//!    memory bus) loses appends per CPU second. And its thread's page
//!    faults per million appends: the memory new to the log that its own
//!    writes faulted in, which a roll into a warm spare does not.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use rill::log::{CompactionPolicy, Log, LogConfig, Record};
use rill::{Ack, Broker, BrokerConfig, Cleanup, Message, SubscriptionOptions, TopicOptions};

/// Payload bytes of every record.
pub const PAYLOAD: usize = 64;
/// Key bytes of every record (a little-endian `u64`).
pub const KEY: usize = 8;
/// Distinct keys of the publishing measurement: each key is written
/// `messages / PUBLISH_KEYS` times, so the compactor has work.
pub const PUBLISH_KEYS: u64 = 1 << 16;
/// Distinct keys of the compacted log.
pub const PASS_KEYS: u64 = 1_000_000;
/// Messages of the publishing measurement when `--messages` is not given.
pub const DEFAULT_MESSAGES: u64 = 1_000_000;
/// Size of the compacted log when `--compaction-mib` is not given: a
/// partition's default retention (`DEFAULT_RETENTION_BYTES`), so the
/// default run fits what a topic holds by default.
pub const DEFAULT_MIB: u64 = 256;
/// Longest a subscriber may take to catch up before the run fails.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// Removes every superseded record at once.
const POLICY: CompactionPolicy = CompactionPolicy { min_lag_ns: 0, tombstone_ns: u64::MAX, id_lag_ns: 0 };

/// One round of the three measurements.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    /// Messages per second, 1 -> 1, into a plain topic.
    pub plain_per_s: f64,
    /// The same into a compacted topic.
    pub compacted_per_s: f64,
    /// One pass over the log, seconds.
    pub pass_s: f64,
    /// Copying as many bytes into fresh memory, seconds.
    pub copy_s: f64,
    /// Appends per second beside a pass.
    pub during_per_s: f64,
    /// That pass (beside the appender), seconds.
    pub during_pass_s: f64,
    /// Appends per second with no pass.
    pub alone_per_s: f64,
    /// The appender's CPU seconds over wall seconds beside a pass.
    pub during_share: f64,
    /// The same with no pass.
    pub alone_share: f64,
    /// The appender thread's minor page faults per million appends beside
    /// a pass (memory new to the log that its own writes faulted in).
    pub during_faults_per_m: f64,
    /// The same with no pass.
    pub alone_faults_per_m: f64,
}

/// What one appender did: appends, wall seconds, and its thread's CPU
/// seconds (user and system).
#[derive(Debug, Clone, Copy)]
struct Appended {
    appends: u64,
    wall_s: f64,
    cpu_s: f64,
    /// Its thread's minor page faults.
    faults: u64,
}

/// The calling thread's CPU time so far (user and system), seconds, and
/// its minor page faults; zeros where `getrusage` cannot say.
fn thread_usage() -> (f64, u64) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage writes a `rusage` into the zeroed one we pass,
        // and reads nothing else.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            if libc::getrusage(libc::RUSAGE_THREAD, &mut usage) != 0 {
                return (0.0, 0);
            }
            let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            (s(usage.ru_utime) + s(usage.ru_stime), usage.ru_minflt as u64)
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        (0.0, 0)
    }
}

/// The key of record `i` among `keys` keys.
fn key(i: u64, keys: u64) -> [u8; KEY] {
    (i % keys).to_le_bytes()
}

/// Messages per second from one publisher to one push subscriber.
fn one_to_one(cleanup: Cleanup, messages: u64) -> rill::Result<f64> {
    let broker = Broker::new(BrokerConfig::default())?;
    broker.create_topic("t", &TopicOptions { cleanup, ..TopicOptions::default() })?;
    let count = Arc::new(AtomicU64::new(0));
    let sub = {
        let count = count.clone();
        broker.subscribe("t", SubscriptionOptions::default(), move |m: &Message<'_>| {
            black_box(m.payload());
            // Relaxed: a private counter, read after `wait_idle`, which orders it.
            count.fetch_add(1, Ordering::Relaxed);
            Ack::Success
        })?
    };
    let publisher = broker.publisher("t")?;
    let payload = [0x5a; PAYLOAD];
    let started = Instant::now();
    for i in 0..messages {
        publisher.publish(&Record::new(&payload).with_key(&key(i, PUBLISH_KEYS)))?;
    }
    assert!(sub.wait_idle(DRAIN_TIMEOUT)?, "the subscriber did not catch up");
    let per_s = messages as f64 / started.elapsed().as_secs_f64();
    assert_eq!(count.load(Ordering::Relaxed), messages, "every message was delivered");
    Ok(per_s)
}

/// An in-memory log of `mib` MiB of records over [`PASS_KEYS`] keys,
/// nothing trimmed.
fn filled_log(mib: u64) -> rill::Result<Log> {
    let log = Log::new(&LogConfig { retention_bytes: None, ..LogConfig::default() })?;
    let payload = [0x5a; PAYLOAD];
    let record_bytes = Record::new(&payload).with_key(&[0; KEY]).encoded_len()? as u64;
    for i in 0..(mib << 20) / record_bytes {
        log.append(&Record::new(&payload).with_key(&key(i, PASS_KEYS)))?;
    }
    Ok(log)
}

/// Appends to `log` from another thread from the barrier until `stop`.
fn appender(log: Arc<Log>, start: Arc<Barrier>, stop: Arc<AtomicBool>) -> thread::JoinHandle<Appended> {
    thread::spawn(move || {
        let payload = [0xa5; PAYLOAD];
        start.wait();
        let (cpu, faults) = thread_usage();
        let started = Instant::now();
        let mut n = 0;
        // Relaxed: a flag that only ends the loop; nothing is read after it.
        while !stop.load(Ordering::Relaxed) {
            log.append(&Record::new(&payload).with_key(&key(n, PASS_KEYS))).expect("an append");
            n += 1;
        }
        let wall_s = started.elapsed().as_secs_f64();
        let (cpu_now, faults_now) = thread_usage();
        Appended { appends: n, wall_s, cpu_s: cpu_now - cpu, faults: faults_now - faults }
    })
}

/// (pass seconds, copy seconds, the appender beside a pass, that pass's
/// seconds, the appender alone).
fn pass_and_copy(mib: u64) -> rill::Result<(f64, f64, Appended, f64, Appended)> {
    let pass_s = {
        let log = filled_log(mib)?;
        let started = Instant::now();
        log.compact(&POLICY, rill::clock::now_ns())?;
        started.elapsed().as_secs_f64()
    };
    let copy_s = {
        let src = vec![0x5au8; (mib << 20) as usize];
        let started = Instant::now();
        let copy = black_box(src.clone());
        let s = started.elapsed().as_secs_f64();
        drop(black_box(copy));
        s
    };
    // A publisher beside a pass: the pass on this thread, timed as above.
    let (during, during_s) = {
        let log = Arc::new(filled_log(mib)?);
        let (start, stop) = (Arc::new(Barrier::new(2)), Arc::new(AtomicBool::new(false)));
        let publisher = appender(log.clone(), start.clone(), stop.clone());
        start.wait();
        let started = Instant::now();
        log.compact(&POLICY, rill::clock::now_ns())?;
        let pass_s = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        (publisher.join().expect("the appender"), pass_s)
    };
    // The same publisher alone, for as long, on a like log.
    let alone = {
        let log = Arc::new(filled_log(mib)?);
        let (start, stop) = (Arc::new(Barrier::new(2)), Arc::new(AtomicBool::new(false)));
        let publisher = appender(log, start.clone(), stop.clone());
        start.wait();
        // A measurement window, not a synchronisation: the appender runs
        // alone for as long as the pass above ran beside it.
        thread::sleep(Duration::from_secs_f64(during_s));
        stop.store(true, Ordering::Relaxed);
        publisher.join().expect("the appender")
    };
    Ok((pass_s, copy_s, during, during_s, alone))
}

/// `rounds` interleaved rounds of the three measurements.
pub fn run(messages: u64, mib: u64, rounds: usize) -> rill::Result<Vec<Round>> {
    (0..rounds.max(1))
        .map(|_| {
            let plain_per_s = one_to_one(Cleanup::Delete, messages)?;
            let compacted_per_s = one_to_one(Cleanup::Compact, messages)?;
            let (pass_s, copy_s, during, during_pass_s, alone) = pass_and_copy(mib.max(1))?;
            Ok(Round {
                plain_per_s,
                compacted_per_s,
                pass_s,
                copy_s,
                during_per_s: during.appends as f64 / during.wall_s,
                during_pass_s,
                alone_per_s: alone.appends as f64 / alone.wall_s,
                during_share: during.cpu_s / during.wall_s,
                alone_share: alone.cpu_s / alone.wall_s,
                during_faults_per_m: during.faults as f64 * 1e6 / during.appends.max(1) as f64,
                alone_faults_per_m: alone.faults as f64 * 1e6 / alone.appends.max(1) as f64,
            })
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn range(v: &[f64]) -> String {
    let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    format!("{lo:.2}..{hi:.2}")
}

/// The rounds as three tables, with each ratio's median and range.
pub fn table(rounds: &[Round], messages: u64, mib: u64) -> String {
    let mut out = format!(
        "1 -> 1, {PAYLOAD} B payloads, {KEY} B keys over {PUBLISH_KEYS} keys, {messages} messages (msgs/s)\n\
         | round | plain topic | compacted topic | compacted / plain |\n|---|---|---|---|\n"
    );
    let ratios: Vec<f64> = rounds.iter().map(|r| r.compacted_per_s / r.plain_per_s).collect();
    for (i, r) in rounds.iter().enumerate() {
        out += &format!("| {} | {:.0} | {:.0} | {:.2} |\n", i + 1, r.plain_per_s, r.compacted_per_s, ratios[i]);
    }
    out += &format!("| median | | | {:.2} (range {}) |\n\n", median(ratios.clone()), range(&ratios));

    out += &format!(
        "one compaction pass over {mib} MiB ({PAYLOAD} B payloads, {KEY} B keys, {PASS_KEYS} distinct keys) beside \
         copying {mib} MiB into fresh memory (ms)\n| round | pass | copy | pass / copy |\n|---|---|---|---|\n"
    );
    let ratios: Vec<f64> = rounds.iter().map(|r| r.pass_s / r.copy_s).collect();
    for (i, r) in rounds.iter().enumerate() {
        out += &format!("| {} | {:.1} | {:.1} | {:.2} |\n", i + 1, r.pass_s * 1e3, r.copy_s * 1e3, ratios[i]);
    }
    out += &format!("| median | | | {:.2} (range {}) |\n\n", median(ratios.clone()), range(&ratios));

    out += &format!(
        "a publisher appending to the {mib} MiB log while a pass runs on another thread, beside the same \
         publisher with no pass (appends/s), and that pass's time beside the publisher over its time alone \
         (the pass timed alone above)\n| round | beside a pass | alone | beside / alone | pass beside (ms) | pass beside / \
         alone |\n|---|---|---|---|---|---|\n"
    );
    let ratios: Vec<f64> = rounds.iter().map(|r| r.during_per_s / r.alone_per_s).collect();
    for (i, r) in rounds.iter().enumerate() {
        out += &format!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.2} |\n",
            i + 1,
            r.during_per_s,
            r.alone_per_s,
            ratios[i],
            r.during_pass_s * 1e3,
            r.during_pass_s / r.pass_s
        );
    }
    let slower: Vec<f64> = rounds.iter().map(|r| r.during_pass_s / r.pass_s).collect();
    out += &format!(
        "| median | | | {:.2} (range {}) | | {:.2} (range {}) |\n\n",
        median(ratios.clone()),
        range(&ratios),
        median(slower.clone()),
        range(&slower)
    );

    out += "the same appender's share of a core (its thread's CPU seconds over wall seconds) and appends per CPU \
            second: a lower share beside a pass is the cores shared; fewer appends per CPU second is the pass \
            slowing the append path itself; and its page faults per million appends (memory new to the log that \
            its own writes faulted in)\n| round | share beside | share alone | per CPU s beside | per CPU s \
            alone | per CPU s beside / alone | faults/M beside | faults/M alone |\n|---|---|---|---|---|---|---|---|\n";
    let per_cpu = |per_s: f64, share: f64| if share > 0.0 { per_s / share } else { 0.0 };
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|r| per_cpu(r.during_per_s, r.during_share) / per_cpu(r.alone_per_s, r.alone_share))
        .collect();
    for (i, r) in rounds.iter().enumerate() {
        out += &format!(
            "| {} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} |\n",
            i + 1,
            r.during_share,
            r.alone_share,
            per_cpu(r.during_per_s, r.during_share),
            per_cpu(r.alone_per_s, r.alone_share),
            ratios[i],
            r.during_faults_per_m,
            r.alone_faults_per_m
        );
    }
    out += &format!("| median | | | | | {:.2} (range {}) | | |\n", median(ratios.clone()), range(&ratios));
    out
}
