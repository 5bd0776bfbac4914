//! `--scenario ipc`: issue 39's speed lines, rill across processes on one
//! data directory opened with `Sharing::Processes`. Its own runner: every
//! measured party is a child process, `rill-bench` itself run again with
//! [`ROLE_ENV`] set to a JSON `ChildConf` (see [`child_main`]); the parent
//! only starts the children, tells them when to go through their stdin and
//! reads one line of results from each stdout. Nothing waits by sleeping:
//! each step is a line a child writes once it has done it (the sleeps are
//! the idle window, which is what it measures, and the settle before it).
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
//!   two processes in the plain loops its user writes: `write_all` of each
//!   message into a `BufWriter<UnixStream>` (flushed at the end) or straight
//!   into the `UnixStream` (a `write` per message), and `read_exact` of each
//!   message from a `BufReader<UnixStream>`; with the `iceoryx2` feature,
//!   against iceoryx2's publish-subscribe too (`ice.rs`).
//! * **4 -> 1**: four publisher processes and one subscriber process,
//!   against four publisher threads and a subscriber in one process.
//! * **One-way latency at 100 k msgs/s**: a publisher process stamps each
//!   message with `CLOCK_MONOTONIC` (one clock for every process on the
//!   host) and a dedicated, spinning subscriber in another process records
//!   its arrival; against the round trip of a ping-pong between two
//!   processes spinning on a shared mapping of a file in the run's
//!   directory, paced at the same rate and measured in the same rounds: the
//!   floor of any cross-process handoff.
//! * **Idle**: 100 caught-up subscriptions across 4 processes (25 each),
//!   and beside them 16 members of one shared subscription (4 in each
//!   process) and 8 members of one consumer group (2 in each process, each
//!   a pull consumer blocked in `poll` on a thread of its own); each
//!   process reads its CPU time (`getrusage`: the process's less the
//!   measuring thread's, so every thread of rill and of the members, and
//!   not the thread that waits on stdin for the parent's words, whose
//!   wake-up at the window's end is reported apart) before and after a
//!   window of `--ipc-idle-secs` (2 s), which
//!   starts [`IDLE_SETTLE`] after every member is listed and the group's
//!   partitions are all owned (the CPU of that settle is reported beside
//!   the window's: it holds the work the setup left for later, such as the
//!   flusher's round for the positions its deliveries reached); then the
//!   parent publishes one message and every subscription must get it, and
//!   so must exactly one member of the shared subscription and one of the
//!   group, as the parent's `directory_subscriptions` and
//!   `directory_consumers` count them (so the idle ones were alive, and
//!   woken across processes).
//!
//! Every message is checked: the payload carries its publisher, its
//! sequence number and a fill byte derived from both, and each subscriber
//! checks every byte, each publisher's order and the count. A run that
//! loses, reorders or damages a message fails the scenario.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rill::{Record, Sharing};

mod child;
mod ice;
mod proto;
mod report;

pub use child::child_main;
pub use proto::{
    IDLE_GROUP_MEMBERS, IDLE_PROCESSES, IDLE_SETTLE, IDLE_SHARED_MEMBERS, IDLE_SUBSCRIPTIONS, LATENCY_RATE, MANY,
    ROLE_ENV,
};
pub use report::{IpcBench, OneToOne};

use proto::{
    CHILD_CAP, ChildConf, ChildOut, HEADER, IDLE_GROUP, IDLE_SHARED_NAME, LATENCY_MESSAGES, Role, TOPIC, broker,
    encode, err, join,
};

