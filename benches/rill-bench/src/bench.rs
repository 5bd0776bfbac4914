//! Runs scenarios: rill alone (repeated), or rill against each peer in
//! interleaved pairs whose order alternates (rill, peer, then peer, rill, ...),
//! each pair followed by the peer's plain loop (the self-check, see
//! [`crate::plain`]), and summarises the runs.
//!
//! # Pairs that straddle a change of machine state
//!
//! On a shared VM the two vCPUs may sit on neighbouring cores one minute and
//! on distant ones the next: on the VM this project is measured on, the
//! cross-core ping-pong moved between two levels several times apart
//! within seconds, and every one-to-one system (rill, crossbeam, the bare
//! log) lost most of its throughput while it was high. A pair whose two
//! runs saw different states compares the machines, not the systems. So a
//! short ping-pong is taken before each run of a pair and after its second
//! ([`MachineState`]), each comparison keeps the state of every pair, and
//! the median of the pairs that saw one state (within [`STATE_SPREAD`]) is
//! reported beside the median of all of them. Neither is hidden: the
//! headline stays the median of all pairs.

use std::collections::HashMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::measure::{Outcome, Status, Work, new_histogram};
use crate::plain::{self, Plain, VALID_SHARE};
use crate::probe;
use crate::scenarios::{Metric, Scenario, unsupported};
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
    /// Percentiles of the publish calls' durations over every run, where the
    /// harness timed them (rill under `Fsync::Always`; else no samples).
    pub publish_latency: Percentiles,
    /// Median over runs of voluntary context switches per 1,000 delivered messages.
    pub switches_per_1k: f64,
    /// The payload type a peer carried ("[u8; 64]", "Arc<[u8]>", ...); empty for rill.
    pub payload: String,
}

/// The peer timed in its plain loop, outside the harness.
#[derive(Debug, Clone, Serialize)]
pub struct SelfCheck {
    /// Median over plain runs of messages per receiver per second.
    pub plain_msgs_per_sec: f64,
    /// Every plain run's msgs/s, in run order.
    pub plain_runs: Vec<f64>,
    /// Median voluntary context switches per 1,000 messages in the plain loop.
    pub plain_switches_per_1k: f64,
    /// The harnessed peer's median msgs/s over its plain loop's.
    pub harness_share: f64,
    /// rill's median msgs/s in the same scenario over the peer's plain
    /// loop's: rill against the speed a user gets from the peer, whether or
    /// not the harnessed pair was valid.
    pub rill_vs_plain: f64,
    /// False when `harness_share` is below [`VALID_SHARE`]: the harness, not
    /// the peer, would set the ratio, so the comparison is not reported as one.
    pub valid: bool,
}

/// The cross-core ping-pong round trips seen around one pair: probed before
/// its first run, between its runs, and after its second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MachineState {
    /// The fastest of the probes, ns per round trip.
    pub low_ns: f64,
    /// The slowest.
    pub high_ns: f64,
}

/// A pair whose probes differ by more than this factor ran in more than one
/// machine state (two states seen on a shared VM differ several times
/// over; a probe's own spread within one state is far smaller).
pub const STATE_SPREAD: f64 = 1.5;
/// Rounds of the ping-pong taken around each run, and each round's length:
/// about 10 ms a probe, against runs of half a second.
pub const STATE_PROBE_ROUNDS: usize = 3;
pub const STATE_PROBE_EACH: Duration = Duration::from_millis(3);

impl MachineState {
    /// The state around a pair from its probes' round trips; `None` without any.
    pub fn of(probes: &[f64]) -> Option<MachineState> {
        let finite = probes.iter().copied().filter(|p| p.is_finite() && *p > 0.0);
        let (low_ns, high_ns) = finite.fold((f64::INFINITY, 0f64), |(lo, hi), p| (lo.min(p), hi.max(p)));
        (high_ns > 0.0).then_some(MachineState { low_ns, high_ns })
    }

