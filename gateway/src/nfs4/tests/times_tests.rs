//! pjdfstest utimensat/09.t over NFSv4.1: nfstime4 seconds are int64 (RFC 8881
//! §3.3.1); SETATTR with SET_TO_CLIENT_TIME4 of 2^32, 2^33 or before 1970 stores the
//! time and GETATTR gives it back exactly; nseconds of 10^9 is NFS4ERR_INVAL.

use super::*;
use crate::fs::NfsTime;

fn settimes(sec: i64, nsec: u32) -> Op {
    Box::new(move |w: &mut XdrWriter| {
        w.u32(OP_SETATTR)?;
        crate::state::stateid::Stateid::ANONYMOUS.encode(w)?;
        attrs::put_bitmap(
            w,
            &attrs::Bitmap::of(&[attrs::TIME_ACCESS_SET, attrs::TIME_MODIFY_SET]),
        )?;
        let mut b = [0u8; 32];
        let mut l = XdrWriter::new(&mut b);
        for _ in 0..2 {
            l.u32(1)?; // SET_TO_CLIENT_TIME4
            l.i64(sec)?;
            l.u32(nsec)?;
        }
        let n = l.position();
        w.opaque_var(&b[..n])
    })
}

/// SEQUENCE, PUTFH, SETATTR(atime = mtime = sec.nsec), GETATTR(atime, mtime):
/// SETATTR's status and, when it succeeded, the times GETATTR gave.
fn set_and_get(
    h: &H,
    sid: [u8; 16],
    seq: u32,
    fh: &[u8],
    sec: i64,
    nsec: u32,
) -> (Nfsstat4, Vec<NfsTime>) {
    let ops = [
        sequence(sid, seq, 0),
        putfh(fh.to_vec()),
        settimes(sec, nsec),
        getattr(&[attrs::TIME_ACCESS, attrs::TIME_MODIFY]),
    ];
    let (_, rep) = call(h, &ops);
    let mut r = results(&rep);
    r.skip(8 + 16 + 20 + 8).unwrap();
    assert_eq!(r.u32().unwrap(), OP_SETATTR);
    let st = Nfsstat4::decode(&mut r).unwrap();
    attrs::get_bitmap(&mut r).unwrap();
    if st != NFS4_OK {
        return (st, Vec::new());
    }
    assert_eq!(
        (r.u32().unwrap(), Nfsstat4::decode(&mut r).unwrap()),
        (OP_GETATTR, NFS4_OK)
    );
    attrs::get_bitmap(&mut r).unwrap();
    let list = r.opaque_var(64).unwrap();
    let mut l = XdrReader::new(list);
    let mut times = Vec::new();
    for _ in 0..2 {
        let sec = l.i64().unwrap();
        let nsec = l.u32().unwrap();
        times.push(NfsTime { sec, nsec });
    }
    (st, times)
}

#[test]
fn client_times_beyond_uint32_read_back_exactly() {
    let h = harness();
    let root = h.model.root(0).unwrap();
    let f = h
        .model
        .create(
            &root,
            b"t",
            &crate::fs::CreateMode::Unchecked(Default::default()),
            crate::fs::Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    let fh = h.model.handle(&f).as_bytes().to_vec();
    let (_, sid) = session(&h, b"client-times");
    let mut seq = 1;
    for sec in [1i64 << 32, 1 << 33, -1, -(1 << 33), i64::MAX, i64::MIN + 1] {
        let (st, times) = set_and_get(&h, sid, seq, &fh, sec, 999_999_999);
        seq += 1;
        assert_eq!(st, NFS4_OK, "{sec}");
        let t = NfsTime {
            sec,
            nsec: 999_999_999,
        };
        assert_eq!(times, vec![t, t], "{sec}");
    }
    for (sec, nsec) in [(0, 1_000_000_000), (i64::MIN, 0)] {
        let (st, _) = set_and_get(&h, sid, seq, &fh, sec, nsec);
        seq += 1;
        assert_eq!(st, NFS4ERR_INVAL, "{sec}.{nsec}");
    }
}
