//! Parsing the Prometheus text format (just what the gateway emits: no escapes in
//! label values, no timestamps needed) and summing series by label.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A scrape: every sample, in order.
#[derive(Debug, Default, Clone)]
pub struct Scrape {
    pub samples: Vec<Sample>,
}

fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().trim_start_matches(',').trim();
        let after = rest[eq + 1..].strip_prefix('"')?;
        // Values with escaped quotes are not produced by the gateway; stop at `"`.
        let end = after.find('"')?;
        out.insert(key.to_string(), after[..end].to_string());
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(out)
}

impl Scrape {
    /// Parses exposition text; lines that are not samples are skipped.
    pub fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = match line.find('}') {
                Some(close) => (&line[..=close], line[close + 1..].trim()),
                None => match line.split_once(' ') {
                    Some((a, b)) => (a, b.trim()),
                    None => continue,
                },
            };
            let value = value.split(' ').next().unwrap_or_default();
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => match parse_labels(l.trim_end_matches('}')) {
                    Some(l) => (n, l),
                    None => continue,
                },
                None => (series, BTreeMap::new()),
            };
            samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
        Scrape { samples }
    }

    /// Samples of `name` whose labels include every `(key, value)` of `with`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        with: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && with
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The sum of `name` over the series matching `with`.
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.matching(name, with).map(|s| s.value).sum()
    }

    /// Distinct values of label `key` on `name`, sorted.
    pub fn label_values(&self, name: &str, key: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .filter_map(|s| s.labels.get(key).cloned())
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_samples_and_sums() {
        let s = Scrape::parse(
            "# HELP x y\n# TYPE nfsgw_ops_total counter\n\
             nfsgw_ops_total{reactor=\"0\",transport=\"tcp\",proc=\"GETATTR\"} 5\n\
             nfsgw_ops_total{reactor=\"1\",transport=\"tcp\",proc=\"GETATTR\"} 7\n\
             nfsgw_ops_total{reactor=\"1\",transport=\"rdma\",proc=\"READ\"} 1e3\n\
             nfsgw_reactors 2\n\
             nfsgw_h_bucket{le=\"+Inf\"} 3\n\
             broken{a=\"1\" x\n",
        );
        assert_eq!(s.sum("nfsgw_ops_total", &[]), 1012.0);
        assert_eq!(s.sum("nfsgw_ops_total", &[("proc", "GETATTR")]), 12.0);
        assert_eq!(s.sum("nfsgw_ops_total", &[("transport", "rdma")]), 1000.0);
        assert_eq!(s.sum("nfsgw_reactors", &[]), 2.0);
        assert_eq!(s.sum("nfsgw_h_bucket", &[("le", "+Inf")]), 3.0);
        assert_eq!(s.label_values("nfsgw_ops_total", "reactor"), vec!["0", "1"]);
        assert_eq!(s.samples.len(), 5);
    }
}
