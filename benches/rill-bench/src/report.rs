//! Output: a table for people (with a Markdown summary to paste into the
//! README), JSON and CSV for scripts.

use std::fmt::Write as _;

use serde::Serialize;

use crate::bench::{ScenarioResult, SystemSummary};
use crate::probe::Probe;
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

/// The human-readable report.
pub fn table(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "rill-bench {}   ({})", r.version, r.command);
    if let Some(p) = &r.probe {
        let _ = writeln!(o, "{}", p.describe());
    }
    for n in &r.notes {
        let _ = writeln!(o, "  * {n}");
    }
    for sr in &r.scenarios {
        let sc = &sr.scenario;
        let _ = writeln!(o);
        let _ = writeln!(o, "== {}: {} ==", sc.name, sc.title);
        let runs = sr.systems.first().map_or(0, |s| s.runs);
        let what = if runs == 1 { "run" } else { "runs" };
        let paired = if sr.comparisons.is_empty() { "" } else { ", each paired with a peer's" };
        let _ = writeln!(o, "   {}; {runs} rill {what}{paired}", sr.shape_text);
        let _ = writeln!(
            o,
            "   {:<15} {:>9} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}  status",
            "system", "msgs/s", "MB/s", "deliv/s", "lost", "p50", "p90", "p99", "p99.9", "max"
        );
        for s in &sr.systems {
            let l = &s.latency;
            let _ = writeln!(
                o,
                "   {:<15} {:>9} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
                s.system.name(),
                if s.runs == 0 { "-".into() } else { fmt_count(s.msgs_per_sec) },
                if s.runs == 0 { "-".into() } else { format!("{:.0}", s.mb_per_sec) },
                if s.runs == 0 { "-".into() } else { fmt_count(s.deliveries_per_sec) },
                lost(s),
                lat(s, l.p50),
                lat(s, l.p90),
                lat(s, l.p99),
                lat(s, l.p999),
                lat(s, l.max),
                s.status
            );
        }
        if !sr.comparisons.is_empty() {
            let what = match sc.metric {
                Metric::Throughput => "rill/peer msgs/s",
                Metric::Latency => "peer/rill p50",
            };
            let _ = writeln!(
                o,
                "   {:<15} {:>8} {:>8} {:>8}  {:<28} pairs ({what})",
                "rill vs", "median", "worst", "best", "target"
            );
            for c in &sr.comparisons {
                let target = c
                    .target
                    .as_ref()
                    .map_or(String::new(), |t| format!("{} {}", t.text, if t.met { "MET" } else { "MISSED" }));
                match &c.pairs {
                    Some(p) => {
                        let list: Vec<String> = p.ratios.iter().map(|x| fmt_ratio(*x)).collect();
                        let _ = writeln!(
                            o,
                            "   {:<15} {:>8} {:>8} {:>8}  {:<28} {}{}",
                            c.peer.name(),
                            fmt_ratio(p.median),
                            fmt_ratio(p.worst),
                            fmt_ratio(p.best),
                            target,
                            list.join(" "),
                            c.note.as_ref().map_or(String::new(), |n| format!("  ({n})"))
                        );
                    }
                    None => {
                        let _ = writeln!(
                            o,
                            "   {:<15} {:>8} {:>8} {:>8}  {:<28} {}",
                            c.peer.name(),
                            "-",
                            "-",
                            "-",
                            target,
                            c.note.as_deref().unwrap_or("no pair produced numbers")
                        );
                    }
                }
            }
        }
        if let Some(t) = &sr.latency_target {
            let _ = writeln!(o, "   rill latency target: {} -> {}", t.text, if t.met { "MET" } else { "MISSED" });
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
    let _ = writeln!(o, "total time {:.0} s", r.elapsed_s);
    o
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

/// A Markdown table of every comparison (and rill's latency target); empty if
/// nothing was compared.
pub fn markdown(r: &Report) -> String {
    let mut o = String::new();
    let rows: usize = r.scenarios.iter().map(|s| s.comparisons.len() + s.latency_target.is_some() as usize).sum();
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
    let _ = writeln!(o, "| scenario | peer | rill | peer | rill vs peer, median | worst pair | target | met |");
    let _ = writeln!(o, "|---|---|---:|---:|---:|---:|---|---|");
    for sr in &r.scenarios {
        let rill = metric_value(sr, sr.system(System::Rill));
        for c in &sr.comparisons {
            let (med, worst) =
                c.pairs.as_ref().map_or(("-".into(), "-".into()), |p| (fmt_ratio(p.median), fmt_ratio(p.worst)));
            let (target, met) = c
                .target
                .as_ref()
                .map_or((String::new(), String::new()), |t| (t.text.clone(), if t.met { "yes" } else { "no" }.into()));
            let mut peer = metric_value(sr, sr.system(c.peer));
            if let Some(n) = &c.note {
                peer += &format!(" ({n})");
            }
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                sr.scenario.name,
                c.peer.name(),
                rill,
                peer,
                med,
                worst,
                target,
                met
            );
        }
        if let Some(t) = &sr.latency_target {
            let _ = writeln!(
                o,
                "| {} | (rill alone) | {} | | | | {} | {} |",
                sr.scenario.name,
                rill,
                t.text,
                if t.met { "yes" } else { "no" }
            );
        }
    }
    o
}

const CSV_HEADER: &str = "scenario,system,producers,subscribers,mode,partitions,payload_bytes,batch,runs,status,\
msgs_per_sec,mb_per_sec,deliveries_per_sec,lost_pct,p50_ns,p90_ns,p99_ns,p999_ns,max_ns,\
ratio_median,ratio_worst,target,target_met";

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

/// One row per scenario and system; ratio columns are rill against that peer
/// (empty on rill's own row).
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
            let t = c.and_then(|c| c.target.as_ref()).or(if s.system == System::Rill {
                sr.latency_target.as_ref()
            } else {
                None
            });
            let (target, met) = t.map_or((String::new(), String::new()), |t| (t.text.clone(), t.met.to_string()));
            let l = &s.latency;
            let fields = [
                sr.scenario.name.clone(),
                s.system.name().into(),
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
                l.p50.to_string(),
                l.p90.to_string(),
                l.p99.to_string(),
                l.p999.to_string(),
                l.max.to_string(),
                median,
                worst,
                target,
                met,
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
    use crate::bench::{Comparison, TargetCheck};
    use crate::scenarios::{Named, Target, named};
    use crate::stats::{Percentiles, pair_stats};
    use crate::systems::{PeerPayload, RillOverflow};

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
        }
    }

    /// A report with one compared scenario, as the tool would build it.
    pub(crate) fn sample_report() -> Report {
        let sc = named(Named::OneToOne);
        let target = sc.targets[0].clone();
        let pairs = pair_stats(&[3.0, 2.0, 4.0, 2.6, 3.1]);
        Report {
            version: "0.1.0".into(),
            command: "rill-bench --scenario one-to-one --compare".into(),
            probe: Some(Probe { round_trip_ns: 180.0, min_ns: 170.0, max_ns: 200.0, pinned: true }),
            env: Env {
                workers: None,
                retention_mib: 64,
                warmup: true,
                overflow: RillOverflow::Block,
                batch_handler: false,
                peer_payload: PeerPayload::Vec,
                timeout: std::time::Duration::from_secs(10),
            },
            notes: vec!["a note".into()],
            elapsed_s: 12.0,
            scenarios: vec![ScenarioResult {
                shape_text: sc.shape.describe(),
                systems: vec![summary(System::Rill, 30e6), summary(System::Crossbeam, 10e6)],
                comparisons: vec![Comparison {
                    peer: System::Crossbeam,
                    pairs,
                    note: None,
                    target: Some(TargetCheck { text: target.describe(), target, met: true }),
                }],
                latency_target: None,
                scenario: sc,
            }],
        }
    }

    #[test]
    fn csv_has_a_header_and_one_row_per_system() {
        let out = csv(&sample_report());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3);
        let cols = lines[0].split(',').count();
        assert_eq!(cols, 23);
        for l in &lines[1..] {
            assert_eq!(l.split(',').count(), cols, "{l}");
        }
        assert!(lines[1].starts_with("one-to-one,rill,1,1,pool,1,64,1,5,ok,30000000,"));
        assert!(lines[2].contains(",3.0000,2.0000,every pair >= 2.5x,true"), "{}", lines[2]);
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }

    #[test]
    fn json_carries_probe_ratios_and_percentiles() {
        let v: serde_json::Value = serde_json::from_str(&render(&sample_report(), Format::Json)).unwrap();
        assert_eq!(v["probe"]["round_trip_ns"], 180.0);
        let sc = &v["scenarios"][0];
        assert_eq!(sc["scenario"]["name"], "one-to-one");
        assert_eq!(sc["systems"][0]["system"], "rill");
        assert_eq!(sc["systems"][1]["latency"]["p999"], 400);
        assert_eq!(sc["comparisons"][0]["peer"], "crossbeam");
        assert_eq!(sc["comparisons"][0]["pairs"]["median"], 3.0);
        assert_eq!(sc["comparisons"][0]["pairs"]["worst"], 2.0);
        assert_eq!(sc["comparisons"][0]["target"]["met"], true);
        assert_eq!(sc["scenario"]["targets"][0]["kind"], "ratio");
        assert!(matches!(sample_report().scenarios[0].scenario.targets[0], Target::Ratio { .. }));
    }

    #[test]
    fn table_shows_probe_rows_and_a_markdown_summary() {
        let t = table(&sample_report());
        assert!(t.contains("ping-pong: 180 ns"), "{t}");
        assert!(t.contains("== one-to-one"));
        assert!(t.contains("crossbeam"));
        assert!(t.contains("3.00x"));
        assert!(t.contains("MET"));
        assert!(
            t.contains(
                "| one-to-one | crossbeam | 30.0 M msgs/s | 10.0 M msgs/s | 3.00x | 2.00x | every pair >= 2.5x | yes |"
            ),
            "{t}"
        );
    }
}
