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

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rill::{BrokerConfig, Fsync, Sharing};

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

/// Waits for a child and fails the test with its output if it failed.
pub fn expect_success(child: Child, what: &str) {
    let out = child.wait_with_output().unwrap();
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
