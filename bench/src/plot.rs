//! `--plot FILE.svg`: the latency-percentile plot, as plain SVG.
//!
//! x is the percentile on the usual "nines" scale: position `log10(1 / (1 - q))`, so
//! 0%, 90%, 99%, 99.9%, 99.99% and 99.999% are evenly spaced and the tail gets as much
//! room as the body. y is latency in microseconds (linear, from 0). One line per op
//! type. Read it left to right: flat and low is good; where a line turns up is where the
//! slow calls start.

use crate::stats::OpStats;
use std::fmt::Write as _;

const W: f64 = 900.0;
const H: f64 = 540.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
/// Nines on the x axis (99.999%).
const NINES: f64 = 5.0;
const POINTS: usize = 400;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// The quantile at x position `n` nines (0 → 0, 1 → 0.9, 2 → 0.99, ...).
pub fn quantile_at(n: f64) -> f64 {
    1.0 - 10f64.powf(-n)
}

/// A round axis step giving about `ticks` ticks up to `max`.
pub fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The SVG document for `series` (name, stats) titled `title`.
pub fn svg(title: &str, series: &[(&str, &OpStats)]) -> String {
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let curves: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .filter(|(_, s)| !s.hist.is_empty())
        .map(|(name, s)| {
            let pts = (0..=POINTS)
                .map(|i| {
                    let n = NINES * i as f64 / POINTS as f64;
                    let us = s.hist.value_at_quantile(quantile_at(n)) as f64 / 1000.0;
                    (n, us)
                })
                .collect();
            (*name, pts)
        })
        .collect();
    let ymax_data = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let step = nice_step(ymax_data, 6.0);
    let ymax = (ymax_data / step).ceil() * step;
    let x = |n: f64| LEFT + n / NINES * pw;
    let y = |us: f64| TOP + ph - us / ymax * ph;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(o, "<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>");
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">{}</text>",
        W / 2.0,
        esc(title)
    );
    // Grid, ticks and tick labels.
    for i in 0..=NINES as usize {
        let xi = x(i as f64);
        let label = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"][i];
        let _ = writeln!(
            o,
            "<line x1=\"{xi:.1}\" y1=\"{TOP}\" x2=\"{xi:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{xi:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            TOP + ph,
            TOP + ph + 18.0
        );
    }
    let mut v = 0.0;
    while v <= ymax + step / 2.0 {
        let yi = y(v);
        let _ = writeln!(
            o,
            "<line x1=\"{LEFT}\" y1=\"{yi:.1}\" x2=\"{:.1}\" y2=\"{yi:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT + pw,
            LEFT - 6.0,
            yi + 4.0,
            fmt_tick(v)
        );
        v += step;
    }
    // Axes and their labels.
    let _ = writeln!(
        o,
        "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{:.1}\" stroke=\"black\"/>\
         <line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>",
        TOP + ph,
        TOP + ph,
        LEFT + pw,
        TOP + ph
    );
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">percentile</text>",
        LEFT + pw / 2.0,
        H - 15.0
    );
    let _ = writeln!(
        o,
        "<text transform=\"translate(20 {:.1}) rotate(-90)\" text-anchor=\"middle\">latency (µs)</text>",
        TOP + ph / 2.0
    );
    // One line per op type, and the legend.
    for (i, (name, pts)) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let d: Vec<String> = pts
            .iter()
            .map(|&(n, us)| format!("{:.1},{:.1}", x(n), y(us)))
            .collect();
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            d.join(" ")
        );
        let ly = TOP + 14.0 + 18.0 * i as f64;
        let _ = writeln!(
            o,
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{color}\" stroke-width=\"3\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            LEFT + 12.0,
            LEFT + 36.0,
            LEFT + 42.0,
            ly + 4.0,
            esc(name)
        );
    }
    o.push_str("</svg>\n");
    o
}

fn fmt_tick(v: f64) -> String {
    if v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_arithmetic() {
        assert_eq!(quantile_at(0.0), 0.0);
        assert!((quantile_at(2.0) - 0.99).abs() < 1e-12);
        assert!((quantile_at(5.0) - 0.99999).abs() < 1e-12);
        assert_eq!(nice_step(100.0, 5.0), 20.0);
        assert_eq!(nice_step(7.0, 6.0), 2.0);
        assert_eq!(nice_step(3000.0, 6.0), 500.0);
    }

    #[test]
    fn the_plot_has_axes_lines_and_a_legend() {
        let mut a = OpStats::default();
        let mut b = OpStats::default();
        for i in 1..1000u64 {
            a.record(i * 1000);
            b.record(i * 3000);
        }
        let s = svg(
            "randread <test>",
            &[("read", &a), ("write", &b), ("none", &OpStats::default())],
        );
        assert!(s.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains(">99.9%<") && s.contains(">latency (µs)<"));
        assert!(s.contains(">read<") && s.contains(">write<") && !s.contains(">none<"));
        assert!(s.contains("&lt;test&gt;"));
    }
}
