//! Runs scenarios: rill alone (repeated), or rill against each peer in
//! interleaved pairs (rill, peer, rill, peer, ...), and summarises the runs.

use std::collections::HashMap;

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::measure::{Outcome, Status, new_histogram};
use crate::scenarios::{Metric, Scenario, Target, unsupported};
use crate::stats::{PairStats, Percentiles, latency_ratio, median, pair_stats, percentiles, throughput_ratio};
use crate::systems::{self, Env, System};

/// Every run of one system in one scenario, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct SystemSummary {
    /// The system.
    pub system: System,
    /// Runs made.
    pub runs: usize,
    /// "ok", or what went wrong (timeouts, unsupported, failures).
    pub status: String,
    /// Median over runs of delivered messages per subscriber per second.
    pub msgs_per_sec: f64,
    /// `msgs_per_sec` times the payload size, in MB (1e6 bytes) per second.
    pub mb_per_sec: f64,
    /// `msgs_per_sec` times the subscriber count: deliveries per second.
    pub deliveries_per_sec: f64,
    /// Messages published over all measured runs.
    pub published: u64,
    /// Every run's msgs/s, in run order.
    pub run_msgs_per_sec: Vec<f64>,
    /// Messages skipped (lag), as a percentage of what should have been delivered.
    pub lost_pct: f64,
    /// Latency percentiles over every sample of every run.
    pub latency: Percentiles,
}

/// A target and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    /// The goal.
    pub target: Target,
    /// How it reads.
    pub text: String,
    /// Met (median and, if set, worst pair).
    pub met: bool,
}

/// rill against one peer in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The peer.
    pub peer: System,
    /// Ratios of the pairs ("how many times better rill did"); `None` when
    /// the peer could not run or no pair produced numbers.
    pub pairs: Option<PairStats>,
    /// Why there are no pairs, or a note on them (timeouts, losses).
    pub note: Option<String>,
    /// The target against this peer, if any.
    pub target: Option<TargetCheck>,
}

/// Everything measured in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    /// The scenario (name, shape, targets).
    pub scenario: Scenario,
    /// One line describing the shape.
    pub shape_text: String,
    /// rill first, then the peers.
    pub systems: Vec<SystemSummary>,
    /// rill against each peer.
    pub comparisons: Vec<Comparison>,
    /// rill's own latency target, if any.
    pub latency_target: Option<TargetCheck>,
}

impl ScenarioResult {
    /// The summary of `system`, if it ran.
    pub fn system(&self, system: System) -> Option<&SystemSummary> {
        self.systems.iter().find(|s| s.system == system)
    }
}

/// How many runs `measure` makes for a scenario (for the progress bar).
pub fn planned_runs(sc: &Scenario, peers: &[System], pairs: usize) -> u64 {
    let supported = peers.iter().filter(|p| unsupported(**p, &sc.shape).is_none()).count();
    if peers.is_empty() { pairs as u64 } else { (pairs * supported * 2) as u64 }
}

/// When both runs published a fixed count and delivered all of it, the
/// subscribers of both must have read the same bytes (the payload sums
/// match); a peer run whose bytes differ is marked failed rather than
/// counted, so no harness can win by not handing over the real payload.
fn check_same_bytes(rill: &Outcome, peer: &mut Outcome, shape: &crate::measure::Shape) {
    let complete = |o: &Outcome| o.status == Status::Ok && o.missed == 0;
    if shape.planned().is_some() && complete(rill) && complete(peer) && rill.payload_sum != peer.payload_sum {
        peer.status = Status::Failed(format!(
            "its subscribers read other bytes than rill's (payload sum {:#x}, rill {:#x})",
            peer.payload_sum, rill.payload_sum
        ));
    }
}

