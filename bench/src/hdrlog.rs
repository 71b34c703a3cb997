//! `--hdr-log FILE`: an HdrHistogram interval log (the format of the Java
//! `HistogramLogWriter`, readable by HistogramLogAnalyzer and the hdrhistogram crates):
//! one line per op type per second, tagged with the op type, values in nanoseconds,
//! timestamps in seconds since the `BaseTime` header (the end of the warm-up).

use crate::stats::Stats;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use std::io::{BufWriter, Write};
use std::time::{Duration, SystemTime};

pub struct HdrLog {
    out: BufWriter<std::fs::File>,
    ser: V2DeflateSerializer,
}

impl HdrLog {
    /// Creates the file and writes the header; `base` is wall-clock time of interval 0.
    pub fn create(path: &std::path::Path, base: SystemTime, what: &str) -> anyhow::Result<HdrLog> {
        let f = std::fs::File::create(path)
            .map_err(|e| anyhow::anyhow!("--hdr-log {}: {e}", path.display()))?;
        let mut log = HdrLog {
            out: BufWriter::new(f),
            ser: V2DeflateSerializer::new(),
        };
        IntervalLogWriterBuilder::new()
            .add_comment(&format!("nfsgw bench: {what}"))
            .add_comment("latency values in nanoseconds; one interval per second per op type (Tag)")
            .with_start_time(base)
            .with_base_time(base)
            .begin_log_with(&mut log.out, &mut log.ser)?;
        writeln!(
            log.out,
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        )?;
        Ok(log)
    }

    /// Writes interval `index` (seconds since BaseTime), `len` long: one line per op
    /// type that completed calls in it.
    pub fn write(&mut self, index: u64, len: Duration, stats: &Stats) -> anyhow::Result<()> {
        // A header-less writer: the builder writes nothing when nothing is configured.
        let mut w = IntervalLogWriterBuilder::new().begin_log_with(&mut self.out, &mut self.ser)?;
        for (k, s) in stats.iter() {
            if s.hist.is_empty() {
                continue;
            }
            w.write_histogram(&s.hist, Duration::from_secs(index), len, Tag::new(k.name()))
                .map_err(|e| anyhow::anyhow!("writing the interval log: {e:?}"))?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> anyhow::Result<()> {
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Kind;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;

    #[test]
    fn the_log_parses_back() {
        let dir = std::env::temp_dir().join(format!("bench-hdrlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.hlog");
        let mut log = HdrLog::create(&path, SystemTime::now(), "test").unwrap();
        let mut st = Stats::default();
        st.kind(Kind::Read).record(5_000);
        st.kind(Kind::Write).record(7_000);
        log.write(0, Duration::from_secs(1), &st).unwrap();
        log.write(1, Duration::from_millis(500), &Stats::default())
            .unwrap();
        log.finish().unwrap();
        let text = std::fs::read(&path).unwrap();
        let mut tags = Vec::new();
        for e in IntervalLogIterator::new(&text) {
            if let LogEntry::Interval(h) = e.unwrap() {
                tags.push(h.tag().unwrap().as_str().to_string());
                let bytes = base64_decode(h.encoded_histogram());
                let hist: hdrhistogram::Histogram<u64> =
                    Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
                assert_eq!(hist.len(), 1);
            }
        }
        assert_eq!(tags, vec!["read", "write"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        let val = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            _ => 63,
        };
        let b: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(val).collect();
        b.chunks(4)
            .flat_map(|c| {
                let n = c.iter().fold(0u32, |a, &x| a << 6 | x as u32) << (6 * (4 - c.len()));
                let bytes = n.to_be_bytes();
                bytes[1..c.len()].to_vec()
            })
            .collect()
    }
}
