//! Output: a table for people (with a Markdown summary to paste into the
//! README), JSON and CSV for scripts.

use std::fmt::Write as _;

use serde::Serialize;

use crate::bench::{Comparison, MachineState, STATE_SPREAD, ScenarioResult, SystemSummary};
use crate::measure::Work;
use crate::plain::VALID_SHARE;
use crate::probe::{Hiccups, Probe};
use crate::scenarios::Metric;
use crate::stats::{fmt_count, fmt_ns, fmt_ratio};
use crate::systems::{Env, System};

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The tool's version.
    pub version: String,
    /// The command line that reproduces the run.
    pub command: String,
    /// The cross-core probe taken before the runs (absent with --no-probe).
    pub probe: Option<Probe>,
    /// The hiccup probe taken before the runs (absent with --no-probe).
    pub hiccups: Option<Hiccups>,
    /// The one-line verdict on machine noise from every cross-core probe of
    /// the invocation (see [`noise_verdict`]; absent with --no-probe).
    pub noise: Option<String>,
    /// Settings outside the shapes.
    pub env: Env,
    /// How the runs were set up, in words.
    pub notes: Vec<String>,
    /// Wall time of the whole invocation, seconds.
    pub elapsed_s: f64,
    /// Per scenario.
    pub scenarios: Vec<ScenarioResult>,
}

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables and a Markdown summary.
    Table,
    /// One JSON document.
    Json,
    /// One row per scenario and system.
    Csv,
}

/// Renders `report` in `format`.
pub fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Table => table(report),
        Format::Json => serde_json::to_string_pretty(report).expect("serialisable") + "\n",
        Format::Csv => csv(report),
    }
}

fn lost(s: &SystemSummary) -> String {
    if s.runs == 0 {
        "-".into()
    } else if s.lost_pct == 0.0 {
        "0".into()
    } else if s.lost_pct < 0.1 {
        "<0.1%".into()
    } else {
        format!("{:.1}%", s.lost_pct)
    }
}

fn lat(s: &SystemSummary, v: u64) -> String {
    if s.latency.samples == 0 { "-".into() } else { fmt_ns(v) }
}

/// How a self-check reads in a table: "0.97x" or "0.35x INVALID".
fn share(c: &Comparison) -> String {
    match &c.self_check {
        Some(sc) if sc.valid => fmt_ratio(sc.harness_share),
        Some(sc) => format!("{} INVALID", fmt_ratio(sc.harness_share)),
        None => "-".into(),
    }
}