/// The run's sizes and where its directories go.
#[derive(Debug, Clone)]
pub struct Config {
    /// Messages per throughput run, in all (split over the publishers).
    pub messages: u64,
    /// Payload bytes (at least `HEADER`, 24).
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

/// iceoryx2, 1 -> 1 (`None` in a build without it).
fn iceoryx2(exe: &Path, cfg: &Config) -> Result<Option<f64>, String> {
    if !cfg!(feature = "iceoryx2") {
        return Ok(None);
    }
    let dir = RunDir::new(&cfg.root, "iceoryx2")?;
    let payload = cfg.payload();
    let mut sub = Kid::spawn(exe, &conf(Role::IceSub, &dir.0, 0, 1, cfg.messages, payload))?;
    // The subscriber exists before the first send.
    sub.expect("ready")?;
    let mut publisher = Kid::spawn(exe, &conf(Role::IcePub, &dir.0, 0, 1, cfg.messages, payload))?;
    publisher.expect("ready")?;
    publisher.tell("go")?;
    publisher.expect("sent")?;
    let out = sub.finish()?;
    // Its samples live in its memory: it leaves once they are taken.
    publisher.tell("exit")?;
    let t0 = publisher.finish()?.t0;
    check(&out, cfg.messages, "iceoryx2")?;
    Ok(Some(rate(&out, t0, cfg.messages)))
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

/// What the idle measurement found: CPU ns per process over the window and
/// over the settle before it, the subscriptions woken by the one message
/// published after it, and what the shared subscription's and the group's
/// members got of it.
struct Idle {
    cpu: Vec<u64>,
    settle: Vec<u64>,
    /// The measuring thread's own CPU over the window, per process.
    measuring: Vec<u64>,
    woken: u64,
    shared_got: u64,
    group_got: u64,
}

/// Waits, up to [`CHILD_CAP`], until `done` says the listings are as
/// wanted; says what they were then otherwise. Polls: another process's
/// counters have no event to wait on.
fn wait_listing(what: &str, mut done: impl FnMut() -> Result<Option<String>, String>) -> Result<(), String> {
    let deadline = std::time::Instant::now() + CHILD_CAP;
    loop {
        let Some(seen) = done()? else { return Ok(()) };
        if std::time::Instant::now() > deadline {
            return Err(format!("waited {CHILD_CAP:?} for {what}: {seen}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Members listed, and what they got.
type Members = (u32, u64);

/// The members of the idle shared subscription and group the listings
/// show, and what they got: (shared, group).
fn idle_members(b: &rill::Broker) -> Result<(Members, Members), String> {
    let subs = b.directory_subscriptions().map_err(err("directory_subscriptions"))?;
    let shared = subs.iter().filter(|s| s.shared && s.stats.name == IDLE_SHARED_NAME);
    let shared = shared.fold((0, 0), |(n, got), s| (n + 1, got + s.stats.delivered));
    let consumers = b.directory_consumers().map_err(err("directory_consumers"))?;
    let group = consumers.iter().filter(|c| c.group == IDLE_GROUP);
    Ok((shared, group.fold((0, 0), |(n, got), c| (n + 1, got + c.delivered))))
}

/// The idle measurement (see the module docs).
fn idle(exe: &Path, cfg: &Config) -> Result<Idle, String> {
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
    let b = broker(&dir.0, Sharing::Processes)?;
    // Every member listed, and the group's partitions all owned: the
    // joins' rebalances are over before the window.
    let partitions = b.topic_stats(TOPIC).map_err(err("topic_stats"))?.partitions.len();
    wait_listing("the idle members to settle", || {
        let ((shared, _), (group, _)) = idle_members(&b)?;
        let members = b.group_members(IDLE_GROUP, TOPIC).map_err(err("group_members"))?;
        let mut owned: Vec<u32> = members.iter().flat_map(|m| m.partitions.iter().copied()).collect();
        owned.sort_unstable();
        owned.dedup();
        let settled = (shared, group, members.len(), owned.len())
            == (IDLE_SHARED_MEMBERS, IDLE_GROUP_MEMBERS, IDLE_GROUP_MEMBERS as usize, partitions);
        Ok((!settled).then(|| format!("{shared} shared members, {group} group members, {owned:?} owned")))
    })?;
    for k in &mut kids {
        k.tell("settle")?;
    }
    // The settle and the window being measured, not waits for anything.
    std::thread::sleep(IDLE_SETTLE);
    for k in &mut kids {
        k.tell("go")?;
    }
    std::thread::sleep(cfg.idle);
    let (mut cpu, mut settle, mut measuring) = (Vec::new(), Vec::new(), Vec::new());
    for k in &mut kids {
        k.tell("stop")?;
    }
    for k in &mut kids {
        let line = k.line()?;
        let parsed = line.strip_prefix("cpu ").and_then(|rest| {
            let (window, rest) = rest.split_once(" settle ")?;
            let (before, own) = rest.split_once(" measuring ")?;
            Some((window.parse().ok()?, before.parse().ok()?, own.parse().ok()?))
        });
        let (window, before, own) = parsed.ok_or(format!("not a cpu line: {line:?}"))?;
        cpu.push(window);
        settle.push(before);
        measuring.push(own);
    }
    let mut buf = vec![0u8; payload];
    encode(&mut buf, 0, 0, 0);
    b.publish(TOPIC, &Record::new(&buf)).map_err(err("publish the wake-up message"))?;
    for k in &mut kids {
        k.expect("woken")?;
    }
    // One member of the shared subscription and one of the group get it,
    // in whichever process: the children are kept (listed) until then.
    let mut got = (0, 0);
    wait_listing("the wake-up message in the shared subscription and the group", || {
        let ((_, shared), (_, group)) = idle_members(&b)?;
        got = (shared, group);
        Ok((got != (1, 1)).then(|| format!("the shared members got {shared}, the group's {group}")))
    })?;
    for k in &mut kids {
        k.tell("end")?;
    }
    let mut woken = 0;
    for k in kids {
        let out = k.finish()?;
        check(&out, u64::from(each), "an idle subscriber process")?;
        woken += out.received;
    }
    b.close();
    Ok(Idle { cpu, settle, measuring, woken, shared_got: got.0, group_got: got.1 })
}

/// [`run`] with this process's own executable as the children's program
/// (rill-bench runs the ipc scenario this way).
pub fn run_self(cfg: &Config, progress: &mut dyn FnMut(&str)) -> Result<IpcBench, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find rill-bench's own executable: {e}"))?;
    run(&exe, cfg, progress)
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
        idle_settle_ns: Vec::new(),
        idle_measuring_ns: Vec::new(),
        idle_window: cfg.idle,
        idle_woken: 0,
        idle_shared_got: 0,
        idle_group_got: 0,
    };
    for r in 0..rounds {
        progress(&format!("ipc: 1 -> 1, round {}/{rounds}", r + 1));
        // The order rotates, so no side always runs first.
        let mut o = OneToOne::default();
        for step in 0..5 {
            match (step + r) % 5 {
                0 => o.across = across(exe, cfg, 1)?,
                1 => o.solo = solo(exe, cfg, 1)?,
                2 => o.socket_buffered = socket(exe, cfg, true)?,
                3 => o.socket_each = socket(exe, cfg, false)?,
                // A peer that fails its checks is reported as failed; it
                // does not stop rill's runs.
                _ => match iceoryx2(exe, cfg) {
                    Ok(r) => o.iceoryx2 = r,
                    Err(e) => o.iceoryx2_failed = Some(e),
                },
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
    let idle = idle(exe, cfg)?;
    bench.idle_cpu_ns = idle.cpu;
    bench.idle_settle_ns = idle.settle;
    bench.idle_measuring_ns = idle.measuring;
    bench.idle_woken = idle.woken;
    bench.idle_shared_got = idle.shared_got;
    bench.idle_group_got = idle.group_got;
    Ok(bench)
}
