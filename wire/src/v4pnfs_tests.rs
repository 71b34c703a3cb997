//! The pNFS encoders against the RFC 8881 §18.40–§18.44 and RFC 8435 §5.1 layouts,
//! written out word by word here, and the result decoders on hand-made bytes.

use crate::nfs4::*;
use crate::nfs4args::*;
use crate::v4call::Ops;
use crate::v4pnfs::*;
use engine::xdr::{XdrReader, XdrWriter};

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect()
}

fn enc(f: impl Fn(&mut XdrWriter) -> engine::xdr::XdrResult<()>) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let mut w = XdrWriter::new(&mut buf);
    f(&mut w).unwrap();
    let n = w.position();
    buf.truncate(n);
    buf
}

#[test]
fn layoutget_args_are_rfc_8881_18_43_1() {
    let a = LayoutGet {
        layout_type: LAYOUT4_FLEX_FILES,
        iomode: LAYOUTIOMODE4_RW,
        offset: 1,
        length: u64::MAX,
        minlength: 2,
        stateid: [3; 16],
        maxcount: 4096,
    };
    let ops = Ops::new().layoutget(&a);
    assert_eq!(ops.n, 1);
    let w = words(ops.bytes());
    assert_eq!(&w[..5], &[OP_LAYOUTGET, 0, 4, 2, 0]);
    assert_eq!(&w[5..11], &[1, u32::MAX, u32::MAX, 0, 2, 0x0303_0303]);
    assert_eq!(*w.last().unwrap(), 4096);
    assert_eq!(w.len(), 1 + 1 + 2 + 2 * 3 + 4 + 1);
}

#[test]
fn commit_and_return_args() {
    let c = LayoutCommit {
        offset: 0,
        length: 10,
        reclaim: false,
        stateid: [1; 16],
        last_write: Some(9),
        mtime: Some((5, 6)),
        layout_type: LAYOUT4_FLEX_FILES,
    };
    let w = words(&enc(|w| layoutcommit(w, &c)));
    assert_eq!(w[0], OP_LAYOUTCOMMIT);
    // range, reclaim, stateid (4 words), newoffset TRUE 9, newtime TRUE 5 s 6 ns,
    // layoutupdate4 of type 4 and an empty body.
    assert_eq!(&w[10..], &[1, 0, 9, 1, 0, 5, 6, 4, 0]);
    let r = Return::File {
        offset: 0,
        length: u64::MAX,
        stateid: [2; 16],
    };
    let w = words(&enc(|w| layoutreturn(w, 4, LAYOUTIOMODE4_ANY, &r)));
    assert_eq!(&w[..5], &[OP_LAYOUTRETURN, 0, 4, 3, LAYOUTRETURN4_FILE]);
    assert_eq!(w.len(), 5 + 4 + 4 + 1);
    let w = words(&enc(|w| layoutreturn(w, 4, 1, &Return::All)));
    assert_eq!(w, [OP_LAYOUTRETURN, 0, 4, 1, LAYOUTRETURN4_ALL]);
    let w = words(&enc(|w| getdeviceinfo(w, &[7; 16], 4, 0, &[])));
    assert_eq!(&w[..1], &[OP_GETDEVICEINFO]);
    assert_eq!(&w[5..], &[4, 0, 0]);
}

#[test]
fn ff_layout_and_device_decode() {
    let body = enc(|w| {
        w.u64(1 << 20)?;
        w.u32(1)?; // mirrors
        w.u32(1)?; // data servers
        w.opaque_fixed(&[9; 16])?;
        w.u32(100)?;
        w.opaque_fixed(&[0; 16])?;
        w.u32(1)?;
        w.opaque_var(b"handle")?;
        w.string(b"1000")?;
        w.string(b"100")?;
        w.u32(0)?;
        w.u32(0)
    });
    let l = ff_layout(&body).unwrap();
    assert_eq!(l.stripe_unit, 1 << 20);
    let ds = &l.mirrors[0][0];
    assert_eq!((ds.deviceid, ds.efficiency), ([9; 16], 100));
    assert_eq!(
        (ds.fhs[0].as_slice(), ds.user.as_str()),
        (&b"handle"[..], "1000")
    );
    // Trailing bytes or a cut body are errors, never a panic.
    let mut longer = body.clone();
    longer.extend_from_slice(&[0; 4]);
    assert!(ff_layout(&longer).is_err());
    for n in 0..body.len() {
        assert!(ff_layout(&body[..n]).is_err());
    }
    let dev = enc(|w| {
        w.u32(1)?;
        w.string(b"tcp")?;
        w.string(b"127.0.0.1.8.1")?;
        w.u32(1)?;
        for v in [3, 0, 65536, 65536] {
            w.u32(v)?;
        }
        w.bool(false)
    });
    let d = ff_device(&dev).unwrap();
    assert_eq!(d.netaddrs[0].0, "tcp");
    assert_eq!(
        uaddr(&d.netaddrs[0].1),
        Some("127.0.0.1:2049".parse().unwrap())
    );
    assert_eq!(d.versions[0].version, 3);
    assert_eq!(uaddr("::1.8.1"), Some("[::1]:2049".parse().unwrap()));
    assert_eq!(uaddr("127.0.0.1.300.1"), None);
    let res = enc(|w| {
        w.bool(false)?;
        w.opaque_fixed(&[5; 16])?;
        w.u32(1)?;
        w.u64(0)?;
        w.u64(u64::MAX)?;
        w.u32(2)?;
        w.u32(4)?;
        w.opaque_var(&body)
    });
    let g = layoutget_ok(&mut XdrReader::new(&res)).unwrap();
    assert_eq!((g.stateid, g.layouts[0].iomode), ([5; 16], 2));
    assert_eq!(g.layouts[0].body, body);
}

