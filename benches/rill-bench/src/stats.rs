//! Statistics over runs: medians, paired ratios, latency percentiles, and the
//! number formats every output uses.

use hdrhistogram::Histogram;
use serde::Serialize;

/// The median of `xs` (mean of the middle two for an even count); NaN if empty.
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

/// Ratios of interleaved pairs (rill run, peer run), each "how many times
/// better rill did" in that pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairStats {
    /// Ratio of every pair, in run order.
    pub ratios: Vec<f64>,
    /// Median ratio.
    pub median: f64,
    /// Smallest ratio (the pair least favourable to rill).
    pub worst: f64,
    /// Largest ratio.
    pub best: f64,
}

/// Summarises pair ratios; `None` without any finite ratio.
pub fn pair_stats(ratios: &[f64]) -> Option<PairStats> {
    let finite: Vec<f64> = ratios.iter().copied().filter(|r| r.is_finite()).collect();
    if finite.is_empty() {
        return None;
    }
    Some(PairStats {
        ratios: ratios.to_vec(),
        median: median(&finite),
        worst: finite.iter().copied().fold(f64::INFINITY, f64::min),
        best: finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// Throughput ratio of one pair: rill over the peer (infinite if the peer
/// delivered nothing, NaN if neither did).
pub fn throughput_ratio(rill: f64, peer: f64) -> f64 {
    if peer > 0.0 {
        rill / peer
    } else if rill > 0.0 {
        f64::INFINITY
    } else {
        f64::NAN
    }
}

/// Latency ratio of one pair: the peer's p50 over rill's (so, like
/// throughput, above 1 means rill did better).
pub fn latency_ratio(rill_p50: u64, peer_p50: u64) -> f64 {
    if rill_p50 > 0 { peer_p50 as f64 / rill_p50 as f64 } else { f64::NAN }
}

/// Latency percentiles, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct Percentiles {
    /// Samples behind them.
    pub samples: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest sample.
    pub max: u64,
}

/// Percentiles of a histogram (all zero if it is empty).
pub fn percentiles(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    Percentiles {
        samples: h.len(),
        p50: h.value_at_quantile(0.5),
        p90: h.value_at_quantile(0.9),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
    }
}

/// A duration in nanoseconds for people: "87 ns", "1.25 µs", "14.2 ms", "3.10 s".
pub fn fmt_ns(ns: u64) -> String {
    let x = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{} µs", three_digits(x / 1e3))
    } else if ns < 1_000_000_000 {
        format!("{} ms", three_digits(x / 1e6))
    } else {
        format!("{} s", three_digits(x / 1e9))
    }
}

/// A count with an SI suffix and three significant digits: "950", "12.3 k", "4.56 M".
pub fn fmt_count(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let (v, suffix) = if x >= 1e9 {
        (x / 1e9, " G")
    } else if x >= 1e6 {
        (x / 1e6, " M")
    } else if x >= 1e3 {
        (x / 1e3, " k")
    } else {
        return format!("{x:.0}");
    };
    format!("{}{suffix}", three_digits(v))
}

/// A ratio: "2.53x" (or "inf" / "-").
pub fn fmt_ratio(r: f64) -> String {
    if r.is_nan() {
        "-".into()
    } else if r.is_infinite() {
        "inf".into()
    } else if r >= 100.0 {
        format!("{r:.0}x")
    } else if r >= 10.0 {
        format!("{r:.1}x")
    } else {
        format!("{r:.2}x")
    }
}

fn three_digits(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::new_histogram;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[f64::NAN, 1.0, 3.0]), 2.0);
    }

    #[test]
    fn pair_stats_reports_median_and_worst_pair() {
        let s = pair_stats(&[2.0, 3.5, 1.2, 2.5, 4.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.worst, 1.2);
        assert_eq!(s.best, 4.0);
        assert_eq!(s.ratios.len(), 5);
        // A pair where the peer delivered nothing counts as infinitely in
        // rill's favour in the list, but does not move median or worst.
        let s = pair_stats(&[2.0, f64::INFINITY, 1.0]).unwrap();
        assert_eq!(s.median, 1.5);
        assert_eq!(s.worst, 1.0);
        assert!(pair_stats(&[f64::NAN]).is_none());
    }

    #[test]
    fn ratios_point_the_same_way_for_throughput_and_latency() {
        assert_eq!(throughput_ratio(30.0, 10.0), 3.0);
        assert!(throughput_ratio(1.0, 0.0).is_infinite());
        assert!(throughput_ratio(0.0, 0.0).is_nan());
        assert_eq!(latency_ratio(100, 400), 4.0);
        assert!(latency_ratio(0, 400).is_nan());
    }

    #[test]
    fn percentiles_of_a_histogram() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v * 100).unwrap();
        }
        let p = percentiles(&h);
        assert_eq!(p.samples, 1000);
        let near = |a: u64, b: u64| (a as f64 - b as f64).abs() / b as f64 <= 0.002;
        assert!(near(p.p50, 50_000), "{p:?}");
        assert!(near(p.p90, 90_000), "{p:?}");
        assert!(near(p.p99, 99_000), "{p:?}");
        assert!(near(p.p999, 99_900), "{p:?}");
        assert!(near(p.max, 100_000), "{p:?}");
        assert_eq!(percentiles(&new_histogram()), Percentiles::default());
    }

    #[test]
    fn human_formats() {
        assert_eq!(fmt_ns(87), "87 ns");
        assert_eq!(fmt_ns(1_250), "1.25 µs");
        assert_eq!(fmt_ns(14_200_000), "14.2 ms");
        assert_eq!(fmt_ns(3_100_000_000), "3.10 s");
        assert_eq!(fmt_count(950.0), "950");
        assert_eq!(fmt_count(12_345.0), "12.3 k");
        assert_eq!(fmt_count(4_560_000.0), "4.56 M");
        assert_eq!(fmt_count(123_000_000.0), "123 M");
        assert_eq!(fmt_ratio(2.531), "2.53x");
        assert_eq!(fmt_ratio(12.34), "12.3x");
        assert_eq!(fmt_ratio(f64::INFINITY), "inf");
        assert_eq!(fmt_ratio(f64::NAN), "-");
    }
}
