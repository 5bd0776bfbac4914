//! `--plot`: throughput against subscriber count, one line per system, as a
//! hand-written SVG (axes, decade grid on a log scale, legend, labels).

use std::fmt::Write as _;

use crate::bench::ScenarioResult;
use crate::stats::fmt_count;

/// An axis label: "100 k", "1 M", "20 M" (no trailing zeros).
fn fmt_axis(v: f64) -> String {
    let (x, suffix) = if v >= 1e9 {
        (v / 1e9, " G")
    } else if v >= 1e6 {
        (v / 1e6, " M")
    } else if v >= 1e3 {
        (v / 1e3, " k")
    } else {
        (v, "")
    };
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{suffix}")
}
use crate::systems::System;

/// One line of the chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (subscribers, msgs/s), sorted by subscribers.
    pub points: Vec<(usize, f64)>,
}

const COLORS: [&str; 8] = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// The series of a sweep: for each system, its median msgs/s at each
/// subscriber count (scenarios marked `sweep`, or all of them if none is).
pub fn series(results: &[ScenarioResult]) -> Vec<Series> {
    let any_sweep = results.iter().any(|r| r.scenario.sweep);
    let mut out: Vec<Series> = Vec::new();
    let mut order: Vec<System> = vec![System::Rill];
    order.extend(System::PEERS);
    for sys in order {
        let mut points: Vec<(usize, f64)> = results
            .iter()
            .filter(|r| r.scenario.sweep || !any_sweep)
            .filter_map(|r| {
                r.system(sys)
                    .filter(|s| s.runs > 0 && s.msgs_per_sec > 0.0)
                    .map(|s| (r.scenario.shape.subscribers, s.msgs_per_sec))
            })
            .collect();
        points.sort_by_key(|p| p.0);
        points.dedup_by_key(|p| p.0);
        if !points.is_empty() {
            out.push(Series { name: sys.name().into(), points });
        }
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The labels of a chart's axes, and the note under it.
#[derive(Debug, Clone, Copy)]
pub struct Axes<'a> {
    /// Under the x axis.
    pub x: &'a str,
    /// Beside the y axis (log scale).
    pub y: &'a str,
    /// The small print at the bottom.
    pub note: &'a str,
}

/// The axes of the fan-out sweep's chart.
const SWEEP_AXES: Axes<'static> = Axes {
    x: "subscribers",
    y: "delivered msgs/s per subscriber (log scale)",
    note: "only delivered messages count (a lossy system gets no credit for what it skipped); median of runs",
};

/// An SVG line chart of `series` (msgs/s on a log scale against subscribers).
pub fn svg(title: &str, subtitle: &str, series: &[Series]) -> String {
    svg_with(title, subtitle, &SWEEP_AXES, series)
}

