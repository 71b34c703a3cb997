//! Write-back staging against an in-memory store that can fail on command.

use super::stage::{Spill, Store, WriteBack, CHUNK};
use crate::backend::{BResult, BackendError, ObjectMeta, UserMeta};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PART: usize = 5 << 20;

/// Open multipart uploads: id -> (key, metadata, parts by index).
type Uploads = HashMap<String, (String, UserMeta, HashMap<usize, Vec<u8>>)>;

#[derive(Default)]
struct Fake {
    objects: Mutex<HashMap<String, (Vec<u8>, UserMeta)>>,
    uploads: Mutex<Uploads>,
    next_id: AtomicUsize,
    /// Fail this many part uploads (then succeed).
    fail_parts: AtomicUsize,
    /// The next this many part uploads find their upload aborted just before them.
    vanish_parts: AtomicUsize,
    /// Calls that named an upload the store does not have (NoSuchUpload).
    no_such_upload: AtomicUsize,
    puts: AtomicUsize,
    parts: AtomicUsize,
    gets: AtomicUsize,
}

impl Store for Fake {
    fn head(&self, key: &str) -> BResult<ObjectMeta> {
        let o = self.objects.lock().unwrap();
        let (d, m) = o.get(key).ok_or(BackendError::NotFound)?;
        Ok(ObjectMeta {
            key: key.into(),
            size: d.len() as u64,
            mtime_ns: 1,
            etag: "e".into(),
            user: m.clone(),
        })
    }
    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        let o = self.objects.lock().unwrap();
        let (d, _) = o.get(key).ok_or(BackendError::NotFound)?;
        let from = (offset as usize).min(d.len());
        let n = dst.len().min(d.len() - from);
        dst[..n].copy_from_slice(&d[from..from + n]);
        Ok(n)
    }
    fn put(&self, key: &str, data: Bytes, meta: &UserMeta) -> BResult<ObjectMeta> {
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.objects
            .lock()
            .unwrap()
            .insert(key.into(), (data.to_vec(), meta.clone()));
        self.head(key)
    }
    fn mp_create(&self, key: &str, meta: &UserMeta) -> BResult<String> {
        let id = format!("u{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        self.uploads
            .lock()
            .unwrap()
            .insert(id.clone(), (key.into(), meta.clone(), HashMap::new()));
        Ok(id)
    }
    fn mp_part(&self, _key: &str, id: &str, idx: usize, data: Bytes) -> BResult<String> {
        if take_one(&self.fail_parts) {
            return Err(BackendError::Retryable("injected 503".into()));
        }
        let mut u = self.uploads.lock().unwrap();
        if take_one(&self.vanish_parts) {
            u.remove(id);
        }
        let Some(up) = u.get_mut(id) else {
            self.no_such_upload.fetch_add(1, Ordering::Relaxed);
            return Err(BackendError::NotFound);
        };
        self.parts.fetch_add(1, Ordering::Relaxed);
        up.2.insert(idx, data.to_vec());
        Ok(format!("p{idx}"))
    }
    fn mp_complete(&self, key: &str, id: &str, etags: Vec<String>) -> BResult<()> {
        let Some((k, meta, parts)) = self.uploads.lock().unwrap().remove(id) else {
            self.no_such_upload.fetch_add(1, Ordering::Relaxed);
            return Err(BackendError::NotFound);
        };
        assert_eq!(k, key);
        let mut data = Vec::new();
        for (i, e) in etags.iter().enumerate() {
            assert_eq!(e, &format!("p{i}"), "parts complete in order");
            let p = &parts[&i];
            if i + 1 < etags.len() {
                assert!(p.len() >= 5 << 20, "only the last part may be small");
            }
            data.extend_from_slice(p);
        }
        self.objects
            .lock()
            .unwrap()
            .insert(key.into(), (data, meta));
        Ok(())
    }
    fn mp_abort(&self, _key: &str, id: &str) {
        self.uploads.lock().unwrap().remove(id);
    }
}