/// The human-readable report.
pub fn table(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "rill-bench {}   ({})", r.version, r.command);
    if let Some(p) = &r.probe {
        let _ = writeln!(o, "{}", p.describe());
    }
    if let Some(h) = &r.hiccups {
        let _ = writeln!(o, "{}", h.describe());
    }
    for n in &r.notes {
        let _ = writeln!(o, "  * {n}");
    }
    for sr in &r.scenarios {
        let sc = &sr.scenario;
        let _ = writeln!(o);
        let _ = writeln!(o, "== {}: {} [work: {}] ==", sc.name, sc.title, sc.shape.work.name());
        let runs = sr.systems.first().map_or(0, |s| s.runs);
        let what = if runs == 1 { "run" } else { "runs" };
        let paired = if sr.comparisons.is_empty() { "" } else { ", each paired with a peer's" };
        let _ = writeln!(o, "   {}; {runs} rill {what}{paired}", sr.shape_text);
        let _ = writeln!(
            o,
            "   {:<15} {:>9} {:>8} {:>9} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}  {:<12} status",
            "system", "msgs/s", "MB/s", "deliv/s", "lost", "csw/1k", "p50", "p90", "p99", "p99.9", "max", "payload"
        );
        for s in &sr.systems {
            let l = &s.latency;
            let _ = writeln!(
                o,
                "   {:<15} {:>9} {:>8} {:>9} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}  {:<12} {}",
                s.system.name(),
                if s.runs == 0 { "-".into() } else { fmt_count(s.msgs_per_sec) },
                if s.runs == 0 { "-".into() } else { format!("{:.0}", s.mb_per_sec) },
                if s.runs == 0 { "-".into() } else { fmt_count(s.deliveries_per_sec) },
                lost(s),
                if s.runs == 0 { "-".into() } else { format!("{:.2}", s.switches_per_1k) },
                lat(s, l.p50),
                lat(s, l.p90),
                lat(s, l.p99),
                lat(s, l.p999),
                lat(s, l.max),
                s.payload,
                s.status
            );
        }
        for s in sr.systems.iter().filter(|s| s.publish_latency.samples > 0) {
            let p = &s.publish_latency;
            let _ = writeln!(
                o,
                "   {} publish calls ({} timed): p50 {}, p90 {}, p99 {}, max {}",
                s.system.name(),
                p.samples,
                fmt_ns(p.p50),
                fmt_ns(p.p90),
                fmt_ns(p.p99),
                fmt_ns(p.max)
            );
        }
        if !sr.comparisons.is_empty() {
            let what = match sc.metric {
                Metric::Throughput => "rill/peer msgs/s",
                Metric::Latency => "peer/rill p50",
            };
            let _ = writeln!(
                o,
                "   {:<15} {:>8} {:>8} {:>8}  {:>10} {:>10} {:>7} {:>14}  pairs ({what})",
                "rill vs", "median", "worst", "best", "plain loop", "rill/plain", "csw/1k", "harness/plain"
            );
            for c in &sr.comparisons {
                let (plain, vs_plain, plain_csw) =
                    c.self_check.as_ref().map_or(("-".into(), "-".into(), "-".into()), |sc| {
                        (
                            fmt_count(sc.plain_msgs_per_sec),
                            fmt_ratio(sc.rill_vs_plain),
                            format!("{:.2}", sc.plain_switches_per_1k),
                        )
                    });
                let (med, worst, best, list) = match &c.pairs {
                    Some(p) => (
                        fmt_ratio(p.median),
                        fmt_ratio(p.worst),
                        fmt_ratio(p.best),
                        p.ratios
                            .iter()
                            .enumerate()
                            .map(|(i, x)| {
                                let moved = c.states.get(i).is_some_and(|s| !s.steady());
                                format!("{}{}", fmt_ratio(*x), if moved { "~" } else { "" })
                            })
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    None => ("-".into(), "-".into(), "-".into(), "no pair produced numbers".into()),
                };
                let _ = writeln!(
                    o,
                    "   {:<15} {:>8} {:>8} {:>8}  {:>10} {:>10} {:>7} {:>14}  {}{}",
                    c.peer.name(),
                    med,
                    worst,
                    best,
                    plain,
                    vs_plain,
                    plain_csw,
                    share(c),
                    list,
                    c.note.as_ref().map_or(String::new(), |n| format!("  ({n})"))
                );
            }
            if sr.comparisons.iter().any(|c| !c.valid()) {
                let _ = writeln!(
                    o,
                    "   INVALID: the harness ran that peer below {VALID_SHARE}x of its plain loop; its ratio is not a result"
                );
            }
            if let Some(line) = machine_state_line(sr) {
                let _ = writeln!(o, "   {line}");
            }
        }
    }
    let md = markdown(r);
    if !md.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "Summary (Markdown, for the README):");
        let _ = writeln!(o);
        o += &md;
    }
    let _ = writeln!(o);
    if let Some(noise) = &r.noise {
        let _ = writeln!(o, "{noise}");
    }
    let _ = writeln!(o, "total time {:.0} s", r.elapsed_s);
    o
}

/// Cross-core probes of one invocation whose slowest is more than this many
/// times its fastest saw the machine in more than one state: the same
/// judgement as a pair's ([`STATE_SPREAD`]: a probe's own spread in one
/// state is small, the states of a shared VM differ several times over),
/// taken over every probe of the invocation.
pub const NOISE_SPREAD: f64 = STATE_SPREAD;

/// The one-line verdict on machine noise: the spread of every cross-core
/// round trip measured (the opening probe's rounds, the probes around each
/// pair of runs, and `closing_ns`, taken after the last run). Within
/// [`NOISE_SPREAD`] the runs shared one machine state and their ratios
/// compare the systems; beyond it the machine changed while they ran, and
/// a ratio may measure that change instead.
pub fn noise_verdict(opening: &Probe, closing_ns: Option<f64>, scenarios: &[ScenarioResult]) -> String {
    let pairs = scenarios.iter().flat_map(|s| &s.comparisons).flat_map(|c| &c.states);
    let probes: Vec<f64> = [opening.min_ns, opening.max_ns]
        .into_iter()
        .chain(closing_ns)
        .chain(pairs.flat_map(|s| [s.low_ns, s.high_ns]))
        .collect();
    let Some(span) = MachineState::of(&probes) else {
        return "machine noise: unknown (no cross-core probe gave a time)".into();
    };
    let spread = span.high_ns / span.low_ns;
    let seen =
        format!("cross-core probes {:.0}-{:.0} ns per round trip, spread {spread:.2}x", span.low_ns, span.high_ns);
    if spread <= NOISE_SPREAD {
        format!("machine noise: quiet ({seen}, within {NOISE_SPREAD}x): comparisons between runs are meaningful")
    } else {
        format!(
            "machine noise: NOISY ({seen}, over {NOISE_SPREAD}x): the machine changed state during the runs; \
             rerun on an idle machine before trusting ratios"
        )
    }
}

