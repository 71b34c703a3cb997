//! Record marking (RFC 5531 §11) as a sans-IO decoder: bytes in, events out.
//!
//! A record is a sequence of fragments; each fragment is a 4-byte big-endian header
//! (top bit = last fragment, low 31 bits = fragment length) followed by that many body
//! bytes. The decoder holds no buffers: it reports fragment headers (so the caller can
//! size the record buffer before the body arrives), which input bytes are body, and
//! where records end. The caller copies body bytes wherever it likes — from a staging
//! buffer, or by reading the socket straight into the record buffer and reporting the
//! count with [`RecordDecoder::body_read`].

/// Top bit of a fragment header: this fragment ends the record.
pub const LAST_FRAGMENT: u32 = 0x8000_0000;

/// What one [`RecordDecoder::decode`] step found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A fragment header: `len` body bytes follow. `record_len` is the record's length
    /// counting this fragment; the record buffer must now hold that many bytes.
    Fragment {
        len: usize,
        record_len: usize,
        last: bool,
    },
    /// The first `n` bytes of the input are body bytes of the current record.
    Body(usize),
    /// The current record is complete (all its fragments' bodies were delivered).
    Record,
}

/// A framing error; the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// A fragment header takes the record past the limit.
    TooLarge { record_len: usize, max: usize },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { record_len, max } => write!(
                f,
                "record of at least {record_len} bytes exceeds the {max}-byte limit"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a fragment header (`hdr_have` of 4 bytes so far).
    Header,
    /// Expecting `frag_left` more body bytes of the current fragment.
    Body,
    /// The last fragment's body is complete; the next step reports `Record`.
    End,
}

/// Decodes record marks from a byte stream. See the module docs.
#[derive(Debug, Clone)]
pub struct RecordDecoder {
    max_record: usize,
    state: State,
    hdr: [u8; 4],
    hdr_have: u8,
    frag_left: usize,
    last: bool,
    record_len: usize,
    /// Some byte of the current record has been consumed.
    in_record: bool,
}

impl RecordDecoder {
    pub fn new(max_record: usize) -> RecordDecoder {
        RecordDecoder {
            max_record,
            state: State::Header,
            hdr: [0; 4],
            hdr_have: 0,
            frag_left: 0,
            last: false,
            record_len: 0,
            in_record: false,
        }
    }

    /// One step over `input`: returns how many input bytes were consumed and the event,
    /// if any. `(0, None)` means more input is needed (and `input` was empty); a partial
    /// header is consumed into the decoder and reported as `(n, None)`.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, Option<Event>), FrameError> {
        match self.state {
            State::End => Ok((0, Some(self.finish_record()))),
            State::Body => Ok(self.body(input)),
            State::Header => self.header(input),
        }
    }

    /// Rule: a record ends after the body of a fragment marked last; reset for the next.
    fn finish_record(&mut self) -> Event {
        self.state = State::Header;
        self.record_len = 0;
        self.in_record = false;
        Event::Record
    }

    /// Rule: body bytes belong to the current fragment until its length is used up.
    fn body(&mut self, input: &[u8]) -> (usize, Option<Event>) {
        let n = input.len().min(self.frag_left);
        if n == 0 {
            return (0, None);
        }
        self.body_read(n);
        (n, Some(Event::Body(n)))
    }

    /// Rule: a header is 4 big-endian bytes (possibly split across reads); its length
    /// may not take the record past `max_record`; zero-length fragments are allowed.
    fn header(&mut self, input: &[u8]) -> Result<(usize, Option<Event>), FrameError> {
        let take = input.len().min(4 - self.hdr_have as usize);
        let at = self.hdr_have as usize;
        self.hdr[at..at + take].copy_from_slice(&input[..take]);
        self.hdr_have += take as u8;
        self.in_record |= take > 0;
        if self.hdr_have < 4 {
            return Ok((take, None));
        }
        self.hdr_have = 0;
        let word = u32::from_be_bytes(self.hdr);
        let len = (word & !LAST_FRAGMENT) as usize;
        let record_len = self.record_len.saturating_add(len);
        if record_len > self.max_record {
            return Err(FrameError::TooLarge {
                record_len,
                max: self.max_record,
            });
        }
        self.record_len = record_len;
        self.last = word & LAST_FRAGMENT != 0;
        self.frag_left = len;
        self.state = self.after_body();
        let ev = Event::Fragment {
            len,
            record_len,
            last: self.last,
        };
        Ok((take, Some(ev)))
    }

    /// The state once the current fragment's body is complete (or now, if empty).
    fn after_body(&self) -> State {
        match (self.frag_left, self.last) {
            (0, true) => State::End,
            (0, false) => State::Header,
            _ => State::Body,
        }
    }

    /// The caller placed `n` body bytes of the current fragment itself (e.g. read the
    /// socket straight into the record buffer). `n` must not exceed [`Self::body_left`].
    pub fn body_read(&mut self, n: usize) {
        assert!(n <= self.frag_left, "body_read beyond the fragment");
        self.frag_left -= n;
        self.state = self.after_body();
    }

    /// Body bytes still expected in the current fragment (0 while a header is expected).
    pub fn body_left(&self) -> usize {
        if self.state == State::Body {
            self.frag_left
        } else {
            0
        }
    }

    /// Whether no byte of an unfinished record is held (between records).
    pub fn at_boundary(&self) -> bool {
        !self.in_record
    }

    /// Body length of the current record counting every header seen so far.
    pub fn record_len(&self) -> usize {
        self.record_len
    }

    pub fn max_record(&self) -> usize {
        self.max_record
    }
}

