//! `--scenario ipc`: issue 39's speed lines, rill across processes on one
//! data directory opened with `Sharing::Processes`. Its own runner: every
//! measured party is a child process, `rill-bench` itself run again with
//! [`ROLE_ENV`] set to a JSON [`ChildConf`] (see [`child_main`]); the parent
//! only starts the children, tells them when to go through their stdin and
//! reads one line of results from each stdout. Nothing waits by sleeping:
//! each step is a line a child writes once it has done it.
//!
//! The data directories are on `/dev/shm` (tmpfs: the segment files live in
//! memory, shared by every process) unless `--ipc-disk` puts them under
//! `RILL_BENCH_DATA_DIR` (else the temp directory). Every broker uses
//! `Fsync::Never`, and every topic keeps the whole run (no retention), so a
//! slow reader never loses messages to retention; each run gets a fresh
//! directory, removed afterwards.
//!
//! What it measures, each in interleaved rounds (the order rotating), with
//! the median and the worst round's ratio:
//!
//! * **1 -> 1, `--payload` bytes (64)**: a publisher process and a push
//!   subscriber process (on the subscriber's pool) against rill in one
//!   process (a publisher thread and a push subscriber in one process, its
//!   broker `Sharing::Exclusive` on the same kind of directory: what a user
//!   with one process runs) and against a Unix-domain socket stream between
//!   two processes in the plain loop its user writes: `write_all` of each
//!   message into a `BufWriter<UnixStream>` (flushed at the end), and
//!   `read_exact` of each message from a `BufReader<UnixStream>`.
//! * **4 -> 1**: four publisher processes and one subscriber process,
//!   against four publisher threads and a subscriber in one process.
//! * **One-way latency at 100 k msgs/s**: a publisher process stamps each
//!   message with `CLOCK_MONOTONIC` (one clock for every process on the
//!   host) and a dedicated, spinning subscriber in another process records
//!   its arrival; against the round trip of a ping-pong between two
//!   processes spinning on a shared-memory mapping (a file on `/dev/shm`),
//!   measured in the same rounds: the floor of any cross-process handoff.
//! * **Idle**: 100 caught-up subscriptions across 4 processes (25 each);
//!   each process reads its own CPU time (`getrusage(RUSAGE_SELF)`, every
//!   thread) before and after a window of `--ipc-idle-secs` (2 s); then the
//!   parent publishes one message and every subscription must get it (so the
//!   idle ones were alive, and woken across processes).
//!
//! Every message is checked: the payload carries its publisher, its
//! sequence number and a fill byte derived from both, and each subscriber
//! checks every byte, each publisher's order and the count. A run that
//! loses, reorders or damages a message fails the scenario.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rill::{Ack, Broker, BrokerConfig, Fsync, Message, Record, Sharing, SubscriptionOptions, TopicOptions};
use serde::{Deserialize, Serialize};

use crate::stats::{PairStats, fmt_count, fmt_ns, fmt_ratio, median, pair_stats, percentiles};

/// Set in a child: its [`ChildConf`] as JSON.
pub const ROLE_ENV: &str = "RILL_BENCH_IPC_ROLE";

/// The topic every run publishes to.
const TOPIC: &str = "ipc";
/// The publish rate of the latency runs, msgs/s (issue 39's figure).
pub const LATENCY_RATE: u64 = 100_000;
/// Most messages of one latency run (one second at [`LATENCY_RATE`]).
const LATENCY_MESSAGES: u64 = 100_000;
/// Idle subscriptions in all, and the processes they are spread over.
pub const IDLE_SUBSCRIPTIONS: u32 = 100;
pub const IDLE_PROCESSES: u32 = 4;
/// Publisher processes of the many-to-one runs.
pub const MANY: u32 = 4;
/// How long a child waits for its messages before it reports what it got.
const CHILD_CAP: Duration = Duration::from_secs(120);
/// Bytes of a payload's header: publisher (4), padding (4), sequence (8),
/// stamp (8); the rest is the fill byte.
const HEADER: usize = 24;
/// How long a latency subscriber keeps polling before it parks: longer than
/// the gap between two messages at [`LATENCY_RATE`], as in the in-process
/// `latency` scenario.
const LATENCY_IDLE_SPIN: Duration = Duration::from_micros(200);

/// The run's sizes and where its directories go.
#[derive(Debug, Clone)]
pub struct Config {
    /// Messages per throughput run, in all (split over the publishers).
    pub messages: u64,
    /// Payload bytes (at least [`HEADER`]).
    pub payload: usize,
    /// Interleaved rounds.
    pub rounds: usize,
    /// Where each run's data directory is made.
    pub root: PathBuf,
    /// The idle window.
    pub idle: Duration,
}

impl Config {
    /// `/dev/shm`, or with `disk` the bench's data root.
    pub fn root(disk: bool) -> PathBuf {
        if disk { crate::systems::rill_sys::data_root() } else { PathBuf::from("/dev/shm") }
    }

    fn payload(&self) -> usize {
        self.payload.max(HEADER)
    }
}

