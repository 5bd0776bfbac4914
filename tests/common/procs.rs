//! Scaffolding for tests that run several processes on one data directory
//! (`tests/processes*.rs`).
//!
//! The other processes are the test binary run again with only one test
//! selected and [`ROLE`] and [`DIR`] set: that test asks [`child_role`]
//! first and, in a child, plays the child's part and returns. Parent and
//! child hand over through marker files in the data directory ([`mark`],
//! [`wait_mark`], [`wait_child_mark`]), each waited for with a deadline
//! ([`super::WAIT`]), never slept on.
//!
//! The shape of such a test:
//!
//! ```ignore
//! #[test]
//! fn my_test() {
//!     if let Some((role, dir)) = procs::child_role() {
//!         // The child's part, in `dir`, as `role` says.
//!         return;
//!     }
//!     let dir = procs::TempDir::new("mine");
//!     let child = procs::spawn("my_test", "role", &dir.0);
//!     procs::expect_success(child, "the child");
//! }
//! ```

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rill::{Broker, BrokerConfig, Fsync, Record, Sharing};

use super::wait_for;

/// Set in a child: its part (each test file reads it its own way).
pub const ROLE: &str = "RILL_TEST_CHILD_ROLE";
/// Set in a child: the data directory.
pub const DIR: &str = "RILL_TEST_CHILD_DIR";

/// A fresh directory under the system's temp dir, named after the test
/// file, `what` and this process, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        let file = env!("CARGO_CRATE_NAME").replace('_', "-");
        let dir = std::env::temp_dir().join(format!("rill-{file}-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A broker's configuration on `dir`: one worker thread and no fsync, so
/// several processes' brokers stay light on a small machine.
pub fn config(dir: &Path, sharing: Sharing) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(dir.to_owned()),
        sharing,
        fsync: Fsync::Never,
        worker_threads: Some(1),
        ..BrokerConfig::default()
    }
}

/// The number in the environment variable `name`, or `default` (the long
/// versions of the tests set more messages or kills this way).
pub fn env_or(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs this test binary again as a child playing `role` in `dir`: only
/// `test` (its full name, matched exactly) runs, its output piped for
/// [`expect_success`].
pub fn spawn(test: &str, role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// How long [`expect_success`] waits for a child: a hang guard, not a
/// timing. A child's part waits for its own steps with [`super::WAIT`];
/// one still running after this is stuck, and the test fails with what
/// it printed rather than waiting for ever.
const CHILD_DONE: Duration = Duration::from_secs(300);

/// Waits for a child and fails the test with its output if it failed, or
/// if it has not finished within [`CHILD_DONE`] (it is killed then).
pub fn expect_success(mut child: Child, what: &str) {
    // Its pipes are read while it runs (a child that fills one would
    // otherwise wait for us), on threads, so the wait can end.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut out);
            }
            out
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    // No event says a child ended: polled, as `wait_for` polls.
    let deadline = Instant::now() + CHILD_DONE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let Some(status) = status else {
        panic!(
            "{what} did not finish within {CHILD_DONE:?} and was killed:\n{}\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    let out = std::process::Output { status, stdout, stderr };
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The child's role and directory, if this process is a child.
pub fn child_role() -> Option<(String, PathBuf)> {
    let role = std::env::var(ROLE).ok()?;
    Some((role, PathBuf::from(std::env::var_os(DIR).unwrap())))
}

/// Runs `checks`, then `release` whether or not they failed (tells the
/// children to finish and collects them), then fails as `checks` did: a
/// failed check in the parent must not leave a child waiting for a go-ahead
/// that never comes.
pub fn check_then_release<T>(checks: impl FnOnce() -> T, release: impl FnOnce()) -> T {
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(checks));
    release();
    checked.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Makes the marker file `name` in `dir` (a step done, for the other process).
pub fn mark(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), b"").unwrap();
}

/// Waits until the other process made the marker file `name`.
pub fn wait_mark(dir: &Path, name: &str) {
    wait_for(name, || dir.join(name).exists());
}

/// Waits until `child` made the marker file `name`, or exited (a failed
/// child's output is then reported by [`expect_success`]); says whether the
/// file is there.
pub fn wait_child_mark(dir: &Path, name: &str, child: &mut Child) -> bool {
    wait_for(name, || child.try_wait().unwrap().is_some() || dir.join(name).exists());
    dir.join(name).exists()
}

/// The seed of a kill loop: the number in the environment variable `var`,
/// or one from the clock; printed with `var`'s name, so a failed run can be
/// repeated with it.
pub fn seed(var: &str) -> u64 {
    let seed = std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    println!("{var}={seed}");
    seed
}

/// Publishes `n` unkeyed messages to `topic`; returns where they went
/// (partition, offset).
pub fn publish(broker: &Broker, topic: &str, n: u64) -> Vec<(u32, u64)> {
    (0..n)
        .map(|_| {
            let at = broker.publish(topic, &Record::new(b"m")).unwrap();
            (at.partition, at.offset)
        })
        .collect()
}

/// A member child's record of what it got: appends one whole line to
/// `file` in `dir` (a kill leaves it whole or absent).
pub fn append(dir: &Path, file: &str, line: &str) {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(file)).unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// The (partition, offset) pairs a member child recorded in `file` with
/// [`append`], one `"<partition> <offset>"` line each (a line cut by a
/// kill, if any, left out).
pub fn records(dir: &Path, file: &str) -> Vec<(u32, u64)> {
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |n| &text[..n]);
    whole
        .lines()
        .map(|l| {
            let (p, o) = l.split_once(' ').unwrap();
            (p.parse().unwrap(), o.parse().unwrap())
        })
        .collect()
}

/// Runs member child `i` of `test` in `dir` as `role` (one that records
/// what it gets in `records-<i>` until it has `published.len()` messages,
/// then closes) and checks it got each of `published` exactly once.
pub fn expect_each_once(test: &str, role: &str, dir: &Path, i: u32, published: &BTreeSet<(u32, u64)>) {
    expect_success(spawn(test, role, dir), &format!("member {i}"));
    let got = records(dir, &format!("records-{i}"));
    assert_eq!(got.len(), published.len(), "member {i}: each message once");
    assert_eq!(&got.into_iter().collect::<BTreeSet<_>>(), published, "member {i}: every message");
}