/// The ping-pong range around a scenario's pairs and, if some pair saw it
/// move by more than [`STATE_SPREAD`], the median of each peer's other
/// pairs; `None` if the pairs were not probed.
fn machine_state_line(sr: &ScenarioResult) -> Option<String> {
    let states = || sr.comparisons.iter().flat_map(|c| &c.states);
    let span = MachineState::span(states())?;
    let mut line =
        format!("machine state: ping-pong {:.0}-{:.0} ns around these pairs' runs", span.low_ns, span.high_ns);
    if states().all(MachineState::steady) {
        line += &format!(" (within {STATE_SPREAD}x around every pair)");
        return Some(line);
    }
    line += &format!("; ~ marks a pair during which it moved by more than {STATE_SPREAD}x; the other pairs:");
    for c in &sr.comparisons {
        line += &format!(" {} {}", c.peer.name(), steady_text(c));
    }
    Some(line)
}

/// "median (n of all)" over a comparison's pairs in one machine state, or
/// "-" when there are none or the pairs were not probed.
fn steady_text(c: &Comparison) -> String {
    let all = c.pairs.as_ref().map_or(0, |p| p.ratios.len());
    match (&c.steady_pairs, c.states.is_empty()) {
        (_, true) => "-".into(),
        (Some(s), false) => format!("{} ({} of {all})", fmt_ratio(s.median), s.ratios.len()),
        (None, false) => format!("none of {all}"),
    }
}

fn metric_value(sr: &ScenarioResult, s: Option<&SystemSummary>) -> String {
    let Some(s) = s.filter(|s| s.runs > 0) else { return "-".into() };
    match sr.scenario.metric {
        Metric::Throughput => {
            let mut v = format!("{} msgs/s", fmt_count(s.msgs_per_sec));
            if s.lost_pct > 0.0 {
                v += &format!(" ({:.1}% lost)", s.lost_pct);
            }
            v
        }
        Metric::Latency => format!("p50 {}, p99 {}", fmt_ns(s.latency.p50), fmt_ns(s.latency.p99)),
    }
}

/// Markdown tables of every comparison, one per work mode in the order run
/// (the first is the headline); empty if nothing was compared.
pub fn markdown(r: &Report) -> String {
    let mut o = String::new();
    let rows: usize = r.scenarios.iter().map(|s| s.comparisons.len()).sum();
    if rows == 0 {
        return o;
    }
    if let Some(p) = &r.probe {
        let _ = writeln!(
            o,
            "Cross-core ping-pong probe: {:.0} ns per round trip. Command: `{}`",
            p.round_trip_ns, r.command
        );
        let _ = writeln!(o);
    }
    if let Some(h) = &r.hiccups {
        let _ = writeln!(o, "Hiccup probe: {}.", h.describe().trim_start_matches("hiccup probe: "));
        let _ = writeln!(o);
    }
    let mut works: Vec<Work> = Vec::new();
    for sr in &r.scenarios {
        if !works.contains(&sr.scenario.shape.work) {
            works.push(sr.scenario.shape.work);
        }
    }
    for work in works {
        let _ = writeln!(o, "Subscriber work: `{}`.", work.name());
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "| scenario | peer (payload) | rill | peer | rill vs peer, median | worst pair | pairs in one machine state | peer in harness / plain loop | rill / peer's plain loop |"
        );
        let _ = writeln!(o, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for sr in r.scenarios.iter().filter(|sr| sr.scenario.shape.work == work) {
            let rill = metric_value(sr, sr.system(System::Rill));
            for c in &sr.comparisons {
                let (mut med, worst) =
                    c.pairs.as_ref().map_or(("-".into(), "-".into()), |p| (fmt_ratio(p.median), fmt_ratio(p.worst)));
                if !c.valid() {
                    med = format!("invalid ({med})");
                }
                let summary = sr.system(c.peer);
                let mut peer = metric_value(sr, summary);
                if let Some(n) = &c.note {
                    peer += &format!(" ({n})");
                }
                let payload = summary.map_or(String::new(), |s| s.payload.clone());
                let (plain, vs_plain) = c.self_check.as_ref().map_or(("-".into(), "-".into()), |sc| {
                    (
                        format!("{} (plain {} msgs/s)", share(c), fmt_count(sc.plain_msgs_per_sec)),
                        fmt_ratio(sc.rill_vs_plain),
                    )
                });
                let _ = writeln!(
                    o,
                    "| {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} |",
                    sr.scenario.name,
                    c.peer.name(),
                    payload.replace('|', "\\|"),
                    rill,
                    peer,
                    med,
                    worst,
                    steady_text(c),
                    plain,
                    vs_plain
                );
            }
        }
        let _ = writeln!(o);
    }
    o
}