/// What a child does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Role {
    /// Publishes into the shared directory.
    RillPub,
    /// Subscribes in the shared directory.
    RillSub,
    /// Publisher threads and a subscriber in one process, one broker.
    Solo,
    /// Writes messages into a Unix-domain socket.
    SockPub,
    /// Listens, and reads the messages.
    SockSub,
    /// Times round trips on the shared mapping.
    Ping,
    /// Answers them.
    Pong,
    /// Holds idle subscriptions and reads its CPU time.
    Idle,
}

/// A child's orders.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChildConf {
    role: Role,
    /// The data directory (or the socket's / mapping's directory).
    dir: PathBuf,
    /// This publisher's number.
    who: u32,
    /// Publishers in the run (the subscriber expects each one's messages).
    publishers: u32,
    /// Messages per publisher (round trips for a ping-pong).
    messages: u64,
    payload: usize,
    /// Publish at this rate, stamping each message (latency runs).
    rate: Option<u64>,
    /// Subscriptions of an idle child.
    subscriptions: u32,
    /// A socket publisher writes through a `BufWriter` (else one `write`
    /// per message).
    buffered: bool,
}

/// A child's one line of results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ChildOut {
    /// `CLOCK_MONOTONIC` when a publisher started.
    t0: u64,
    /// `CLOCK_MONOTONIC` when a subscriber had its last message.
    t_end: u64,
    /// Messages received (or subscriptions woken, for an idle child).
    received: u64,
    /// Messages out of order or damaged.
    bad: u64,
    /// Latency (or round trip) percentiles, ns.
    p50: u64,
    p99: u64,
    /// CPU time over the idle window, ns.
    cpu_ns: u64,
    error: Option<String>,
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process on the host.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This process's CPU time (user + system, every thread), ns.
fn cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the call's duration.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The fill byte of message `seq` of publisher `who`.
fn fill(who: u32, seq: u64) -> u8 {
    (seq as u8) ^ (who as u8).wrapping_mul(37)
}

/// Writes message `seq` of publisher `who` into `buf`.
fn encode(buf: &mut [u8], who: u32, seq: u64, stamp: u64) {
    buf[..4].copy_from_slice(&who.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..24].copy_from_slice(&stamp.to_le_bytes());
    buf[HEADER..].fill(fill(who, seq));
}

/// Checks each message: its size, its fill, and that it is its publisher's
/// next one.
struct Checker {
    next: Vec<u64>,
    payload: usize,
    received: u64,
    bad: u64,
}

impl Checker {
    fn new(publishers: u32, payload: usize) -> Checker {
        Checker { next: vec![0; publishers as usize], payload, received: 0, bad: 0 }
    }

    /// Checks `p`; returns its stamp.
    fn on(&mut self, p: &[u8]) -> u64 {
        self.received += 1;
        if p.len() != self.payload {
            self.bad += 1;
            return 0;
        }
        let who = u32::from_le_bytes(p[..4].try_into().expect("4 bytes"));
        let seq = u64::from_le_bytes(p[8..16].try_into().expect("8 bytes"));
        let f = fill(who, seq);
        match self.next.get_mut(who as usize) {
            Some(next) if *next == seq && p[HEADER..].iter().all(|&b| b == f) => *next += 1,
            _ => self.bad += 1,
        }
        u64::from_le_bytes(p[16..24].try_into().expect("8 bytes"))
    }
}

// ---- the children ----

/// If this process is an ipc child, plays its part and returns the exit
/// code; `None` otherwise. `rill-bench`'s `main` calls it first.
pub fn child_main() -> Option<i32> {
    let conf = std::env::var(ROLE_ENV).ok()?;
    let conf: ChildConf = match serde_json::from_str(&conf) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{ROLE_ENV}: {e}");
            return Some(2);
        }
    };
    let out = child(&conf).unwrap_or_else(|e| ChildOut { error: Some(e), ..ChildOut::default() });
    let line = serde_json::to_string(&out).expect("plain data");
    let mut stdout = std::io::stdout().lock();
    // The parent may be gone; nothing more to do then.
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    Some(i32::from(out.error.is_some()))
}

/// Tells the parent this child is ready (or has done a step).
fn say(what: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{what}").and_then(|()| stdout.flush()).map_err(|e| format!("stdout: {e}"))
}

/// Waits for the parent's next word on stdin.
fn hear(expected: &str) -> Result<(), String> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(|e| format!("stdin: {e}"))?;
    if line.trim() == expected { Ok(()) } else { Err(format!("expected {expected:?} from the parent, got {line:?}")) }
}

fn err<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn broker(dir: &Path, sharing: Sharing) -> Result<Broker, String> {
    Broker::new(BrokerConfig { data_dir: Some(dir.to_owned()), sharing, fsync: Fsync::Never, ..Default::default() })
        .map_err(err("open the broker"))
}

/// Creates the topic, or joins it if another process (or [`prepare`]) made
/// it first.
fn join(broker: &Broker) -> Result<(), String> {
    match broker.create_topic(TOPIC, &topic_options()) {
        Ok(_) | Err(rill::Error::TopicExists(_)) => Ok(()),
        Err(e) => Err(format!("create_topic: {e}")),
    }
}