    /// The range of several pairs' states: the fastest probe of any and the
    /// slowest; `None` for none.
    pub fn span<'a>(states: impl IntoIterator<Item = &'a MachineState>) -> Option<MachineState> {
        let probes: Vec<f64> = states.into_iter().flat_map(|s| [s.low_ns, s.high_ns]).collect();
        MachineState::of(&probes)
    }

    /// True if every probe around the pair saw one state.
    pub fn steady(&self) -> bool {
        self.high_ns <= self.low_ns * STATE_SPREAD
    }
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
    /// The peer in its plain loop (absent where it has none: bare-log, paced
    /// scenarios).
    pub self_check: Option<SelfCheck>,
    /// The machine state around each pair, in the order of `pairs.ratios`;
    /// empty when the pairs were not probed (`--no-probe`).
    pub states: Vec<MachineState>,
    /// The pairs that ran in one machine state ([`MachineState::steady`]),
    /// summarised; `None` when not probed or no pair was steady.
    pub steady_pairs: Option<PairStats>,
}

impl Comparison {
    /// False if the self-check found the harness slowing the peer below
    /// [`VALID_SHARE`] of its plain loop.
    pub fn valid(&self) -> bool {
        self.self_check.as_ref().is_none_or(|c| c.valid)
    }
}

/// Everything measured in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    /// The scenario (name, shape, work).
    pub scenario: Scenario,
    /// One line describing the shape.
    pub shape_text: String,
    /// rill first, then the peers.
    pub systems: Vec<SystemSummary>,
    /// rill against each peer.
    pub comparisons: Vec<Comparison>,
}

impl ScenarioResult {
    /// The summary of `system`, if it ran.
    pub fn system(&self, system: System) -> Option<&SystemSummary> {
        self.systems.iter().find(|s| s.system == system)
    }
}

/// How many runs `measure` makes for a scenario (for the progress bar).
pub fn planned_runs(sc: &Scenario, peers: &[System], pairs: usize) -> u64 {
    let pairs = if sc.shape.work == Work::Minimal { pairs } else { pairs.min(DIAGNOSTIC_PAIRS) };
    let supported: Vec<System> = peers.iter().copied().filter(|p| unsupported(*p, &sc.shape).is_none()).collect();
    let plain = supported.iter().filter(|p| plain::available(**p, &sc.shape)).count();
    if peers.is_empty() { pairs as u64 } else { (pairs * (supported.len() * 2 + plain)) as u64 }
}

/// When both runs published a fixed count and delivered all of it, the
/// subscribers of both must have read the same bytes (the payload sums
/// match); a peer run whose bytes differ is marked failed rather than
/// counted, so no harness can win by not handing over the real payload.
fn check_same_bytes(rill: &Outcome, peer: &mut Outcome, shape: &crate::measure::Shape) {
    let complete = |o: &Outcome| o.status == Status::Ok && o.missed == 0;
    if shape.work.sums()
        && shape.planned().is_some()
        && complete(rill)
        && complete(peer)
        && rill.payload_sum != peer.payload_sum
    {
        peer.status = Status::Failed(format!(
            "its subscribers read other bytes than rill's (payload sum {:#x}, rill {:#x})",
            peer.payload_sum, rill.payload_sum
        ));
    }
}

/// Pairs run with a work other than minimal (touch and the diagnostics), which
/// explain the headline rather than make it: at most this many.
pub const DIAGNOSTIC_PAIRS: usize = 3;