/// Counts down `n`; true when it was positive.
fn take_one(n: &AtomicUsize) -> bool {
    n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

impl Fake {
    /// What a lifecycle rule (or AbortMultipartUpload by anyone) does.
    fn abort_all(&self) {
        self.uploads.lock().unwrap().clear();
    }
}

fn setup(budget_mib: usize) -> (Arc<Fake>, WriteBack) {
    let f = Arc::new(Fake::default());
    f.objects
        .lock()
        .unwrap()
        .insert("new".into(), (Vec::new(), UserMeta::new()));
    let wb = WriteBack::new(f.clone(), PART, budget_mib << 20, Duration::ZERO, None);
    (f, wb)
}

fn pattern(off: u64, n: usize) -> Vec<u8> {
    (0..n as u64).map(|i| ((off + i) * 7 % 251) as u8).collect()
}

fn object(f: &Fake, key: &str) -> Vec<u8> {
    f.objects.lock().unwrap()[key].0.clone()
}

#[test]
fn sequential_writes_stream_parts_and_commit_completes() {
    let (f, wb) = setup(64);
    let total = 3 * PART + 12345;
    let bs = 256 << 10;
    let mut off = 0;
    while off < total {
        let n = bs.min(total - off);
        wb.write_at("new", off as u64, &pattern(off as u64, n))
            .unwrap();
        off += n;
    }
    // Three full parts went out while writing; memory holds about one part.
    assert_eq!(f.parts.load(Ordering::Relaxed), 3);
    assert!(wb.used() < PART + CHUNK as usize * 2, "{}", wb.used());
    // Not visible in the store before the sync (UNSTABLE), visible through the stage.
    assert_eq!(object(&f, "new").len(), 0);
    assert_eq!(wb.overlay("new").unwrap().size, total as u64);
    let mut buf = vec![0u8; 100];
    wb.read("new", (3 * PART + 10) as u64, &mut buf)
        .unwrap()
        .unwrap();
    assert_eq!(buf, pattern((3 * PART + 10) as u64, 100));
    wb.sync("new").unwrap();
    assert_eq!(object(&f, "new"), pattern(0, total));
    assert_eq!(wb.used(), 0);
    assert!(wb.overlay("new").is_none());
}

#[test]
fn small_file_is_one_put_with_its_metadata() {
    let (f, wb) = setup(64);
    let mut m = UserMeta::new();
    m.insert("mode".into(), "100600".into());
    f.objects
        .lock()
        .unwrap()
        .insert("s".into(), (Vec::new(), m.clone()));
    wb.write_at("s", 10, b"hello").unwrap();
    wb.sync("s").unwrap();
    assert_eq!(f.puts.load(Ordering::Relaxed), 1);
    assert_eq!(f.parts.load(Ordering::Relaxed), 0);
    let (d, meta) = f.objects.lock().unwrap()["s"].clone();
    assert_eq!(d, b"\0\0\0\0\0\0\0\0\0\0hello");
    assert_eq!(meta, m);
}

#[test]
fn overwrite_of_an_existing_object_is_read_modify_write() {
    let (f, wb) = setup(64);
    let base = pattern(0, 2 * PART + 100);
    f.objects
        .lock()
        .unwrap()
        .insert("big".into(), (base.clone(), UserMeta::new()));
    wb.write_at("big", 7, b"XYZ").unwrap();
    wb.write_at("big", (PART + 3) as u64, b"Q").unwrap();
    // Reads merge stage and base.
    let mut buf = [0u8; 12];
    wb.read("big", 4, &mut buf).unwrap().unwrap();
    assert_eq!(&buf[..3], &base[4..7]);
    assert_eq!(&buf[3..6], b"XYZ");
    assert_eq!(&buf[6..], &base[10..16]);
    wb.sync("big").unwrap();
    let mut want = base;
    want[7..10].copy_from_slice(b"XYZ");
    want[PART + 3] = b'Q';
    assert_eq!(object(&f, "big"), want);
}

#[test]
fn truncate_and_extend_through_the_stage() {
    let (f, wb) = setup(64);
    f.objects
        .lock()
        .unwrap()
        .insert("t".into(), (b"abcdefgh".to_vec(), UserMeta::new()));
    wb.set_size("t", 3).unwrap();
    wb.write_at("t", 5, b"Z").unwrap();
    wb.sync("t").unwrap();
    assert_eq!(object(&f, "t"), b"abc\0\0Z");
    wb.set_size("t", 0).unwrap();
    wb.sync("t").unwrap();
    assert_eq!(object(&f, "t"), b"");
}

#[test]
fn sizes_past_the_store_limit_are_refused_up_front() {
    let (f, wb) = setup(64);
    f.objects
        .lock()
        .unwrap()
        .insert("h".into(), (b"abc".to_vec(), UserMeta::new()));
    let max = PART as u64 * 10_000;
    for size in [u64::MAX, 1 << 62, max + 1] {
        assert_eq!(wb.set_size("h", size), Err(BackendError::NoSpace), "{size}");
    }
    assert_eq!(wb.write_at("h", max, b"x"), Err(BackendError::NoSpace));
    assert_eq!(wb.write_at("h", u64::MAX, b"x"), Err(BackendError::NoSpace));
    // Nothing was staged: the sync uploads nothing and the object is unchanged.
    wb.sync("h").unwrap();
    assert_eq!(object(&f, "h"), b"abc");
    wb.set_size("h", 5).unwrap();
    wb.sync("h").unwrap();
    assert_eq!(object(&f, "h"), b"abc\0\0");
}

#[test]
fn failed_part_is_kept_and_retried_by_the_sync() {
    let (f, wb) = setup(64);
    f.fail_parts.store(1, Ordering::Relaxed);
    let data = pattern(0, 2 * PART + 1);
    // The WRITE that fills a part still succeeds: the bytes are kept.
    wb.write_at("new", 0, &data).unwrap();
    assert_eq!(f.parts.load(Ordering::Relaxed), 1);
    wb.sync("new").unwrap();
    assert_eq!(object(&f, "new"), data);
}

#[test]
fn sync_failure_keeps_everything_for_the_next_sync() {
    let (f, wb) = setup(64);
    let data = pattern(0, PART + 10);
    wb.write_at("new", 0, &data).unwrap();
    f.fail_parts.store(1, Ordering::Relaxed);
    assert!(matches!(wb.sync("new"), Err(BackendError::Retryable(_))));
    assert_eq!(object(&f, "new").len(), 0, "nothing half-visible");
    assert!(wb.overlay("new").is_some());
    wb.sync("new").unwrap();
    assert_eq!(object(&f, "new"), data);
}

#[test]
fn rewrite_below_a_streamed_part_completes_then_continues() {
    let (f, wb) = setup(64);
    let data = pattern(0, PART + 100);
    wb.write_at("new", 0, &data).unwrap();
    assert_eq!(f.parts.load(Ordering::Relaxed), 1);
    wb.write_at("new", 1, b"!").unwrap();
    // The streamed upload was completed; the rewrite stages over it.
    assert_eq!(object(&f, "new"), data);
    let mut b = [0u8; 3];
    wb.read("new", 0, &mut b).unwrap().unwrap();
    assert_eq!(b, [data[0], b'!', data[2]]);
    wb.sync("new").unwrap();
    let mut want = data;
    want[1] = b'!';
    assert_eq!(object(&f, "new"), want);
}

#[test]
fn full_buffer_uploads_early() {
    let (f, wb) = setup(16);
    // Random (non-streamable) writes over a base fill the buffer.
    f.objects
        .lock()
        .unwrap()
        .insert("r".into(), (vec![1u8; 40 << 20], UserMeta::new()));
    for i in 0..20u64 {
        wb.write_at("r", i * (2 << 20), b"x").unwrap();
    }
    assert!(wb.used() <= 16 << 20, "{}", wb.used());
    assert!(f.parts.load(Ordering::Relaxed) + f.puts.load(Ordering::Relaxed) > 0);
    wb.sync("r").unwrap();
    let o = object(&f, "r");
    for i in 0..20usize {
        assert_eq!(o[i * (2 << 20)], b'x');
        assert_eq!(o[i * (2 << 20) + 1], 1);
    }
}

#[test]
fn discard_forgets_and_aborts() {
    let (f, wb) = setup(64);
    wb.write_at("new", 0, &pattern(0, PART + 1)).unwrap();
    wb.discard("new");
    assert_eq!(wb.used(), 0);
    assert!(f.uploads.lock().unwrap().is_empty());
    assert!(wb.overlay("new").is_none());
}

#[test]
fn write_to_a_missing_object_is_not_found() {
    let (_f, wb) = setup(64);
    assert_eq!(wb.write_at("none", 0, b"x"), Err(BackendError::NotFound));
}

#[test]
fn past_the_budget_chunks_spill_to_disk_instead_of_uploading_early() {
    let f = Arc::new(Fake::default());
    f.objects
        .lock()
        .unwrap()
        .insert("r".into(), (vec![1u8; 40 << 20], UserMeta::new()));
    let dir = tempfile::tempdir().unwrap();
    let spill = Spill::open(dir.path()).unwrap();
    // The spill file is unlinked at once: nothing is left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let wb = WriteBack::new(f.clone(), PART, 16 << 20, Duration::ZERO, Some(spill));
    for i in 0..20u64 {
        wb.write_at("r", i * (2 << 20) + 5, b"xy").unwrap();
    }
    assert!(wb.used() <= 16 << 20, "{}", wb.used());
    assert_eq!(
        f.parts.load(Ordering::Relaxed) + f.puts.load(Ordering::Relaxed),
        0,
        "no early upload"
    );
    // Reads merge memory chunks, spilled chunks and the base.
    let mut b = [0u8; 4];
    wb.read("r", 19 * (2 << 20) + 4, &mut b).unwrap().unwrap();
    assert_eq!(b, [1, b'x', b'y', 1]);
    wb.set_size("r", 30 << 20).unwrap();
    wb.sync("r").unwrap();
    let o = object(&f, "r");
    assert_eq!(o.len(), 30 << 20);
    for i in 0..15usize {
        assert_eq!(
            &o[i * (2 << 20) + 4..i * (2 << 20) + 8],
            &[1, b'x', b'y', 1]
        );
    }
    assert_eq!(wb.used(), 0);
}

/// Writes `data` at 0 in 256 KiB WRITEs, as a sequential client does.
fn write_seq(wb: &WriteBack, key: &str, data: &[u8]) {
    for (i, c) in data.chunks(256 << 10).enumerate() {
        wb.write_at(key, (i * (256 << 10)) as u64, c).unwrap();
    }
}

#[test]
fn a_streaming_upload_the_store_lost_drops_the_stage_once_and_never_again() {
    // Two sizes: the tail's UploadPart meets NoSuchUpload first, or (whole parts
    // only) the Complete does.
    for size in [2 * PART + 12345, 2 * PART] {
        let (f, wb) = setup(64);
        let data = pattern(0, size);
        write_seq(&wb, "new", &data);
        assert_eq!(f.parts.load(Ordering::Relaxed), 2, "two parts streamed");
        f.abort_all();
        let r = wb.sync("new");
        assert!(matches!(r, Err(BackendError::Lost(_))), "{size}: {r:?}");
        assert_eq!(wb.lost(), 1);
        assert_eq!(f.no_such_upload.load(Ordering::Relaxed), 1);
        // Dropped whole: the file is what the store holds, memory is back.
        assert!(wb.overlay("new").is_none());
        assert!(wb.read("new", 0, &mut [0u8; 4]).is_none());
        assert_eq!(wb.used(), 0);
        // Never wedged: the next sync has nothing to do and names no dead upload.
        wb.sync("new").unwrap();
        assert_eq!(f.no_such_upload.load(Ordering::Relaxed), 1);
        // The client resends (the verifier moved): a fresh upload, byte-exact.
        write_seq(&wb, "new", &data);
        wb.sync("new").unwrap();
        assert_eq!(object(&f, "new"), data);
        assert_eq!(wb.lost(), 1);
        assert_eq!(f.no_such_upload.load(Ordering::Relaxed), 1);
        assert!(f.uploads.lock().unwrap().is_empty());
    }
}

#[test]
fn a_part_upload_meeting_no_such_upload_drops_the_stage_at_once() {
    let (f, wb) = setup(64);
    let data = pattern(0, 3 * PART + 77);
    write_seq(&wb, "new", &data[..PART]);
    assert_eq!(f.parts.load(Ordering::Relaxed), 1);
    f.abort_all();
    // The WRITE that fills part 2 still answers (its client resends it: the
    // verifier it sees at COMMIT is a new one); the stage is gone at once.
    write_seq_from(&wb, "new", &data, PART, 2 * PART);
    assert_eq!(wb.lost(), 1);
    assert_eq!(f.no_such_upload.load(Ordering::Relaxed), 1);
    // Later WRITEs go to a fresh stage over the store's (empty) object; the COMMIT
    // succeeds and nothing names the dead upload again.
    write_seq_from(&wb, "new", &data, 2 * PART, data.len());
    wb.sync("new").unwrap();
    assert_eq!(f.no_such_upload.load(Ordering::Relaxed), 1);
    // The resent WRITEs make the object whole.
    write_seq(&wb, "new", &data);
    wb.sync("new").unwrap();
    assert_eq!(object(&f, "new"), data);
    assert_eq!(wb.lost(), 1);
    assert_eq!(wb.used(), 0);
}

fn write_seq_from(wb: &WriteBack, key: &str, data: &[u8], from: usize, to: usize) {
    let mut at = from;
    while at < to {
        let n = (256 << 10).min(to - at);
        wb.write_at(key, at as u64, &data[at..at + n]).unwrap();
        at += n;
    }
}

#[test]
fn a_rewrite_whose_own_upload_vanished_keeps_everything_and_redoes_it() {
    // Over a base every byte is still staged or in the object: nothing is lost, the
    // sync is retried (JUKEBOX), never STALE, and the verifier stays.
    let (f, wb) = setup(64);
    let mut want = pattern(0, 2 * PART + 5);
    f.objects
        .lock()
        .unwrap()
        .insert("big".into(), (want.clone(), UserMeta::new()));
    wb.write_at("big", 100, b"patch").unwrap();
    want[100..105].copy_from_slice(b"patch");
    f.vanish_parts.store(1, Ordering::Relaxed);
    let r = wb.sync("big");
    assert!(matches!(r, Err(BackendError::Retryable(_))), "{r:?}");
    assert_eq!(wb.lost(), 0);
    assert!(wb.overlay("big").is_some());
    wb.sync("big").unwrap();
    assert_eq!(object(&f, "big"), want);
    assert!(f.uploads.lock().unwrap().is_empty());
}

#[test]
fn a_read_or_overwrite_below_a_lost_upload_goes_on_over_the_store() {
    let (f, wb) = setup(64);
    let data = pattern(0, PART + 10);
    write_seq(&wb, "new", &data);
    f.abort_all();
    // A read of the streamed range completes the upload first: it finds it gone,
    // the stage is dropped and the read sees the store's object (empty).
    assert!(wb.read("new", 0, &mut [0u8; 4]).is_none());
    assert_eq!(wb.lost(), 1);
    // An overwrite opens a fresh stage.
    wb.write_at("new", 0, b"abc").unwrap();
    wb.sync("new").unwrap();
    assert_eq!(object(&f, "new"), b"abc");
}

/// Under `[ha]` (docs/ha.md "Lease and clocks"): a stage is never uploaded past the
/// identity lease's deadline. The sync that finds the gate stopped (the idle flusher's
/// or a COMMIT's) drops it and moves the verifier, so clients resend to whoever serves
/// next; new writes are refused while the gate is shut; a stage opened before a stop
/// is not uploaded after the gate opens again (a new term: a successor may have
/// written meanwhile).
#[test]
fn past_the_deadline_a_stage_is_dropped_and_never_uploaded() {
    use crate::backend::gate::Gate;
    use std::time::Instant;
    let (f, wb) = setup(64);
    let gate = Arc::new(Gate::shut());
    wb.set_gate(gate.clone());
    // This thread runs NFSv4 calls admitted under the identity.
    let _admitted = crate::backend::gate::Admitted::enter();
    assert!(
        matches!(wb.write_at("new", 0, b"x"), Err(BackendError::Retryable(_))),
        "a write staged while the gate is shut"
    );
    gate.serve_until(Instant::now() + Duration::from_millis(100));
    wb.write_at("new", 0, b"late bytes").unwrap();
    std::thread::sleep(Duration::from_millis(130));
    let dropped = crate::backend::gate::counts().1;
    let r = wb.sync("new");
    assert!(matches!(r, Err(BackendError::Lost(_))), "{r:?}");
    assert_eq!(
        f.puts.load(Ordering::Relaxed),
        0,
        "uploaded past the deadline"
    );
    assert_eq!(wb.lost(), 1, "the write verifier moves");
    assert!(crate::backend::gate::counts().1 > dropped);
    assert!(wb.overlay("new").is_none());
    assert_eq!(wb.used(), 0);
    // Open again (a renewal after the stop): nothing of before is uploaded.
    gate.serve_until(Instant::now() + Duration::from_secs(60));
    wb.sync("new").unwrap();
    assert_eq!(object(&f, "new"), b"");

    // A stage of one term, the gate stopping and opening again with no sync between:
    // the stage is dropped at its next write (and its sync), never uploaded.
    wb.write_at("new", 0, b"old term").unwrap();
    gate.serve_until(Instant::now() - Duration::from_millis(1));
    gate.serve_until(Instant::now() + Duration::from_secs(60));
    assert!(
        wb.read("new", 0, &mut [0u8; 8]).is_none(),
        "an earlier term's stage read as the file"
    );
    wb.write_at("new", 100, b"new term").unwrap();
    wb.sync("new").unwrap();
    let o = object(&f, "new");
    assert_eq!(o.len(), 108);
    assert!(
        o[..8].iter().all(|&b| b == 0),
        "an earlier term's bytes uploaded"
    );
    assert_eq!(&o[100..], b"new term");
    assert_eq!(wb.lost(), 2);

    // Streaming: parts went out while the gate admitted; past it the Complete is
    // never sent, the object is unchanged.
    f.objects
        .lock()
        .unwrap()
        .insert("s".into(), (Vec::new(), UserMeta::new()));
    let data = pattern(0, 2 * PART + 10);
    write_seq(&wb, "s", &data);
    assert_eq!(f.parts.load(Ordering::Relaxed), 2);
    gate.serve_until(Instant::now() - Duration::from_millis(1));
    assert!(matches!(wb.sync("s"), Err(BackendError::Lost(_))));
    assert!(object(&f, "s").is_empty(), "completed past the deadline");
    assert_eq!(wb.lost(), 3);
}

/// NFSv3 (a call not admitted under the identity) is served by every gateway, holder
/// or not: its staged writes are taken and uploaded with the gate shut; once an NFSv4
/// call writes the same stage, the stage is gated.
#[test]
fn a_gateway_not_holding_the_identity_still_stages_and_uploads_nfsv3_writes() {
    use crate::backend::gate::{Admitted, Gate};
    let (f, wb) = setup(64);
    let gate = Arc::new(Gate::shut());
    wb.set_gate(gate.clone());
    wb.write_at("new", 0, b"v3 bytes").unwrap();
    wb.set_size("new", 8).unwrap();
    wb.sync("new").unwrap();
    assert_eq!(object(&f, "new"), b"v3 bytes");
    wb.write_at("new", 0, b"V3").unwrap();
    {
        let _a = Admitted::enter();
        assert!(
            matches!(wb.write_at("new", 2, b"x"), Err(BackendError::Retryable(_))),
            "an admitted write with the gate shut"
        );
    }
    wb.sync("new").unwrap();
    assert_eq!(object(&f, "new"), b"V3 bytes");
}