/// The whole run stays in the log: nothing is lost to retention.
fn topic_options() -> TopicOptions {
    TopicOptions { retention_bytes: None, ..TopicOptions::default() }
}

fn child(conf: &ChildConf) -> Result<ChildOut, String> {
    match conf.role {
        Role::RillPub => {
            let broker = broker(&conf.dir, Sharing::Processes)?;
            join(&broker)?;
            let publisher = broker.publisher(TOPIC).map_err(err("publisher"))?;
            say("ready")?;
            hear("go")?;
            let t0 = mono_ns();
            publish(conf, |p| publisher.publish(&Record::new(p)).map(drop).map_err(err("publish")))?;
            Ok(ChildOut { t0, ..ChildOut::default() })
        }
        Role::RillSub => {
            let broker = broker(&conf.dir, Sharing::Processes)?;
            join(&broker)?;
            subscribe_and_wait(&broker, conf, || {
                say("ready")?;
                hear("go")
            })
        }
        Role::Solo => {
            let broker = broker(&conf.dir, Sharing::Exclusive)?;
            join(&broker)?;
            let broker = Arc::new(broker);
            let t0 = Arc::new(AtomicU64::new(u64::MAX));
            let b = broker.clone();
            let t = t0.clone();
            subscribe_and_wait(&broker, conf, move || {
                let publishers: Vec<_> = (0..conf.publishers)
                    .map(|who| b.publisher(TOPIC).map(|p| (who, p)).map_err(err("publisher")))
                    .collect::<Result<_, _>>()?;
                say("ready")?;
                hear("go")?;
                // Relaxed: only this thread reads it, after joining the publishers.
                t.store(mono_ns(), Ordering::Relaxed);
                std::thread::scope(|s| {
                    let handles: Vec<_> = publishers
                        .into_iter()
                        .map(|(who, publisher)| {
                            let conf = ChildConf { who, ..conf.clone() };
                            s.spawn(move || {
                                publish(&conf, |p| publisher.publish(&Record::new(p)).map(drop).map_err(err("publish")))
                            })
                        })
                        .collect();
                    handles.into_iter().try_for_each(|h| h.join().map_err(|_| "a publisher panicked".to_owned())?)
                })
            })
            .map(|out| ChildOut { t0: t0.load(Ordering::Relaxed), ..out })
        }
        Role::SockPub => {
            let stream = UnixStream::connect(conf.dir.join("socket")).map_err(err("connect"))?;
            if conf.buffered { write_all(conf, BufWriter::new(stream)) } else { write_all(conf, stream) }
        }
        Role::SockSub => {
            let listener = UnixListener::bind(conf.dir.join("socket")).map_err(err("bind"))?;
            say("ready")?;
            let (stream, _) = listener.accept().map_err(err("accept"))?;
            let mut r = BufReader::new(stream);
            let mut checker = Checker::new(conf.publishers, conf.payload);
            let mut buf = vec![0u8; conf.payload];
            let expected = conf.messages * u64::from(conf.publishers);
            while checker.received < expected {
                r.read_exact(&mut buf).map_err(err("read"))?;
                checker.on(&buf);
            }
            Ok(ChildOut { t_end: mono_ns(), received: checker.received, bad: checker.bad, ..ChildOut::default() })
        }
        Role::Ping | Role::Pong => ping_pong(conf),
        Role::Idle => {
            let broker = broker(&conf.dir, Sharing::Processes)?;
            join(&broker)?;
            let woken = Arc::new(AtomicU64::new(0));
            let (tx, rx) = crossbeam_channel::unbounded();
            let subs: Vec<_> = (0..conf.subscriptions)
                .map(|_| {
                    let (woken, tx) = (woken.clone(), tx.clone());
                    let mut checker = Checker::new(1, conf.payload);
                    broker
                        .subscribe(TOPIC, SubscriptionOptions::default(), move |m: &Message<'_>| {
                            checker.on(m.payload());
                            // Relaxed: a count; the channel carries the news.
                            let bad = checker.bad;
                            woken.fetch_add(1, Ordering::Relaxed);
                            let _ = tx.send(bad);
                            Ack::Success
                        })
                        .map_err(err("subscribe"))
                })
                .collect::<Result<_, _>>()?;
            for s in &subs {
                s.wait_idle(Duration::from_secs(10)).map_err(err("wait_idle"))?;
            }
            say("ready")?;
            hear("go")?;
            let before = cpu_ns();
            hear("stop")?;
            let cpu = cpu_ns() - before;
            say(&format!("cpu {cpu}"))?;
            // The parent publishes one message: every subscription gets it.
            let mut bad = 0;
            for _ in 0..conf.subscriptions {
                bad += rx.recv_timeout(CHILD_CAP).map_err(err("waiting for the wake-up message"))?;
            }
            drop(subs);
            Ok(ChildOut { received: woken.load(Ordering::Relaxed), bad, cpu_ns: cpu, ..ChildOut::default() })
        }
    }
}

/// The socket publisher's loop: each message `write_all` into `w`, then a
/// flush.
fn write_all(conf: &ChildConf, mut w: impl Write) -> Result<ChildOut, String> {
    say("ready")?;
    hear("go")?;
    let t0 = mono_ns();
    publish(conf, |p| w.write_all(p).map_err(err("write")))?;
    w.flush().map_err(err("flush"))?;
    Ok(ChildOut { t0, ..ChildOut::default() })
}

