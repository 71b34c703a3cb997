//! A hand-written SVG bar chart: ops/s per variant, with p99 printed on each bar.
//! No plotting crate: a sweep's plot is a handful of rectangles and labels.

use std::fmt::Write;

/// One bar: label, value (ops/s), annotation (e.g. "p99 210 µs"), and whether it is
/// the chosen variant (drawn in another colour).
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub note: String,
    pub best: bool,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Horizontal bars, one row per variant.
pub fn bars(title: &str, unit: &str, bars: &[Bar]) -> String {
    let row = 28.0;
    let left = 330.0;
    let width = 900.0;
    let plot_w = width - left - 160.0;
    let height = 60.0 + row * bars.len() as f64 + 20.0;
    let max = bars
        .iter()
        .map(|b| b.value)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"monospace\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"10\" y=\"22\" font-size=\"15\">{}</text>",
        esc(title)
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"44\" fill=\"#555\">{} (max {max:.0})</text>",
        esc(unit)
    );
    for (i, b) in bars.iter().enumerate() {
        let y = 56.0 + row * i as f64;
        let w = (b.value.max(0.0) / max * plot_w).max(1.0);
        let fill = if b.best { "#2a9d4b" } else { "#4a78c2" };
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            left - 8.0,
            y + 16.0,
            esc(&b.label)
        );
        let _ = writeln!(
            s,
            "<rect x=\"{left}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{fill}\"><title>{}</title></rect>",
            row - 6.0,
            esc(&format!("{}: {:.0} {}", b.label, b.value, b.note))
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\">{:.0}  {}</text>",
            left + w + 6.0,
            y + 16.0,
            b.value,
            esc(&b.note)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rect_per_bar_and_escaped_labels() {
        let svg = bars(
            "t<1>",
            "ops/s",
            &[
                Bar {
                    label: "a=\"x\"".into(),
                    value: 10.0,
                    note: "p99 5 µs".into(),
                    best: false,
                },
                Bar {
                    label: "b".into(),
                    value: 20.0,
                    note: String::new(),
                    best: true,
                },
            ],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert!(svg.contains("t&lt;1&gt;") && svg.contains("a=&quot;x&quot;"));
        assert!(svg.contains("#2a9d4b"));
    }
}
