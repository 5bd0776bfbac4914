//! What the ipc scenario's processes share: the orders a child gets
//! ([`ChildConf`]), the one line it answers with ([`ChildOut`]), the words
//! it exchanges with the parent, the message layout and its checker, and
//! the publish loop every publisher runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rill::{Broker, BrokerConfig, Fsync, Sharing, TopicOptions};
use serde::{Deserialize, Serialize};

/// Set in a child: its orders (a `ChildConf`) as JSON.
pub const ROLE_ENV: &str = "RILL_BENCH_IPC_ROLE";

/// The topic every run publishes to.
pub(super) const TOPIC: &str = "ipc";
/// The publish rate of the latency runs, msgs/s (issue 39's figure).
pub const LATENCY_RATE: u64 = 100_000;
/// Most messages of one latency run (one second at [`LATENCY_RATE`]).
pub(super) const LATENCY_MESSAGES: u64 = 100_000;
/// Idle subscriptions in all, and the processes they are spread over.
pub const IDLE_SUBSCRIPTIONS: u32 = 100;
pub const IDLE_PROCESSES: u32 = 4;
/// Idle members of one shared subscription, in all, beside the plain
/// subscriptions and spread over the same processes.
pub const IDLE_SHARED_MEMBERS: u32 = 16;
/// Idle members of one consumer group (pull consumers, each blocked in a
/// `poll` on a thread of its own), in all, spread the same way.
pub const IDLE_GROUP_MEMBERS: u32 = 8;

/// How long the idle window starts after the members settled: past the
/// setup's delayed work (the flusher runs a round for what the setup's
/// deliveries left at most every 100 ms under `Fsync::Never`), so that the
/// window measures idle subscribers, not subscribers going idle.
pub const IDLE_SETTLE: Duration = Duration::from_millis(500);
/// The idle shared subscription's name and the idle consumer group.
pub(super) const IDLE_SHARED_NAME: &str = "idle-shared";
pub(super) const IDLE_GROUP: &str = "idle-group";
/// Publisher processes of the many-to-one runs.
pub const MANY: u32 = 4;
/// How long a child waits for its messages before it reports what it got.
pub(super) const CHILD_CAP: Duration = Duration::from_secs(120);
/// Bytes of a payload's header: publisher (4), padding (4), sequence (8),
/// stamp (8); the rest is the fill byte.
pub(super) const HEADER: usize = 24;
/// How long a latency subscriber keeps polling before it parks: longer than
/// the gap between two messages at [`LATENCY_RATE`], as in the in-process
/// `latency` scenario.
pub(super) const LATENCY_IDLE_SPIN: Duration = Duration::from_micros(200);

/// What a child does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Role {
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
    /// Holds idle subscriptions, shared-subscription members and
    /// consumer-group members, and reads its CPU time.
    Idle,
    /// Publishes through iceoryx2 (the `iceoryx2` feature).
    IcePub,
    /// Receives through iceoryx2, polling.
    IceSub,
}

/// A child's orders.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ChildConf {
    pub(super) role: Role,
    /// The data directory (or the socket's / mapping's directory).
    pub(super) dir: PathBuf,
    /// This publisher's number.
    pub(super) who: u32,
    /// Publishers in the run (the subscriber expects each one's messages).
    pub(super) publishers: u32,
    /// Messages per publisher (round trips for a ping-pong).
    pub(super) messages: u64,
    pub(super) payload: usize,
    /// Publish at this rate, stamping each message (latency runs).
    pub(super) rate: Option<u64>,
    /// Subscriptions of an idle child.
    pub(super) subscriptions: u32,
    /// A socket publisher writes through a `BufWriter` (else one `write`
    /// per message).
    pub(super) buffered: bool,
}

/// A child's one line of results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct ChildOut {
    /// `CLOCK_MONOTONIC` when a publisher started.
    pub(super) t0: u64,
    /// `CLOCK_MONOTONIC` when a subscriber had its last message.
    pub(super) t_end: u64,
    /// Messages received (or subscriptions woken, for an idle child).
    pub(super) received: u64,
    /// Messages out of order or damaged.
    pub(super) bad: u64,
    /// Latency (or round trip) percentiles, ns.
    pub(super) p50: u64,
    pub(super) p99: u64,
    /// CPU time over the idle window, ns.
    pub(super) cpu_ns: u64,
    pub(super) error: Option<String>,
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process on the host.
pub(super) fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This process's CPU time (user + system, every thread), ns.
pub(super) fn cpu_ns() -> u64 {
    rusage_ns(libc::RUSAGE_SELF)
}

/// The calling thread's CPU time (user + system), ns.
pub(super) fn thread_cpu_ns() -> u64 {
    rusage_ns(libc::RUSAGE_THREAD)
}

fn rusage_ns(who: libc::c_int) -> u64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the call's duration.
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The fill byte of message `seq` of publisher `who`.
pub(super) fn fill(who: u32, seq: u64) -> u8 {
    (seq as u8) ^ (who as u8).wrapping_mul(37)
}

/// Writes message `seq` of publisher `who` into `buf`.
pub(super) fn encode(buf: &mut [u8], who: u32, seq: u64, stamp: u64) {
    buf[..4].copy_from_slice(&who.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..24].copy_from_slice(&stamp.to_le_bytes());
    buf[HEADER..].fill(fill(who, seq));
}

/// Checks each message: its size, its fill, and that it is its publisher's
/// next one.
pub(super) struct Checker {
    pub(super) next: Vec<u64>,
    pub(super) payload: usize,
    pub(super) received: u64,
    pub(super) bad: u64,
}

impl Checker {
    pub(super) fn new(publishers: u32, payload: usize) -> Checker {
        Checker { next: vec![0; publishers as usize], payload, received: 0, bad: 0 }
    }

    /// Checks `p`; returns its stamp.
    pub(super) fn on(&mut self, p: &[u8]) -> u64 {
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

/// Tells the parent this child is ready (or has done a step).
pub(super) fn say(what: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{what}").and_then(|()| stdout.flush()).map_err(|e| format!("stdout: {e}"))
}

/// Waits for the parent's next word on stdin.
pub(super) fn hear(expected: &str) -> Result<(), String> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(|e| format!("stdin: {e}"))?;
    if line.trim() == expected { Ok(()) } else { Err(format!("expected {expected:?} from the parent, got {line:?}")) }
}

pub(super) fn err<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

pub(super) fn broker(dir: &Path, sharing: Sharing) -> Result<Broker, String> {
    Broker::new(BrokerConfig { data_dir: Some(dir.to_owned()), sharing, fsync: Fsync::Never, ..Default::default() })
        .map_err(err("open the broker"))
}

/// Creates the topic, or joins it if another process (or [`prepare`]) made
/// it first.
pub(super) fn join(broker: &Broker) -> Result<(), String> {
    match broker.create_topic(TOPIC, &topic_options()) {
        Ok(_) | Err(rill::Error::TopicExists(_)) => Ok(()),
        Err(e) => Err(format!("create_topic: {e}")),
    }
}

/// The whole run stays in the log: nothing is lost to retention.
pub(super) fn topic_options() -> TopicOptions {
    TopicOptions { retention_bytes: None, ..TopicOptions::default() }
}

/// Publishes `conf.messages` messages of publisher `conf.who` through
/// `send`, at `conf.rate` if set (each stamped when sent).
pub(super) fn publish(conf: &ChildConf, mut send: impl FnMut(&[u8]) -> Result<(), String>) -> Result<(), String> {
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