/// Publishes `conf.messages` messages of publisher `conf.who` through
/// `send`, at `conf.rate` if set (each stamped when sent).
fn publish(conf: &ChildConf, mut send: impl FnMut(&[u8]) -> Result<(), String>) -> Result<(), String> {
    let mut buf = vec![0u8; conf.payload];
    match conf.rate {
        None => {
            for seq in 0..conf.messages {
                encode(&mut buf, conf.who, seq, 0);
                send(&buf)?;
            }
        }
        Some(rate) => {
            let gap = 1_000_000_000 / rate.max(1);
            let start = mono_ns();
            for seq in 0..conf.messages {
                let due = start + seq * gap;
                let mut now = mono_ns();
                while now < due {
                    std::hint::spin_loop();
                    now = mono_ns();
                }
                encode(&mut buf, conf.who, seq, now);
                send(&buf)?;
            }
        }
    }
    Ok(())
}

/// Subscribes, runs `go` (which says ready and waits for the word, or
/// publishes too), then waits for every message; with a rate, records each
/// message's latency from its stamp.
fn subscribe_and_wait(
    broker: &Broker,
    conf: &ChildConf,
    go: impl FnOnce() -> Result<(), String>,
) -> Result<ChildOut, String> {
    let expected = conf.messages * u64::from(conf.publishers);
    let state = Arc::new(Mutex::new((
        Checker::new(conf.publishers, conf.payload),
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds"),
    )));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let stamped = conf.rate.is_some();
    let s = state.clone();
    let mut checker = Checker::new(conf.publishers, conf.payload);
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    let options = SubscriptionOptions {
        dedicated_thread: stamped,
        idle_spin: stamped.then_some(LATENCY_IDLE_SPIN),
        ..SubscriptionOptions::default()
    };
    let sub = broker
        .subscribe(TOPIC, options, move |m: &Message<'_>| {
            let stamp = checker.on(m.payload());
            if stamped {
                latencies.saturating_record(mono_ns().saturating_sub(stamp).max(1));
            }
            if checker.received == expected {
                let t_end = mono_ns();
                let mut state = s.lock().unwrap_or_else(|e| e.into_inner());
                state.0 = std::mem::replace(&mut checker, Checker::new(0, 0));
                state.1 = latencies.clone();
                let _ = tx.send(t_end);
            }
            Ack::Success
        })
        .map_err(err("subscribe"))?;
    go()?;
    let t_end = rx
        .recv_timeout(CHILD_CAP)
        .map_err(|_| format!("not every message arrived within {} s (expected {expected})", CHILD_CAP.as_secs()))?;
    sub.close();
    let state = state.lock().unwrap_or_else(|e| e.into_inner());
    let (checker, h) = &*state;
    let p = percentiles(h);
    Ok(ChildOut { t_end, received: checker.received, bad: checker.bad, p50: p.p50, p99: p.p99, ..ChildOut::default() })
}

/// A shared mapping of one page of a file: the ping-pong's two counters.
struct Shared {
    ptr: *mut libc::c_void,
}

impl Shared {
    const LEN: usize = 4096;

    fn map(path: &Path) -> Result<Shared, String> {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(err("open the ping-pong file"))?;
        file.set_len(Self::LEN as u64).map_err(err("size the ping-pong file"))?;
        // SAFETY: a fresh shared mapping of an open file of LEN bytes; the
        // kernel picks the address; the fd may close after mmap returns.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Shared { ptr })
    }

    /// Counter `i` (0 or 1), each on a cache line of its own.
    fn counter(&self, i: usize) -> &AtomicU64 {
        assert!(i < 2);
        // SAFETY: the mapping is LEN bytes, page-aligned and alive as long
        // as `self`; offset 128 * i is inside it and 8-aligned; the file's
        // bytes are only ever accessed as these atomics, by every process.
        unsafe { &*(self.ptr.cast::<u8>().add(128 * i).cast::<AtomicU64>()) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no reference
        // from `counter` outlives `self`.
        unsafe { libc::munmap(self.ptr, Self::LEN) };
    }
}

/// One side of the shared-memory ping-pong: `Ping` writes `i` into counter
/// 0 and spins until counter 1 says `i`; `Pong` spins until counter 0 says
/// `i` and writes it into counter 1. The pinger starts a round trip every
/// `1 / conf.rate` seconds, as the latency run publishes, so both runs keep
/// two processes spinning for the same time on a machine that may be
/// shared.
fn ping_pong(conf: &ChildConf) -> Result<ChildOut, String> {
    let shared = Shared::map(&conf.dir.join("ping-pong"))?;
    let (ping, pong) = (shared.counter(0), shared.counter(1));
    say("ready")?;
    hear("go")?;
    let deadline = Instant::now() + CHILD_CAP;
    // Spins until `c` holds `i`, looking at the clock now and then so a
    // dead partner does not hold this process forever.
    let wait = |c: &AtomicU64, i: u64| -> Result<(), String> {
        let mut spins = 0u32;
        // Acquire: pairs with the partner's Release store of `i`; nothing
        // else crosses, but it keeps the handoff a real one.
        while c.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1 << 16) && Instant::now() > deadline {
                return Err("the ping-pong partner stopped answering".into());
            }
        }
        Ok(())
    };
    if conf.role == Role::Pong {
        for i in 1..=conf.messages {
            wait(ping, i)?;
            // Release: pairs with the pinger's Acquire load.
            pong.store(i, Ordering::Release);
        }
        return Ok(ChildOut { received: conf.messages, ..ChildOut::default() });
    }
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    let gap = 1_000_000_000 / conf.rate.unwrap_or(u64::MAX).max(1);
    let start = mono_ns();
    for i in 1..=conf.messages {
        // Paced as the latency run's publisher, so both spin as long.
        let due = start + (i - 1) * gap;
        let mut t = mono_ns();
        while t < due {
            std::hint::spin_loop();
            t = mono_ns();
        }
        // Release: pairs with the ponger's Acquire load.
        ping.store(i, Ordering::Release);
        wait(pong, i)?;
        h.saturating_record((mono_ns() - t).max(1));
    }
    let p = percentiles(&h);
    Ok(ChildOut { received: conf.messages, p50: p.p50, p99: p.p99, ..ChildOut::default() })
}