/// Writes a single-fragment record mark for a body of `body_len` bytes.
pub fn mark(body_len: usize) -> [u8; 4] {
    debug_assert!(body_len <= (!LAST_FRAGMENT) as usize);
    (LAST_FRAGMENT | body_len as u32).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reference driver: feeds `chunks` and collects records and the first error.
    fn run(max: usize, chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Option<FrameError>, RecordDecoder) {
        let mut d = RecordDecoder::new(max);
        let mut records = Vec::new();
        let mut cur: Vec<u8> = Vec::new();
        for chunk in chunks {
            let mut input = *chunk;
            loop {
                match d.decode(input) {
                    Err(e) => return (records, Some(e), d),
                    Ok((0, None)) => break,
                    Ok((n, ev)) => {
                        match ev {
                            Some(Event::Body(k)) => {
                                assert_eq!(k, n);
                                cur.extend_from_slice(&input[..k]);
                            }
                            Some(Event::Record) => {
                                assert_eq!(n, 0);
                                records.push(std::mem::take(&mut cur));
                            }
                            Some(Event::Fragment { record_len, .. }) => {
                                assert!(record_len >= cur.len());
                            }
                            None => assert!(n > 0),
                        }
                        input = &input[n..];
                    }
                }
            }
        }
        (records, None, d)
    }

    fn frag(body: &[u8], last: bool) -> Vec<u8> {
        let mut v = ((body.len() as u32) | if last { LAST_FRAGMENT } else { 0 })
            .to_be_bytes()
            .to_vec();
        v.extend_from_slice(body);
        v
    }

    /// A stream of three records: single fragment, three fragments incl. an empty
    /// one, and an empty record.
    fn sample() -> (Vec<u8>, Vec<Vec<u8>>) {
        let a: Vec<u8> = (0..37u8).collect();
        let b1: Vec<u8> = (100..110u8).collect();
        let b3: Vec<u8> = (200..255u8).collect();
        let mut s = frag(&a, true);
        s.extend(frag(&b1, false));
        s.extend(frag(&[], false));
        s.extend(frag(&b3, true));
        s.extend(frag(&[], true));
        let mut b = b1.clone();
        b.extend(&b3);
        (s, vec![a, b, vec![]])
    }

    #[test]
    fn whole_stream_at_once() {
        let (s, want) = sample();
        let (got, err, d) = run(1 << 20, &[&s]);
        assert_eq!(err, None);
        assert_eq!(got, want);
        assert!(d.at_boundary());
    }

    #[test]
    fn split_at_every_byte_boundary() {
        let (s, want) = sample();
        for i in 0..=s.len() {
            let (got, err, d) = run(1 << 20, &[&s[..i], &s[i..]]);
            assert_eq!(err, None, "split at {i}");
            assert_eq!(got, want, "split at {i}");
            assert!(d.at_boundary());
        }
        for i in 0..=s.len() {
            for j in i..=s.len() {
                let (got, _, _) = run(1 << 20, &[&s[..i], &s[i..j], &s[j..]]);
                assert_eq!(got, want, "split at {i},{j}");
            }
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let (s, want) = sample();
        let chunks: Vec<&[u8]> = s.chunks(1).collect();
        let (got, err, _) = run(1 << 20, &chunks);
        assert_eq!(err, None);
        assert_eq!(got, want);
    }

    #[test]
    fn fragment_events_report_running_record_length() {
        let mut s = frag(&[1; 5], false);
        s.extend(frag(&[2; 7], true));
        let mut d = RecordDecoder::new(100);
        let (n, ev) = d.decode(&s).unwrap();
        assert_eq!(n, 4);
        assert_eq!(
            ev,
            Some(Event::Fragment {
                len: 5,
                record_len: 5,
                last: false
            })
        );
        assert_eq!(d.body_left(), 5);
        assert_eq!(d.decode(&s[4..]).unwrap(), (5, Some(Event::Body(5))));
        assert_eq!(
            d.decode(&s[9..]).unwrap(),
            (
                4,
                Some(Event::Fragment {
                    len: 7,
                    record_len: 12,
                    last: true
                })
            )
        );
        assert_eq!(d.decode(&s[13..]).unwrap(), (7, Some(Event::Body(7))));
        assert!(!d.at_boundary());
        assert_eq!(d.decode(&[]).unwrap(), (0, Some(Event::Record)));
        assert!(d.at_boundary());
        assert_eq!(d.decode(&[]).unwrap(), (0, None));
    }

    #[test]
    fn body_read_directly_by_caller() {
        let mut d = RecordDecoder::new(100);
        let (_, ev) = d.decode(&mark(10)).unwrap();
        assert!(matches!(ev, Some(Event::Fragment { len: 10, .. })));
        d.body_read(6);
        assert_eq!(d.body_left(), 4);
        d.body_read(4);
        assert_eq!(d.body_left(), 0);
        assert_eq!(d.decode(&[]).unwrap(), (0, Some(Event::Record)));
    }

    #[test]
    fn exact_limit_accepted_one_more_rejected() {
        let body = vec![9u8; 64];
        let (got, err, _) = run(64, &[&frag(&body, true)]);
        assert_eq!(err, None);
        assert_eq!(got, vec![body.clone()]);
        let (got, err, _) = run(63, &[&frag(&body, true)]);
        assert!(got.is_empty());
        assert_eq!(
            err,
            Some(FrameError::TooLarge {
                record_len: 64,
                max: 63
            })
        );
    }

    #[test]
    fn oversize_across_fragments_rejected_at_the_header() {
        let mut s = frag(&[1; 40], false);
        s.extend(frag(&[2; 40], true));
        let (got, err, d) = run(64, &[&s]);
        assert!(got.is_empty());
        assert_eq!(
            err,
            Some(FrameError::TooLarge {
                record_len: 80,
                max: 64
            })
        );
        // The first fragment was accepted; the error came at the second header.
        assert_eq!(d.record_len(), 40);
    }

    #[test]
    fn huge_header_rejected_without_waiting_for_body() {
        let (_, err, _) = run(1 << 20, &[&[0xff, 0xff, 0xff, 0xff]]);
        assert!(matches!(err, Some(FrameError::TooLarge { .. })));
        let (_, err, _) = run(1 << 20, &[&[0x7f, 0xff, 0xff, 0xff]]);
        assert!(matches!(err, Some(FrameError::TooLarge { .. })));
    }

    #[test]
    fn endless_empty_non_last_fragments_do_not_grow() {
        let mut s = Vec::new();
        for _ in 0..1000 {
            s.extend(frag(&[], false));
        }
        let (got, err, d) = run(16, &[&s]);
        assert!(got.is_empty());
        assert_eq!(err, None);
        assert_eq!(d.record_len(), 0);
        assert!(!d.at_boundary());
    }

    #[test]
    fn partial_header_is_not_a_boundary() {
        let mut d = RecordDecoder::new(100);
        assert!(d.at_boundary());
        assert_eq!(d.decode(&[0x80]).unwrap(), (1, None));
        assert!(!d.at_boundary());
    }

    #[test]
    fn garbage_never_panics_and_stays_consistent() {
        // A deterministic xorshift stream of garbage, fed in odd-sized chunks.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let len = (next() % 300) as usize;
            let mut g: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Bias some headers towards small lengths so records actually complete.
            if round % 2 == 0 && g.len() >= 4 {
                g[0] &= 0x80;
                g[1] = 0;
                g[2] = 0;
                g[3] %= 16;
            }
            let split = (next() as usize) % (g.len() + 1);
            let (got, err, d) = run(256, &[&g[..split], &g[split..]]);
            let delivered: usize = got.iter().map(|r| r.len() + 4).sum();
            assert!(delivered <= g.len(), "round {round}");
            if let Some(FrameError::TooLarge { record_len, max }) = err {
                assert!(record_len > max);
            }
            assert!(d.record_len() <= 256);
        }
    }

    #[test]
    fn mark_is_last_fragment_with_length() {
        assert_eq!(mark(0), [0x80, 0, 0, 0]);
        assert_eq!(mark(0x0102_0304), [0x81, 0x02, 0x03, 0x04]);
    }
}