/// An SVG line chart of `series` (y on a log scale against the points' x,
/// evenly spaced in order) with the axes labelled `axes`.
pub fn svg_with(title: &str, subtitle: &str, axes: &Axes<'_>, series: &[Series]) -> String {
    let (w, h) = (860.0, 520.0);
    let (left, right, top, bottom) = (90.0, 190.0, 70.0, 70.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let mut xs: Vec<usize> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    xs.sort_unstable();
    xs.dedup();
    let ys: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).filter(|y| *y > 0.0).collect();
    let (lo, hi) = if ys.is_empty() {
        (0.0, 1.0)
    } else {
        let min = ys.iter().copied().fold(f64::INFINITY, f64::min).log10().floor();
        let max = ys.iter().copied().fold(0.0, f64::max).log10().ceil();
        (min, if max > min { max } else { min + 1.0 })
    };
    let x_at = |x: usize| {
        let i = xs.iter().position(|v| *v == x).unwrap_or(0) as f64;
        let n = xs.len().max(2) as f64 - 1.0;
        left + if xs.len() == 1 { pw / 2.0 } else { pw * i / n }
    };
    let y_at = |y: f64| top + ph - ph * (y.max(1e-9).log10() - lo) / (hi - lo);

    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        esc(title)
    );
    let _ = writeln!(
        o,
        r##"<text x="{}" y="44" fill="#555" text-anchor="middle">{}</text>"##,
        left + pw / 2.0,
        esc(subtitle)
    );
    // Grid and y labels: every decade, with 2x and 5x minor lines.
    let mut d = lo;
    while d <= hi + 1e-9 {
        for (m, major) in [(1.0, true), (2.0, false), (5.0, false)] {
            let v = m * 10f64.powf(d);
            if v.log10() > hi + 1e-9 {
                continue;
            }
            let y = y_at(v);
            let stroke = if major { "#ccc" } else { "#eee" };
            let _ = writeln!(o, r#"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="{stroke}"/>"#, left + pw);
            if major || hi - lo <= 2.0 {
                let _ = writeln!(
                    o,
                    r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                    left - 8.0,
                    y + 4.0,
                    esc(&fmt_axis(v))
                );
            }
        }
        d += 1.0;
    }
    // Axes.
    let _ = writeln!(o, r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>"#, top + ph);
    let _ = writeln!(o, r#"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, top + ph, left + pw, top + ph);
    for &x in &xs {
        let px = x_at(x);
        let _ = writeln!(
            o,
            r#"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="black"/>"#,
            top + ph,
            top + ph + 5.0
        );
        let _ = writeln!(o, r#"<text x="{px:.1}" y="{}" text-anchor="middle">{x}</text>"#, top + ph + 20.0);
    }
    let _ =
        writeln!(o, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, left + pw / 2.0, h - 30.0, esc(axes.x));
    let _ = writeln!(
        o,
        r##"<text x="{}" y="{}" fill="#555" font-size="11" text-anchor="middle">{}</text>"##,
        left + pw / 2.0,
        h - 10.0,
        esc(axes.note)
    );
    let _ = writeln!(
        o,
        r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">{}</text>"#,
        top + ph / 2.0,
        top + ph / 2.0,
        esc(axes.y)
    );
    // Lines, points and legend.
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = s.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", x_at(x), y_at(y))).collect();
        let _ = writeln!(o, r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#, pts.join(" "));
        for &(x, y) in &s.points {
            let _ = writeln!(
                o,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{c}"><title>{} @ {x}: {} msgs/s</title></circle>"#,
                x_at(x),
                y_at(y),
                esc(&s.name),
                esc(&fmt_count(y))
            );
        }
        let ly = top + 10.0 + 22.0 * i as f64;
        let lx = left + pw + 20.0;
        let _ =
            writeln!(o, r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"/>"#, lx + 24.0);
        let _ = writeln!(o, r#"<text x="{}" y="{}">{}</text>"#, lx + 30.0, ly + 4.0, esc(&s.name));
    }
    o += "</svg>\n";
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_series() -> Vec<Series> {
        vec![
            Series { name: "rill".into(), points: vec![(1, 30e6), (4, 20e6), (16, 8e6)] },
            Series { name: "tokio<&>".into(), points: vec![(1, 5e6), (4, 2e6), (16, 0.4e6)] },
        ]
    }

    #[test]
    fn svg_has_axes_lines_points_and_legend() {
        let s = svg("fan-out", "probe 180 ns", &two_series());
        assert!(s.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(s.matches("<circle").count(), 6);
        assert!(s.contains(">subscribers</text>"));
        assert!(s.contains("log scale"));
        assert!(s.contains(">rill</text>"));
        assert!(s.contains("tokio&lt;&amp;&gt;"), "legend text is escaped");
        // Decade labels from 100 k to 100 M.
        for label in ["100 k", "1 M", "10 M", "100 M"] {
            assert!(s.contains(&format!(">{label}</text>")), "missing {label}");
        }
        // x ticks for every subscriber count.
        for x in [1, 4, 16] {
            assert!(s.contains(&format!(">{x}</text>")));
        }
        // Tags balance.
        assert_eq!(s.matches("<text").count(), s.matches("</text>").count());
    }

    #[test]
    fn higher_throughput_is_drawn_higher() {
        let s = svg("t", "", &two_series());
        let cy = |needle: &str| -> f64 {
            let at = s.find(needle).unwrap();
            let tail = &s[..at];
            let c = tail.rfind("cy=\"").unwrap();
            tail[c + 4..].split('"').next().unwrap().parse().unwrap()
        };
        assert!(cy("<title>rill @ 1:") < cy("<title>tokio&lt;&amp;&gt; @ 1:"));
    }

    #[test]
    fn axis_labels_drop_trailing_zeros() {
        assert_eq!(fmt_axis(1e6), "1 M");
        assert_eq!(fmt_axis(2e7), "20 M");
        assert_eq!(fmt_axis(5e4), "50 k");
        assert_eq!(fmt_axis(1.5e9), "1.5 G");
        assert_eq!(fmt_axis(100.0), "100");
    }

    #[test]
    fn an_empty_chart_is_still_valid() {
        let s = svg("t", "", &[]);
        assert!(s.contains("</svg>"));
    }
}