// ---- the parent ----

/// A running child.
struct Kid {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
    what: String,
}

impl Kid {
    fn spawn(exe: &Path, conf: &ChildConf) -> Result<Kid, String> {
        let mut child = Command::new(exe)
            .env(ROLE_ENV, serde_json::to_string(conf).expect("plain data"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(err("spawn a child"))?;
        let stdin = child.stdin.take().expect("piped");
        let out = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Kid { child, stdin, out, what: format!("{:?} {}", conf.role, conf.who) })
    }

    /// The child's next line; its result line, if it failed.
    fn line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        self.out.read_line(&mut line).map_err(err("read a child"))?;
        if line.is_empty() {
            return Err(format!("child {} exited early", self.what));
        }
        if let Ok(ChildOut { error: Some(e), .. }) = serde_json::from_str::<ChildOut>(&line) {
            return Err(format!("child {}: {e}", self.what));
        }
        Ok(line.trim().to_owned())
    }

    fn expect(&mut self, what: &str) -> Result<(), String> {
        let line = self.line()?;
        if line == what { Ok(()) } else { Err(format!("child {}: expected {what:?}, got {line:?}", self.what)) }
    }

    fn tell(&mut self, what: &str) -> Result<(), String> {
        writeln!(self.stdin, "{what}").and_then(|()| self.stdin.flush()).map_err(err("write to a child"))
    }

