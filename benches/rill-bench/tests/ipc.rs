//! `--scenario ipc` at a tiny size, so it cannot rot: every child role runs,
//! every message arrives and is checked (a lost, reordered or damaged one
//! fails the run), the idle subscribers are woken across processes, and the
//! run leaves no directory behind. Nothing here depends on how fast the
//! machine is: the figures are only required to exist.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str], data_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rill-bench"));
    cmd.args(["--scenario", "ipc", "--messages", "2000", "--pairs", "1", "--ipc-idle-secs", "0.05"]).args(args);
    if let Some(dir) = data_dir {
        cmd.env("RILL_BENCH_DATA_DIR", dir);
    }
    let out = cmd.output().expect("run rill-bench");
    assert!(
        out.status.success(),
        "rill-bench failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_tiny_ipc_run_on_tmpfs_measures_every_part() {
    let out = run(&["--format", "json"], None);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document on stdout");
    assert_eq!(json["root"], "/dev/shm");
    let one = json["one_to_one"].as_array().expect("1 -> 1 rounds");
    assert_eq!(one.len(), 1);
    for key in ["across", "solo", "socket_buffered", "socket_each"] {
        assert!(one[0][key].as_f64().is_some_and(|r| r > 0.0), "{key}: {}", one[0]);
    }
    let many = json["many_to_one"].as_array().expect("4 -> 1 rounds");
    assert!(many.len() == 1 && many[0].as_array().unwrap().iter().all(|r| r.as_f64().unwrap() > 0.0), "{many:?}");
    let latency = json["latency"][0].as_array().expect("a latency round");
    assert!(latency.iter().all(|ns| ns.as_u64().unwrap() > 0), "{latency:?}");
    assert_eq!(json["idle_cpu_ns"].as_array().unwrap().len(), 4);
    assert_eq!(json["idle_settle_ns"].as_array().unwrap().len(), 4, "the settle's CPU is reported per process too");
    assert_eq!(json["idle_woken"], 100, "every idle subscription got the message published after the window");
}

#[test]
fn a_tiny_ipc_run_on_a_disk_directory_prints_its_tables_and_cleans_up() {
    let dir = TempDir(std::env::temp_dir().join(format!("rill-bench-ipc-test-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let out = run(&["--ipc-disk"], Some(&dir.0));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(&format!("under {},", dir.0.display())), "{table}");
    for line in [
        "across / one process: median ",
        "goal >= 10x",
        "rill p50 / round trip p50: median ",
        "woke 100 of the subscriptions, 1 shared member and 1 group member",
    ] {
        assert!(table.contains(line), "no {line:?} in:\n{table}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert!(left.is_empty(), "the run left {left:?} behind");
}