/// Runs a scenario: `pairs` repetitions of rill alone without peers, else
/// `pairs` rounds, each of which runs every peer in turn as a pair with rill
/// (rill first in even rounds, the peer first in odd ones, so neither side is
/// always the warm or the cold one), followed by the peer's plain loop.
pub fn measure(sc: &Scenario, peers: &[System], pairs: usize, env: &Env, bar: &ProgressBar) -> ScenarioResult {
    let mut rill_runs: Vec<Outcome> = Vec::new();
    let mut peer_runs: HashMap<System, Vec<(usize, Outcome, Option<MachineState>)>> = HashMap::new();
    let mut plain_runs: HashMap<System, Vec<Plain>> = HashMap::new();
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
    // The diagnostic works only explain the headline: fewer pairs for them.
    let pairs = if sc.shape.work == Work::Minimal { pairs } else { pairs.min(DIAGNOSTIC_PAIRS) };
    for round in 0..pairs {
        for &p in peers {
            if skipped.contains_key(&p) {
                continue;
            }
            let has_plain = plain::available(p, &sc.shape);
            if collapsed.contains_key(&p) {
                bar.inc(2 + has_plain as u64);
                continue;
            }
            let rill_first = round % 2 == 0;
            let mut out = None;
            let mut probes = Vec::new();
            let mut probe = || {
                if env.state_probes {
                    probes.push(probe::ping_pong(STATE_PROBE_ROUNDS, STATE_PROBE_EACH).round_trip_ns);
                }
            };
            for side in if rill_first { [System::Rill, p] } else { [p, System::Rill] } {
                bar.set_message(label(side, round));
                probe();
                let o = systems::run(side, &sc.shape, env);
                if side == System::Rill {
                    rill_runs.push(o);
                } else {
                    out = Some(o);
                }
                bar.inc(1);
            }
            probe();
            let state = MachineState::of(&probes);
            let mut out = out.expect("the peer ran");
            if has_plain {
                bar.set_message(format!("{}: {} plain loop ({}/{})", sc.name, p.name(), round + 1, pairs));
                if let Some(r) = plain::run(p, &sc.shape, env) {
                    plain_runs.entry(p).or_default().push(r);
                }
                bar.inc(1);
            }
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
            peer_runs.entry(p).or_default().push((rill_runs.len() - 1, out, state));
        }
    }

    let mut systems_out = vec![summarise(System::Rill, &rill_runs.iter().collect::<Vec<_>>(), sc, env)];
    let mut comparisons = Vec::new();
    for &p in peers {
        let runs = peer_runs.get(&p).map(Vec::as_slice).unwrap_or(&[]);
        if let Some(why) = skipped.get(&p) {
            systems_out.push(SystemSummary { status: format!("unsupported: {why}"), ..summarise(p, &[], sc, env) });
        } else {
            systems_out.push(summarise(p, &runs.iter().map(|(_, o, _)| o).collect::<Vec<_>>(), sc, env));
        }
        let measured: Vec<_> = runs.iter().filter(|(i, o, _)| o.measured() && rill_runs[*i].measured()).collect();
        let ratios: Vec<f64> = measured.iter().map(|(i, o, _)| pair_ratio(sc.metric, &rill_runs[*i], o)).collect();
        let stats = pair_stats(&ratios);
        let states: Vec<MachineState> = measured.iter().filter_map(|(_, _, s)| *s).collect();
        let steady_pairs = steady_stats(&ratios, &states);
        let note = skipped.get(&p).cloned().or_else(|| collapsed.get(&p).cloned());
        let harnessed = systems_out.last().map_or(0.0, |s| s.msgs_per_sec);
        let rill = systems_out[0].msgs_per_sec;
        let self_check = self_check(rill, harnessed, plain_runs.get(&p).map(Vec::as_slice).unwrap_or(&[]));
        comparisons.push(Comparison { peer: p, pairs: stats, note, self_check, states, steady_pairs });
    }
    ScenarioResult { shape_text: sc.shape.describe(), scenario: sc.clone(), systems: systems_out, comparisons }
}

/// The pairs of `ratios` whose `states` (one each, in the same order) were
/// steady, summarised; `None` unless every pair has a state and some is steady.
pub fn steady_stats(ratios: &[f64], states: &[MachineState]) -> Option<PairStats> {
    if states.len() != ratios.len() {
        return None;
    }
    let steady: Vec<f64> = ratios.iter().zip(states).filter(|(_, s)| s.steady()).map(|(r, _)| *r).collect();
    pair_stats(&steady)
}