const CSV_HEADER: &str = "scenario,work,system,payload_type,producers,subscribers,mode,partitions,payload_bytes,batch,runs,\
status,msgs_per_sec,mb_per_sec,deliveries_per_sec,lost_pct,switches_per_1k,p50_ns,p90_ns,p99_ns,p999_ns,max_ns,\
ratio_median,ratio_worst,plain_msgs_per_sec,harness_share,valid,rill_vs_plain,\
steady_ratio_median,steady_pairs,pingpong_low_ns,pingpong_high_ns";

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

/// One row per scenario and system; ratio and self-check columns are rill
/// against that peer (empty on rill's own row).
pub fn csv(r: &Report) -> String {
    let mut o = String::from(CSV_HEADER);
    o.push('\n');
    for sr in &r.scenarios {
        let sh = &sr.scenario.shape;
        for s in &sr.systems {
            let c = sr.comparisons.iter().find(|c| c.peer == s.system);
            let (median, worst) = c
                .and_then(|c| c.pairs.as_ref())
                .map_or((String::new(), String::new()), |p| (format!("{:.4}", p.median), format!("{:.4}", p.worst)));
            let (plain, share, valid, vs_plain) = match c.and_then(|c| c.self_check.as_ref()) {
                Some(sc) => (
                    format!("{:.0}", sc.plain_msgs_per_sec),
                    format!("{:.4}", sc.harness_share),
                    sc.valid.to_string(),
                    format!("{:.4}", sc.rill_vs_plain),
                ),
                None => (String::new(), String::new(), String::new(), String::new()),
            };
            let (steady_median, steady_pairs) = match c {
                Some(c) if !c.states.is_empty() => (
                    c.steady_pairs.as_ref().map_or(String::new(), |p| format!("{:.4}", p.median)),
                    c.steady_pairs.as_ref().map_or(0, |p| p.ratios.len()).to_string(),
                ),
                _ => (String::new(), String::new()),
            };
            let (low, high) = c
                .and_then(|c| MachineState::span(&c.states))
                .map_or((String::new(), String::new()), |m| (format!("{:.0}", m.low_ns), format!("{:.0}", m.high_ns)));
            let l = &s.latency;
            let fields = [
                sr.scenario.name.clone(),
                sh.work.name().into(),
                s.system.name().into(),
                s.payload.clone(),
                sh.producers.to_string(),
                sh.subscribers.to_string(),
                serde_json::to_value(sh.mode).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                sh.partitions.to_string(),
                sh.payload.to_string(),
                sh.batch.to_string(),
                s.runs.to_string(),
                s.status.clone(),
                format!("{:.0}", s.msgs_per_sec),
                format!("{:.2}", s.mb_per_sec),
                format!("{:.0}", s.deliveries_per_sec),
                format!("{:.4}", s.lost_pct),
                format!("{:.3}", s.switches_per_1k),
                l.p50.to_string(),
                l.p90.to_string(),
                l.p99.to_string(),
                l.p999.to_string(),
                l.max.to_string(),
                median,
                worst,
                plain,
                share,
                valid,
                vs_plain,
                steady_median,
                steady_pairs,
                low,
                high,
            ];
            let row: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
            o += &row.join(",");
            o.push('\n');
        }
    }
    o
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::{Comparison, self_check, steady_stats};
    use crate::plain::Plain;
    use crate::scenarios::{Named, named};
    use crate::stats::{Percentiles, pair_stats};

    fn summary(system: System, msgs: f64) -> SystemSummary {
        SystemSummary {
            system,
            runs: 5,
            status: "ok".into(),
            msgs_per_sec: msgs,
            mb_per_sec: msgs * 64.0 / 1e6,
            deliveries_per_sec: msgs,
            published: 1000,
            run_msgs_per_sec: vec![msgs; 5],
            lost_pct: 0.0,
            latency: Percentiles { samples: 10, p50: 100, p90: 200, p99: 300, p999: 400, max: 500 },
            publish_latency: Percentiles::default(),
            switches_per_1k: 0.5,
            payload: if system == System::Rill { String::new() } else { "[u8; 64]".into() },
        }
    }

    fn plain(msgs_per_sec: u64) -> Plain {
        Plain {
            published: msgs_per_sec,
            delivered: msgs_per_sec,
            subscribers: 1,
            elapsed_ns: 1_000_000_000,
            ctx_switches: 10,
        }
    }

    /// A report with one compared scenario, as the tool would build it: rill
    /// against crossbeam (harnessed at 0.91x its plain loop: valid) and flume
    /// (harnessed at 0.5x: invalid).
    pub(crate) fn sample_report() -> Report {
        let sc = named(Named::OneToOne);
        let pairs = pair_stats(&[3.0, 2.0, 4.0, 2.6, 3.1]);
        // The third crossbeam pair saw the ping-pong move from 62 to 330 ns.
        let steady = MachineState { low_ns: 62.0, high_ns: 66.0 };
        let moved = MachineState { low_ns: 62.0, high_ns: 330.0 };
        let states = vec![steady, steady, moved, steady, steady];
        Report {
            version: "0.1.0".into(),
            command: "rill-bench --scenario one-to-one --compare".into(),
            probe: Some(Probe { round_trip_ns: 180.0, min_ns: 170.0, max_ns: 200.0, pinned: true }),
            hiccups: Some(Hiccups { spun_ms: 200.0, per_sec: 12.0, p99_ns: 40, p9999_ns: 3_000, max_ns: 60_000 }),
            noise: Some("machine noise: a verdict".into()),
            env: Env::default(),
            notes: vec!["a note".into()],
            elapsed_s: 12.0,
            scenarios: vec![ScenarioResult {
                shape_text: sc.shape.describe(),
                systems: vec![
                    summary(System::Rill, 30e6),
                    summary(System::Crossbeam, 10e6),
                    summary(System::Flume, 5e6),
                ],
                comparisons: vec![
                    Comparison {
                        peer: System::Crossbeam,
                        pairs: pairs.clone(),
                        note: None,
                        self_check: self_check(30e6, 10e6, &[plain(11_000_000)]),
                        steady_pairs: steady_stats(&pairs.as_ref().unwrap().ratios, &states),
                        states,
                    },
                    Comparison {
                        peer: System::Flume,
                        pairs,
                        note: None,
                        self_check: self_check(30e6, 5e6, &[plain(10_000_000)]),
                        states: Vec::new(),
                        steady_pairs: None,
                    },
                ],
                scenario: sc,
            }],
        }
    }

    #[test]
    fn csv_has_a_header_and_one_row_per_system() {
        let out = csv(&sample_report());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4);
        let cols = lines[0].split(',').count();
        assert_eq!(cols, 32);
        for l in &lines[1..] {
            assert_eq!(l.split(',').count(), cols, "{l}");
        }
        assert!(lines[1].starts_with("one-to-one,minimal,rill,,1,1,pool,1,64,1,5,ok,30000000,"), "{}", lines[1]);
        assert!(lines[2].ends_with(",3.0000,2.0000,11000000,0.9091,true,2.7273,2.8000,4,62,330"), "{}", lines[2]);
        assert!(lines[3].ends_with(",3.0000,2.0000,10000000,0.5000,false,3.0000,,,,"), "{}", lines[3]);
        assert!(!out.to_lowercase().contains("target"), "no targets in the tool's output");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }

    #[test]
    fn json_carries_probe_ratios_self_checks_and_percentiles() {
        let json = render(&sample_report(), Format::Json);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["probe"]["round_trip_ns"], 180.0);
        let sc = &v["scenarios"][0];
        assert_eq!(sc["scenario"]["name"], "one-to-one");
        assert_eq!(sc["scenario"]["shape"]["work"], "minimal");
        assert_eq!(sc["systems"][0]["system"], "rill");
        assert_eq!(sc["systems"][1]["latency"]["p999"], 400);
        assert_eq!(sc["systems"][1]["payload"], "[u8; 64]");
        assert_eq!(sc["comparisons"][0]["peer"], "crossbeam");
        assert_eq!(sc["comparisons"][0]["pairs"]["median"], 3.0);
        assert_eq!(sc["comparisons"][0]["pairs"]["worst"], 2.0);
        assert_eq!(sc["comparisons"][0]["self_check"]["valid"], true);
        assert_eq!(sc["comparisons"][1]["self_check"]["valid"], false);
        assert_eq!(sc["comparisons"][1]["self_check"]["rill_vs_plain"], 3.0);
        assert!(!json.to_lowercase().contains("target"), "no targets in the tool's output");
    }

    #[test]
    fn table_shows_probe_rows_self_checks_and_a_markdown_summary() {
        let t = table(&sample_report());
        assert!(t.contains("ping-pong: 180 ns"), "{t}");
        assert!(t.contains("stalled >= 1 µs 12 times a second; gaps p99 40 ns, p99.99 3.00 µs, max 60.0 µs"), "{t}");
        assert!(t.contains("== one-to-one: one producer, one subscriber [work: minimal]"), "{t}");
        assert!(t.contains("3.00x"));
        assert!(t.contains("0.50x INVALID"), "{t}");
        assert!(
            t.contains(
                "| one-to-one | crossbeam ([u8; 64]) | 30.0 M msgs/s | 10.0 M msgs/s | 3.00x | 2.00x | 2.80x (4 of 5) | 0.91x (plain 11.0 M msgs/s) | 2.73x |"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "| one-to-one | flume ([u8; 64]) | 30.0 M msgs/s | 5.00 M msgs/s | invalid (3.00x) | 2.00x | - |"
            ),
            "{t}"
        );
        assert!(t.contains("3.00x 2.00x 4.00x~ 2.60x 3.10x"), "{t}");
        assert!(
            t.contains(
                "machine state: ping-pong 62-330 ns around these pairs' runs; ~ marks a pair during which it moved by more than 1.5x; the other pairs: crossbeam 2.80x (4 of 5) flume -"
            ),
            "{t}"
        );
        assert!(!t.to_lowercase().contains("target") && !t.contains("MET") && !t.contains("MISSED"), "{t}");
    }

    #[test]
    fn a_pair_is_steady_when_its_probes_agree_within_the_spread() {
        assert_eq!(MachineState::of(&[]), None);
        let s = MachineState::of(&[64.0, 62.0, 66.0]).unwrap();
        assert_eq!((s.low_ns, s.high_ns), (62.0, 66.0));
        assert!(s.steady());
        assert!(!MachineState::of(&[64.0, 330.0, 62.0]).unwrap().steady());
        let (a, b) = (s, MachineState { low_ns: 62.0, high_ns: 330.0 });
        assert_eq!(steady_stats(&[1.0, 2.0, 3.0], &[a, b, a]).unwrap().ratios, [1.0, 3.0]);
        assert!(steady_stats(&[1.0, 2.0], &[a]).is_none(), "pairs without a state: no steady summary");
        assert!(steady_stats(&[1.0], &[b]).is_none());
    }

    #[test]
    fn the_noise_verdict_is_quiet_within_the_spread_and_noisy_beyond_it() {
        let opening = Probe { round_trip_ns: 64.0, min_ns: 62.0, max_ns: 66.0, pinned: true };
        let quiet = noise_verdict(&opening, Some(70.0), &[]);
        assert!(quiet.starts_with("machine noise: quiet (cross-core probes 62-70 ns"), "{quiet}");
        assert!(quiet.contains("comparisons between runs are meaningful"), "{quiet}");
        // The closing probe alone can show the change.
        let late = noise_verdict(&opening, Some(330.0), &[]);
        assert!(late.starts_with("machine noise: NOISY (cross-core probes 62-330 ns"), "{late}");
        assert!(late.contains("rerun on an idle machine before trusting ratios"), "{late}");
        // So can a pair's probes: the sample report's third pair moved to 330 ns.
        let report = sample_report();
        let paired = noise_verdict(&opening, None, &report.scenarios);
        assert!(paired.starts_with("machine noise: NOISY"), "{paired}");
        // And the verdict is the table's line before the total time.
        let table = table(&report);
        assert!(table.contains("machine noise: a verdict\ntotal time"), "{table}");
    }
}
