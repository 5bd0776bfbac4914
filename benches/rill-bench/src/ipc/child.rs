//! The children of the ipc scenario: `rill-bench` run again with
//! [`ROLE_ENV`] set plays one part (a rill publisher or subscriber, rill in
//! one process, a socket end, a ping-pong side, an idle process) and
//! answers with one line.

use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rill::{Ack, Broker, ConsumerOptions, Message, Record, Sharing, SubscriptionOptions};

use super::ice;
use super::proto::{
    CHILD_CAP, Checker, ChildConf, ChildOut, IDLE_GROUP, IDLE_GROUP_MEMBERS, IDLE_PROCESSES, IDLE_SHARED_MEMBERS,
    IDLE_SHARED_NAME, LATENCY_IDLE_SPIN, ROLE_ENV, Role, TOPIC, broker, cpu_ns, err, hear, join, mono_ns, publish, say,
    thread_cpu_ns,
};
use crate::stats::percentiles;

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

pub(super) fn child(conf: &ChildConf) -> Result<ChildOut, String> {
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
        Role::IcePub | Role::IceSub => ice::child(conf),
        Role::Idle => idle(conf),
    }
}

/// An idle child: its share of the plain subscriptions, of the shared
/// subscription's members and of the consumer group's members (see the
/// module docs of `ipc`).
fn idle(conf: &ChildConf) -> Result<ChildOut, String> {
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
    let shared: Vec<_> = (0..IDLE_SHARED_MEMBERS / IDLE_PROCESSES)
        .map(|_| {
            let options = SubscriptionOptions {
                name: Some(IDLE_SHARED_NAME.into()),
                shared: true,
                ..SubscriptionOptions::default()
            };
            broker.subscribe(TOPIC, options, |_| Ack::Success).map_err(err("subscribe a shared member"))
        })
        .collect::<Result<_, _>>()?;
    // Each member blocked in a poll on a thread of its own (as an
    // idle worker waits), until the broker's close ends the poll.
    let members: Vec<_> = (0..IDLE_GROUP_MEMBERS / IDLE_PROCESSES)
        .map(|_| {
            let mut c = broker
                .consumer(IDLE_GROUP, TOPIC, ConsumerOptions::default())
                .map_err(err("a consumer group member"))?;
            Ok(std::thread::spawn(move || while c.poll(16, Duration::from_secs(3600)).is_ok() {}))
        })
        .collect::<Result<_, String>>()?;
    for s in subs.iter().chain(&shared) {
        s.wait_idle(Duration::from_secs(10)).map_err(err("wait_idle"))?;
    }
    say("ready")?;
    // The window's CPU is that of every thread but this one, which only
    // waits on stdin for the parent's words: its own wake-up at "stop"
    // (and the getrusage calls) is the measurement's cost, not the
    // subscribers', and is reported apart.
    let others = || cpu_ns().saturating_sub(thread_cpu_ns());
    hear("settle")?;
    let settling = others();
    hear("go")?;
    let (before, own) = (others(), thread_cpu_ns());
    hear("stop")?;
    // Saturating: the two clocks are read a moment apart, so `others`
    // can come out a little low.
    let (cpu, own) = (others().saturating_sub(before), thread_cpu_ns() - own);
    say(&format!("cpu {cpu} settle {} measuring {own}", before.saturating_sub(settling)))?;
    // The parent publishes one message: every subscription gets it.
    let mut bad = 0;
    for _ in 0..conf.subscriptions {
        bad += rx.recv_timeout(CHILD_CAP).map_err(err("waiting for the wake-up message"))?;
    }
    // Listed until the parent counted what the shared and group
    // members got (one of them, in whichever process).
    say("woken")?;
    hear("end")?;
    drop(subs);
    drop(shared);
    broker.close();
    for m in members {
        m.join().map_err(|_| "a group member's thread panicked".to_owned())?;
    }
    Ok(ChildOut { received: woken.load(Ordering::Relaxed), bad, cpu_ns: cpu, ..ChildOut::default() })
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