/// The self-check of a peer that made `harnessed` msgs/s (median) in the
/// harness, where rill made `rill`, from its plain runs; `None` without
/// plain runs.
pub fn self_check(rill: f64, harnessed: f64, plain: &[Plain]) -> Option<SelfCheck> {
    let rates: Vec<f64> = plain.iter().map(Plain::msgs_per_sec).collect();
    if rates.is_empty() {
        return None;
    }
    let plain_msgs_per_sec = median(&rates);
    let share = |x: f64| if plain_msgs_per_sec > 0.0 { x / plain_msgs_per_sec } else { f64::NAN };
    let harness_share = share(harnessed);
    Some(SelfCheck {
        plain_msgs_per_sec,
        plain_runs: rates,
        plain_switches_per_1k: median(&plain.iter().map(Plain::switches_per_1k).collect::<Vec<_>>()),
        harness_share,
        rill_vs_plain: share(rill),
        valid: harness_share >= VALID_SHARE,
    })
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

fn summarise(system: System, runs: &[&Outcome], sc: &Scenario, env: &Env) -> SystemSummary {
    let measured: Vec<&&Outcome> = runs.iter().filter(|o| o.measured()).collect();
    let rates: Vec<f64> = measured.iter().map(|o| o.msgs_per_sec()).collect();
    let msgs = if rates.is_empty() { 0.0 } else { median(&rates) };
    let mut latency = new_histogram();
    let mut publish_latency = new_histogram();
    for o in &measured {
        latency.add(&o.latency).expect("same bounds");
        publish_latency.add(&o.publish_latency).expect("same bounds");
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
        deliveries_per_sec: msgs * sc.shape.receivers() as f64,
        published: measured.iter().map(|o| o.published).sum(),
        run_msgs_per_sec: rates,
        lost_pct: if delivered + missed > 0 { missed as f64 * 100.0 / (delivered + missed) as f64 } else { 0.0 },
        latency: percentiles(&latency),
        publish_latency: percentiles(&publish_latency),
        switches_per_1k: if measured.is_empty() {
            0.0
        } else {
            median(&measured.iter().map(|o| o.switches_per_1k()).collect::<Vec<_>>())
        },
        payload: match system {
            System::Rill => String::new(),
            System::Disruptor => format!("ring slot of {} B, filled in place", sc.shape.payload),
            System::BareLog => format!("frame of {} B, written in place", sc.shape.payload),
            _ => env.peer_payload.type_name(&sc.shape),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{Shape, Work, new_histogram};
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
            publish_latency: new_histogram(),
            payload_sum,
            ctx_switches: 0,
        }
    }

    #[test]
    fn a_peer_that_read_other_bytes_fails_its_run() {
        let counted = Shape { work: Work::Touch, ..named(Named::OneToOne).shape };
        let shape = Shape { amount: crate::measure::Amount::Messages(10), ..counted.clone() };
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
        // Minimal work reads no bytes: nothing to compare.
        let mut minimal = outcome(8, 0);
        check_same_bytes(&outcome(7, 0), &mut minimal, &Shape { work: Work::Minimal, ..shape });
        assert_eq!(minimal.status, Status::Ok);
    }

    fn plain(msgs: u64) -> Plain {
        Plain { published: msgs, delivered: msgs, subscribers: 1, elapsed_ns: 1_000_000_000, ctx_switches: 0 }
    }

    #[test]
    fn a_peer_slowed_by_the_harness_makes_the_comparison_invalid() {
        let runs = [plain(10_000_000), plain(12_000_000), plain(11_000_000)];
        let ok = self_check(8_000_000.0, 10_000_000.0, &runs).unwrap();
        assert_eq!(ok.plain_msgs_per_sec, 11_000_000.0);
        assert!(ok.valid, "{ok:?}");
        let slowed = self_check(8_000_000.0, 5_000_000.0, &runs).unwrap();
        assert!(!slowed.valid, "{slowed:?}");
        assert!((slowed.harness_share - 5.0 / 11.0).abs() < 1e-9);
        let c = Comparison {
            peer: System::Crossbeam,
            pairs: None,
            note: None,
            self_check: Some(slowed),
            states: Vec::new(),
            steady_pairs: None,
        };
        assert!(!c.valid());
        assert!(self_check(1.0, 1.0, &[]).is_none());
        assert!(Comparison { self_check: None, ..c }.valid(), "no plain loop: nothing to invalidate");
    }
}