/// LAYOUTERROR and LAYOUTSTATS (RFC 7862 §15.6.1, §15.7.1) and an ff_layoutreturn4
/// (RFC 8435 §9.3) in LAYOUTRETURN, word by word.
#[test]
fn error_reports_are_rfc_7862_and_rfc_8435() {
    let e = DeviceError {
        deviceid: [9; 16],
        status: 10008,
        opnum: 38,
    };
    let w = words(&enc(|w| layouterror(w, (1, 2), &[3; 16], &[e])));
    assert_eq!(&w[..5], &[OP_LAYOUTERROR, 0, 1, 0, 2]);
    assert_eq!(
        &w[9..],
        &[
            1,
            0x0909_0909,
            0x0909_0909,
            0x0909_0909,
            0x0909_0909,
            10008,
            38
        ]
    );
    let w = words(&enc(|w| {
        layoutstats(w, (0, 8), &[1; 16], ((1, 2), (3, 4)), &[5; 16], &[])
    }));
    assert_eq!(w[0], OP_LAYOUTSTATS);
    assert_eq!(&w[9..17], &[0, 1, 0, 2, 0, 3, 0, 4]);
    assert_eq!(&w[21..], &[LAYOUT4_FLEX_FILES, 0]);
    let body = ff_layoutreturn(&[(0, 10, [2; 16], vec![e])]);
    let b = words(&body);
    assert_eq!(&b[..5], &[1, 0, 0, 0, 10]);
    assert_eq!(
        &b[9..],
        &[
            1,
            0x0909_0909,
            0x0909_0909,
            0x0909_0909,
            0x0909_0909,
            10008,
            38,
            0
        ]
    );
    let w = words(&enc(|w| {
        layoutreturn_file_body(w, 3, (0, u64::MAX), &[2; 16], &body)
    }));
    assert_eq!(
        &w[..5],
        &[
            OP_LAYOUTRETURN,
            0,
            LAYOUT4_FLEX_FILES,
            3,
            LAYOUTRETURN4_FILE
        ]
    );
    assert_eq!(w[13] as usize, body.len());
    assert_eq!(&w[14..], &b[..]);
    assert_eq!(Ops::new().layouterror(&[0; 16], &[e, e]).n, 1);
}

#[test]
fn reclaim_return_and_device_list_args_are_rfc_8881() {
    // LAYOUTRETURN4args (§18.44.1): lora_reclaim TRUE, then as a plain return.
    let r = Return::File {
        offset: 0,
        length: 7,
        stateid: [2; 16],
    };
    let plain = words(Ops::new().layoutreturn(4, 3, &r).bytes());
    let reclaim = words(Ops::new().layoutreturn_reclaim(4, 3, &r).bytes());
    assert_eq!(plain[1], 0);
    assert_eq!(reclaim[1], 1);
    assert_eq!(plain[2..], reclaim[2..]);
    assert_eq!(&reclaim[..5], &[OP_LAYOUTRETURN, 1, 4, 3, 1]);
    // GETDEVICELIST4args (§18.41.1): type, maxdevices, cookie, cookieverf.
    let w = words(Ops::new().getdevicelist(4, 9, 1 << 32 | 5, &[7; 8]).bytes());
    assert_eq!(w, [OP_GETDEVICELIST, 4, 9, 1, 5, 0x0707_0707, 0x0707_0707]);
}

#[test]
fn device_list_results_decode_and_refuse_hostile_counts() {
    let ok = enc(|w| {
        w.u64(3)?;
        w.opaque_fixed(&[9; 8])?;
        w.u32(2)?;
        w.opaque_fixed(&[1; 16])?;
        w.opaque_fixed(&[2; 16])?;
        w.bool(true)
    });
    let l = getdevicelist_ok(&mut XdrReader::new(&ok)).unwrap();
    assert_eq!(
        l,
        DeviceList {
            cookie: 3,
            verf: [9; 8],
            ids: vec![[1; 16], [2; 16]],
            eof: true
        }
    );
    // A count past the bound, and a list cut short: errors, no allocation from them.
    let huge = enc(|w| {
        w.u64(0)?;
        w.opaque_fixed(&[0; 8])?;
        w.u32(u32::MAX)
    });
    assert!(getdevicelist_ok(&mut XdrReader::new(&huge)).is_err());
    assert!(getdevicelist_ok(&mut XdrReader::new(&ok[..ok.len() - 8])).is_err());
}