/// Runs a scenario: `pairs` repetitions of rill alone without peers, else
/// `pairs` rounds of (rill, peer) for every peer in turn.
pub fn measure(sc: &Scenario, peers: &[System], pairs: usize, env: &Env, bar: &ProgressBar) -> ScenarioResult {
    let mut rill_runs: Vec<Outcome> = Vec::new();
    let mut peer_runs: HashMap<System, Vec<(usize, Outcome)>> = HashMap::new();
    let mut skipped: HashMap<System, String> = HashMap::new();
    for p in peers {
        if let Some(why) = unsupported(*p, &sc.shape) {
            skipped.insert(*p, why);
        }
    }
    let mut collapsed: HashMap<System, String> = HashMap::new();
    let label = |s: System, round: usize| format!("{}: {} ({}/{})", sc.name, s.name(), round + 1, pairs);
    if peers.is_empty() {
        for round in 0..pairs {
            bar.set_message(label(System::Rill, round));
            rill_runs.push(systems::run(System::Rill, &sc.shape, env));
            bar.inc(1);
        }
    }
    for round in 0..pairs {
        for &p in peers {
            if skipped.contains_key(&p) {
                continue;
            }
            if collapsed.contains_key(&p) {
                bar.inc(2);
                continue;
            }
            bar.set_message(label(System::Rill, round));
            rill_runs.push(systems::run(System::Rill, &sc.shape, env));
            bar.inc(1);
            bar.set_message(label(p, round));
            let mut out = systems::run(p, &sc.shape, env);
            bar.inc(1);
            check_same_bytes(rill_runs.last().expect("pushed above"), &mut out, &sc.shape);
            // A peer that hit the time cap would hit it again: one such run
            // is reported, the remaining pairs are skipped.
            if out.status == Status::Timeout {
                collapsed.insert(
                    p,
                    format!(
                        "hit the {:.0} s time cap in round {}; later pairs skipped",
                        env.timeout.as_secs_f64(),
                        round + 1
                    ),
                );
            }
            peer_runs.entry(p).or_default().push((rill_runs.len() - 1, out));
        }
    }

    let mut systems_out = vec![summarise(System::Rill, &rill_runs.iter().collect::<Vec<_>>(), sc)];
    let mut comparisons = Vec::new();
    for &p in peers {
        let runs = peer_runs.get(&p).map(Vec::as_slice).unwrap_or(&[]);
        if let Some(why) = skipped.get(&p) {
            systems_out.push(SystemSummary { status: format!("unsupported: {why}"), ..summarise(p, &[], sc) });
        } else {
            systems_out.push(summarise(p, &runs.iter().map(|(_, o)| o).collect::<Vec<_>>(), sc));
        }
        let ratios: Vec<f64> = runs
            .iter()
            .filter(|(i, o)| o.measured() && rill_runs[*i].measured())
            .map(|(i, o)| pair_ratio(sc.metric, &rill_runs[*i], o))
            .collect();
        let stats = pair_stats(&ratios);
        let note = skipped.get(&p).cloned().or_else(|| collapsed.get(&p).cloned());
        let target = sc.targets.iter().find_map(|t| match t {
            Target::Ratio { peer, median, worst } if *peer == p => Some(TargetCheck {
                target: t.clone(),
                text: t.describe(),
                met: stats.as_ref().is_some_and(|s| s.median >= *median && worst.is_none_or(|w| s.worst >= w)),
            }),
            _ => None,
        });
        comparisons.push(Comparison { peer: p, pairs: stats, note, target });
    }
    let latency_target = sc.targets.iter().find_map(|t| match t {
        Target::Latency { p50_ns, p99_ns } => {
            let l = systems_out[0].latency;
            Some(TargetCheck {
                target: t.clone(),
                text: t.describe(),
                met: l.samples > 0 && l.p50 <= *p50_ns && l.p99 <= *p99_ns,
            })
        }
        Target::Ratio { .. } => None,
    });
    ScenarioResult {
        shape_text: sc.shape.describe(),
        scenario: sc.clone(),
        systems: systems_out,
        comparisons,
        latency_target,
    }
}

fn pair_ratio(metric: Metric, rill: &Outcome, peer: &Outcome) -> f64 {
    match metric {
        Metric::Throughput => throughput_ratio(rill.msgs_per_sec(), peer.msgs_per_sec()),
        Metric::Latency => latency_ratio(p50(&rill.latency), p50(&peer.latency)),
    }
}

fn p50(h: &Histogram<u64>) -> u64 {
    if h.is_empty() { 0 } else { h.value_at_quantile(0.5) }
}

fn summarise(system: System, runs: &[&Outcome], sc: &Scenario) -> SystemSummary {
    let measured: Vec<&&Outcome> = runs.iter().filter(|o| o.measured()).collect();
    let rates: Vec<f64> = measured.iter().map(|o| o.msgs_per_sec()).collect();
    let msgs = if rates.is_empty() { 0.0 } else { median(&rates) };
    let mut latency = new_histogram();
    for o in &measured {
        latency.add(&o.latency).expect("same bounds");
    }
    let (delivered, missed): (u64, u64) = measured.iter().fold((0, 0), |(d, m), o| (d + o.delivered, m + o.missed));
    let timeouts = runs.iter().filter(|o| o.status == Status::Timeout).count();
    let failures: Vec<String> = runs
        .iter()
        .filter_map(|o| match &o.status {
            Status::Failed(e) => Some(format!("failed: {e}")),
            Status::Unsupported(e) => Some(format!("unsupported: {e}")),
            _ => None,
        })
        .collect();
    let status = if let Some(f) = failures.first() {
        f.clone()
    } else if timeouts > 0 {
        format!("timeout in {timeouts} of {} runs", runs.len())
    } else {
        "ok".into()
    };
    SystemSummary {
        system,
        runs: runs.len(),
        status,
        msgs_per_sec: msgs,
        mb_per_sec: msgs * sc.shape.payload as f64 / 1e6,
        deliveries_per_sec: msgs * sc.shape.subscribers as f64,
        published: measured.iter().map(|o| o.published).sum(),
        run_msgs_per_sec: rates,
        lost_pct: if delivered + missed > 0 { missed as f64 * 100.0 / (delivered + missed) as f64 } else { 0.0 },
        latency: percentiles(&latency),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::new_histogram;
    use crate::scenarios::{Named, named};

    fn outcome(payload_sum: u64, missed: u64) -> Outcome {
        Outcome {
            status: Status::Ok,
            published: 10,
            delivered: 10 - missed,
            missed,
            subscribers: 1,
            elapsed_ns: 1,
            latency: new_histogram(),
            payload_sum,
        }
    }

    #[test]
    fn a_peer_that_read_other_bytes_fails_its_run() {
        let counted = named(Named::OneToOne).shape;
        let shape = crate::measure::Shape { amount: crate::measure::Amount::Messages(10), ..counted.clone() };
        let mut same = outcome(7, 0);
        check_same_bytes(&outcome(7, 0), &mut same, &shape);
        assert_eq!(same.status, Status::Ok);
        let mut other = outcome(8, 0);
        check_same_bytes(&outcome(7, 0), &mut other, &shape);
        assert!(matches!(&other.status, Status::Failed(why) if why.contains("other bytes")), "{:?}", other.status);
        // Runs that skipped messages, or ran for a duration, read different
        // sets of messages: nothing to compare.
        let mut lossy = outcome(8, 2);
        check_same_bytes(&outcome(7, 0), &mut lossy, &shape);
        assert_eq!(lossy.status, Status::Ok);
        let mut timed = outcome(8, 0);
        check_same_bytes(&outcome(7, 0), &mut timed, &counted);
        assert_eq!(timed.status, Status::Ok);
    }
}