    /// Its result, once it has exited.
    fn finish(mut self) -> Result<ChildOut, String> {
        let line = self.line()?;
        let out: ChildOut = serde_json::from_str(&line).map_err(|e| format!("child {}: {e} in {line:?}", self.what))?;
        let status = self.child.wait().map_err(err("wait for a child"))?;
        if !status.success() {
            return Err(format!("child {} failed: {status}", self.what));
        }
        Ok(out)
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        // A child left behind by an error: it is ours, and done with.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A fresh directory for one run, removed when dropped.
struct RunDir(PathBuf);

impl RunDir {
    fn new(root: &Path, what: &str) -> Result<RunDir, String> {
        static N: AtomicU64 = AtomicU64::new(0);
        // Relaxed: a counter for unique names, nothing else.
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("rill-bench-ipc-{}-{what}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(RunDir(dir))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The topic, made once before the children open the directory.
fn prepare(dir: &Path) -> Result<(), String> {
    let b = broker(dir, Sharing::Processes)?;
    join(&b)?;
    b.close();
    Ok(())
}

fn conf(role: Role, dir: &Path, who: u32, publishers: u32, messages: u64, payload: usize) -> ChildConf {
    ChildConf {
        role,
        dir: dir.to_owned(),
        who,
        publishers,
        messages,
        payload,
        rate: None,
        subscriptions: 0,
        buffered: false,
    }
}

/// Starts the publishers (after every child said ready) and returns the
/// subscriber's result with the earliest publisher start.
fn go(sub: Kid, pubs: Vec<Kid>) -> Result<(ChildOut, u64), String> {
    let mut pubs = pubs;
    let mut sub = sub;
    sub.expect("ready")?;
    for p in &mut pubs {
        p.expect("ready")?;
    }
    sub.tell("go")?;
    for p in &mut pubs {
        p.tell("go")?;
    }
    let mut t0 = u64::MAX;
    for p in pubs {
        t0 = t0.min(p.finish()?.t0);
    }
    Ok((sub.finish()?, t0))
}

/// Checks a subscriber's count and payloads.
fn check(out: &ChildOut, expected: u64, what: &str) -> Result<(), String> {
    if out.received != expected || out.bad != 0 {
        return Err(format!(
            "{what}: {} of {expected} messages arrived, {} out of order or damaged",
            out.received, out.bad
        ));
    }
    Ok(())
}

/// msgs/s of one run of `expected` messages.
fn rate(out: &ChildOut, t0: u64, expected: u64) -> f64 {
    expected as f64 * 1e9 / out.t_end.saturating_sub(t0).max(1) as f64
}

/// One throughput run of rill across processes: `publishers` publisher
/// processes, one subscriber process.
fn across(exe: &Path, cfg: &Config, publishers: u32) -> Result<f64, String> {
    let dir = RunDir::new(&cfg.root, "across")?;
    prepare(&dir.0)?;
    let each = (cfg.messages / u64::from(publishers)).max(1);
    let payload = cfg.payload();
    let sub = Kid::spawn(exe, &conf(Role::RillSub, &dir.0, 0, publishers, each, payload))?;
    let pubs = (0..publishers)
        .map(|who| Kid::spawn(exe, &conf(Role::RillPub, &dir.0, who, publishers, each, payload)))
        .collect::<Result<Vec<_>, _>>()?;
    let (out, t0) = go(sub, pubs)?;
    let expected = each * u64::from(publishers);
    check(&out, expected, "rill across processes")?;
    Ok(rate(&out, t0, expected))
}

/// The same in one process.
fn solo(exe: &Path, cfg: &Config, publishers: u32) -> Result<f64, String> {
    let dir = RunDir::new(&cfg.root, "solo")?;
    let each = (cfg.messages / u64::from(publishers)).max(1);
    let mut kid = Kid::spawn(exe, &conf(Role::Solo, &dir.0, 0, publishers, each, cfg.payload()))?;
    kid.expect("ready")?;
    kid.tell("go")?;
    let out = kid.finish()?;
    let expected = each * u64::from(publishers);
    check(&out, expected, "rill in one process")?;
    Ok(rate(&out, out.t0, expected))
}

/// The socket stream, 1 -> 1, its publisher writing through a `BufWriter`
/// or with one `write` per message.
fn socket(exe: &Path, cfg: &Config, buffered: bool) -> Result<f64, String> {
    let dir = RunDir::new(&cfg.root, "socket")?;
    let payload = cfg.payload();
    let mut sub = Kid::spawn(exe, &conf(Role::SockSub, &dir.0, 0, 1, cfg.messages, payload))?;
    // The listener must exist before the publisher connects.
    sub.expect("ready")?;
    let mut publisher =
        Kid::spawn(exe, &ChildConf { buffered, ..conf(Role::SockPub, &dir.0, 0, 1, cfg.messages, payload) })?;
    publisher.expect("ready")?;
    publisher.tell("go")?;
    let t0 = publisher.finish()?.t0;
    let out = sub.finish()?;
    check(&out, cfg.messages, "Unix socket")?;
    Ok(rate(&out, t0, cfg.messages))
}

/// One latency run across processes: (p50, p99) ns.
fn latency(exe: &Path, cfg: &Config) -> Result<(u64, u64), String> {
    let dir = RunDir::new(&cfg.root, "latency")?;
    prepare(&dir.0)?;
    let n = cfg.messages.min(LATENCY_MESSAGES);
    let payload = cfg.payload();
    let stamped = |role| ChildConf { rate: Some(LATENCY_RATE), ..conf(role, &dir.0, 0, 1, n, payload) };
    let sub = Kid::spawn(exe, &stamped(Role::RillSub))?;
    let publisher = Kid::spawn(exe, &stamped(Role::RillPub))?;
    let (out, _) = go(sub, vec![publisher])?;
    check(&out, n, "rill latency across processes")?;
    Ok((out.p50, out.p99))
}

/// One ping-pong run: round trip (p50, p99) ns.
fn round_trip(exe: &Path, cfg: &Config) -> Result<(u64, u64), String> {
    let dir = RunDir::new(&cfg.root, "ping-pong")?;
    let n = cfg.messages.min(LATENCY_MESSAGES);
    let paced = |role| ChildConf { rate: Some(LATENCY_RATE), ..conf(role, &dir.0, 0, 1, n, 0) };
    let mut pong = Kid::spawn(exe, &paced(Role::Pong))?;
    let mut ping = Kid::spawn(exe, &paced(Role::Ping))?;
    pong.expect("ready")?;
    ping.expect("ready")?;
    pong.tell("go")?;
    ping.tell("go")?;
    let out = ping.finish()?;
    pong.finish()?;
    Ok((out.p50, out.p99))
}

/// The idle measurement: CPU ns per process over the window, and the
/// subscriptions woken by the one message published after it.
fn idle(exe: &Path, cfg: &Config) -> Result<(Vec<u64>, u64), String> {
    let dir = RunDir::new(&cfg.root, "idle")?;
    prepare(&dir.0)?;
    let each = IDLE_SUBSCRIPTIONS / IDLE_PROCESSES;
    let payload = cfg.payload();
    let mut kids = (0..IDLE_PROCESSES)
        .map(|who| Kid::spawn(exe, &ChildConf { subscriptions: each, ..conf(Role::Idle, &dir.0, who, 1, 1, payload) }))
        .collect::<Result<Vec<_>, _>>()?;
    for k in &mut kids {
        k.expect("ready")?;
    }
    for k in &mut kids {
        k.tell("go")?;
    }
    // The window being measured, not a wait for anything.
    std::thread::sleep(cfg.idle);
    let mut cpu = Vec::new();
    for k in &mut kids {
        k.tell("stop")?;
    }
    for k in &mut kids {
        let line = k.line()?;
        let ns = line.strip_prefix("cpu ").and_then(|n| n.parse().ok()).ok_or(format!("not a cpu line: {line:?}"))?;
        cpu.push(ns);
    }
    let b = broker(&dir.0, Sharing::Processes)?;
    let mut buf = vec![0u8; payload];
    encode(&mut buf, 0, 0, 0);
    b.publish(TOPIC, &Record::new(&buf)).map_err(err("publish the wake-up message"))?;
    let mut woken = 0;
    for k in kids {
        let out = k.finish()?;
        check(&out, u64::from(each), "an idle subscriber process")?;
        woken += out.received;
    }
    b.close();
    Ok((cpu, woken))
}

/// One round of 1 -> 1, msgs/s.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct OneToOne {
    /// rill, publisher and subscriber in two processes.
    pub across: f64,
    /// rill in one process.
    pub solo: f64,
    /// The socket, its publisher writing through a `BufWriter`.
    pub socket_buffered: f64,
    /// The socket, one `write` per message.
    pub socket_each: f64,
}

/// Everything `--scenario ipc` measured.
#[derive(Debug, Clone, Serialize)]
pub struct IpcBench {
    pub messages: u64,
    pub payload: usize,
    pub root: PathBuf,
    /// Per round, 1 -> 1 msgs/s.
    pub one_to_one: Vec<OneToOne>,
    /// Per round: (across, one process) msgs/s, 4 -> 1.
    pub many_to_one: Vec<(f64, f64)>,
    /// Per round: (rill one-way p50, p99, ping-pong round trip p50, p99) ns.
    pub latency: Vec<(u64, u64, u64, u64)>,
    /// CPU ns of each idle process over the window.
    pub idle_cpu_ns: Vec<u64>,
    pub idle_window: Duration,
    /// Subscriptions the message after the window woke.
    pub idle_woken: u64,
}

/// Runs the whole scenario; `exe` is `rill-bench` itself (its children).
pub fn run(exe: &Path, cfg: &Config, progress: &mut dyn FnMut(&str)) -> Result<IpcBench, String> {
    let rounds = cfg.rounds.max(1);
    let mut bench = IpcBench {
        messages: cfg.messages,
        payload: cfg.payload(),
        root: cfg.root.clone(),
        one_to_one: Vec::new(),
        many_to_one: Vec::new(),
        latency: Vec::new(),
        idle_cpu_ns: Vec::new(),
        idle_window: cfg.idle,
        idle_woken: 0,
    };
    for r in 0..rounds {
        progress(&format!("ipc: 1 -> 1, round {}/{rounds}", r + 1));
        // The order rotates, so no side always runs first.
        let mut o = OneToOne::default();
        for step in 0..4 {
            match (step + r) % 4 {
                0 => o.across = across(exe, cfg, 1)?,
                1 => o.solo = solo(exe, cfg, 1)?,
                2 => o.socket_buffered = socket(exe, cfg, true)?,
                _ => o.socket_each = socket(exe, cfg, false)?,
            }
        }
        bench.one_to_one.push(o);
    }
    for r in 0..rounds {
        progress(&format!("ipc: {MANY} -> 1, round {}/{rounds}", r + 1));
        let (a, s) = if r % 2 == 0 {
            let a = across(exe, cfg, MANY)?;
            (a, solo(exe, cfg, MANY)?)
        } else {
            let s = solo(exe, cfg, MANY)?;
            (across(exe, cfg, MANY)?, s)
        };
        bench.many_to_one.push((a, s));
    }
    for r in 0..rounds {
        progress(&format!("ipc: latency, round {}/{rounds}", r + 1));
        let (l, p) = if r % 2 == 0 {
            let l = latency(exe, cfg)?;
            (l, round_trip(exe, cfg)?)
        } else {
            let p = round_trip(exe, cfg)?;
            (latency(exe, cfg)?, p)
        };
        bench.latency.push((l.0, l.1, p.0, p.1));
    }
    progress("ipc: idle");
    let (cpu, woken) = idle(exe, cfg)?;
    bench.idle_cpu_ns = cpu;
    bench.idle_woken = woken;
    Ok(bench)
}

fn ratios(f: impl Fn(usize) -> f64, n: usize) -> Option<PairStats> {
    pair_stats(&(0..n).map(f).collect::<Vec<_>>())
}

fn describe(p: Option<PairStats>) -> String {
    p.map_or_else(|| "-".into(), |p| format!("median {}, worst {}", fmt_ratio(p.median), fmt_ratio(p.worst)))
}

impl IpcBench {
    /// The report's lines.
    pub fn table(&self) -> String {
        let mut out = format!(
            "ipc: rill across processes on one data directory (Sharing::Processes, Fsync::Never) under {}, \
             {} B payloads, {} messages per throughput run, {} interleaved rounds\n",
            self.root.display(),
            self.payload,
            self.messages,
            self.one_to_one.len()
        );
        let n = self.one_to_one.len();
        out += "\n1 -> 1, msgs/s (publisher process -> push subscriber process; one process: a publisher thread and \
                a push subscriber, Sharing::Exclusive; socket: a Unix stream read with BufReader + read_exact, \
                written with write_all through a BufWriter (buffered) or straight into the socket (a write per \
                message))\n| round | across processes | one process | socket, buffered | socket, a write per \
                message | across / one process | across / buffered | across / write per message |\n\
                |---|---|---|---|---|---|---|---|\n";
        for (i, o) in self.one_to_one.iter().enumerate() {
            out += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                i + 1,
                fmt_count(o.across),
                fmt_count(o.solo),
                fmt_count(o.socket_buffered),
                fmt_count(o.socket_each),
                fmt_ratio(o.across / o.solo),
                fmt_ratio(o.across / o.socket_buffered),
                fmt_ratio(o.across / o.socket_each)
            );
        }
        let col = |f: fn(&OneToOne) -> f64| fmt_count(median(&self.one_to_one.iter().map(f).collect::<Vec<_>>()));
        out += &format!(
            "| median | {} | {} | {} | {} | | | |\n",
            col(|o| o.across),
            col(|o| o.solo),
            col(|o| o.socket_buffered),
            col(|o| o.socket_each)
        );
        let o = &self.one_to_one;
        out += &format!(
            "across / one process: {} (goal >= 0.5x); across / socket (goal >= 10x): buffered {}; a write per \
             message {}\n",
            describe(ratios(|i| o[i].across / o[i].solo, n)),
            describe(ratios(|i| o[i].across / o[i].socket_buffered, n)),
            describe(ratios(|i| o[i].across / o[i].socket_each, n))
        );

        out += &format!(
            "\n{MANY} -> 1, msgs/s in all ({MANY} publisher processes -> 1 subscriber process; one process: {MANY} \
             publisher threads and a subscriber)\n| round | across processes | one process | across / one process |\n\
             |---|---|---|---|\n"
        );
        for (i, (a, s)) in self.many_to_one.iter().enumerate() {
            out += &format!("| {} | {} | {} | {} |\n", i + 1, fmt_count(*a), fmt_count(*s), fmt_ratio(a / s));
        }
        out += &format!(
            "across / one process: {} (goal >= 0.5x)\n",
            describe(ratios(|i| self.many_to_one[i].0 / self.many_to_one[i].1, self.many_to_one.len()))
        );

        out += &format!(
            "\none-way latency across processes at {} msgs/s (CLOCK_MONOTONIC stamp in the payload, dedicated \
             spinning subscriber) against a shared-memory spin ping-pong round trip between two processes, \
             paced at the same rate\n\
             | round | rill p50 | rill p99 | round trip p50 | round trip p99 | rill p50 / round trip p50 |\n\
             |---|---|---|---|---|---|\n",
            fmt_count(LATENCY_RATE as f64)
        );
        for (i, (l50, l99, p50, p99)) in self.latency.iter().enumerate() {
            out += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                i + 1,
                fmt_ns(*l50),
                fmt_ns(*l99),
                fmt_ns(*p50),
                fmt_ns(*p99),
                fmt_ratio(*l50 as f64 / (*p50).max(1) as f64)
            );
        }
        // Lower is better here, so the worst round is the largest ratio.
        let lat: Vec<f64> = self.latency.iter().map(|r| r.0 as f64 / r.2.max(1) as f64).collect();
        let worst = lat.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        out += &format!(
            "rill p50 / round trip p50: median {}, worst {} (goal <= 2x)\n",
            fmt_ratio(median(&lat)),
            fmt_ratio(worst)
        );

        let total: u64 = self.idle_cpu_ns.iter().sum();
        let each: Vec<String> = self.idle_cpu_ns.iter().map(|ns| fmt_ns(*ns)).collect();
        out += &format!(
            "\nidle: {IDLE_SUBSCRIPTIONS} caught-up subscriptions across {IDLE_PROCESSES} processes: {} of CPU in {:.1} s \
             (getrusage of each process: {}; goal < 1 ms); the message published after the window woke {} of them\n",
            fmt_ns(total),
            self.idle_window.as_secs_f64(),
            each.join(", "),
            self.idle_woken
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(who: u32, seq: u64) -> Vec<u8> {
        let mut buf = vec![0u8; 64];
        encode(&mut buf, who, seq, 7);
        buf
    }

    #[test]
    fn the_checker_passes_each_publishers_order_and_catches_the_rest() {
        let mut c = Checker::new(2, 64);
        assert_eq!(c.on(&message(0, 0)), 7);
        c.on(&message(1, 0));
        c.on(&message(0, 1));
        assert_eq!((c.received, c.bad), (3, 0));
        c.on(&message(1, 2)); // publisher 1's message 1 is missing
        let mut damaged = message(0, 2);
        damaged[63] ^= 1;
        c.on(&damaged);
        c.on(&message(2, 0)); // no such publisher
        c.on(&message(0, 3)[..32]); // wrong size
        assert_eq!((c.received, c.bad), (7, 4));
    }
}
