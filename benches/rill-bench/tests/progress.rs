//! rill-bench run as a pipe sees it (a CI log, `| tee`): stderr is not a
//! terminal, so there is no progress bar, and each step must be a line of
//! its own; the report ends with the one-line verdict on machine noise.
//! Nothing here depends on how fast or how quiet the machine is: the
//! verdict may say either, and the test checks that it says one.

use std::process::{Command, Output};

/// A tiny run: one scenario, a few thousand messages, no pre-fill.
fn run_piped(format: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rill-bench"))
        .args(["--scenario", "one-to-one", "--messages", "2000", "--no-warmup", "--retention-mib", "1"])
        .args(["--format", format])
        .output()
        .expect("run rill-bench")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_piped_run_prints_a_line_per_scenario_and_a_noise_verdict() {
    let out = run_piped("table");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "rill-bench failed:\n{stdout}\n{stderr}");

    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("rill-bench ")).collect();
    assert!(lines.iter().any(|l| l.ends_with("probing the machine: cross-core ping-pong, then hiccups")), "{stderr}");
    let started = lines.iter().position(|l| l.contains("[1/1] one-to-one (") && l.ends_with(": started"));
    let done = lines.iter().position(|l| l.contains("[1/1] one-to-one (") && l.contains(": done in "));
    assert!(matches!((started, done), (Some(s), Some(d)) if s < d), "no start and end lines, in order:\n{stderr}");

    let verdicts: Vec<&str> = stdout.lines().filter(|l| l.starts_with("machine noise: ")).collect();
    assert_eq!(verdicts.len(), 1, "{stdout}");
    let v = verdicts[0];
    assert!(
        v.starts_with("machine noise: quiet (cross-core probes ")
            || v.starts_with("machine noise: NOISY (cross-core probes "),
        "{v}"
    );
}

#[test]
fn a_piped_json_run_carries_the_verdict_and_says_it_on_stderr() {
    let out = run_piped("json");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "rill-bench failed:\n{stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document on stdout");
    let noise = json["noise"].as_str().expect("a noise field");
    assert!(noise.starts_with("machine noise: "), "{noise}");
    assert!(stderr.lines().any(|l| l == noise), "{stderr}");
    assert!(stderr.contains("[1/1] one-to-one ("), "{stderr}");
}
