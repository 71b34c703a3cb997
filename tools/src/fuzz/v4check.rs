//! Checks on an accepted COMPOUND4res (RFC 8881 §15.2, §16.2.3) against the request
//! that produced it, and what the fuzzer learns from it (handles, stateids, the
//! session's ids). The shape rules, each a bug a client could trip over:
//!
//! * the tag is the request's tag;
//! * resarray is no longer than the op count the request claimed, nor than the ops it
//!   actually carried plus one (the op the server failed to decode);
//! * result `i` carries the opnum of request op `i` (OP_ILLEGAL for a number that is
//!   no operation);
//! * every result but the last is NFS4_OK (the first failure ends the COMPOUND), and
//!   the COMPOUND's status is the last result's status;
//! * an NFS4_OK COMPOUND has a result for every op; an empty resarray has a status
//!   unless the request had no ops.
//!
//! Results of successful ops are walked (their XDR is known for every op the gateway
//! implements) to reach the next one; after an op whose result format this file does
//! not know, the rest is not checked.

use super::v4::{result_opnum, Compound, OP_ILLEGAL};
use super::wire::Dec;

/// What an accepted reply told the fuzzer.
#[derive(Debug, Default)]
pub struct Res {
    pub status: u32,
    /// (opnum, status) of each result read.
    pub results: Vec<(u32, u32)>,
    /// GETFH results: (index of the op, handle).
    pub handles: Vec<(usize, Vec<u8>)>,
    pub stateids: Vec<[u8; 16]>,
    /// EXCHANGE_ID: clientid and sequence id.
    pub exchange: Option<(u64, u32)>,
    /// CREATE_SESSION: session id and the fore channel's slot count.
    pub session: Option<([u8; 16], u32)>,
    /// (op index, bytes): READ data, READDIR4resok.
    pub sizes: Vec<(usize, usize)>,
}

fn bitmap(d: &mut Dec) -> Option<()> {
    let n = d.u32()? as usize;
    if n > 64 {
        return None;
    }
    d.skip(4 * n)
}

fn opaque(d: &mut Dec) -> Option<()> {
    d.var(1 << 22).map(|_| ())
}

fn stateid(d: &mut Dec) -> Option<[u8; 16]> {
    let mut s = [0u8; 16];
    for i in 0..4 {
        s[4 * i..4 * i + 4].copy_from_slice(&d.u32()?.to_be_bytes());
    }
    Some(s)
}

fn channel(d: &mut Dec) -> Option<u32> {
    d.skip(16)?;
    let reqs = d.u32()?;
    let _ = reqs;
    let slots = d.u32()?;
    let ird = d.u32()?;
    if ird > 1 {
        return None;
    }
    d.skip(4 * ird as usize)?;
    Some(slots)
}

/// Walks the successful result of `op`: `Some(Some(()))` walked, `Some(None)` a format
/// this file does not know, `None` malformed (too short for its own lengths).
fn walk_ok(op: u32, d: &mut Dec, at: usize, res: &mut Res) -> Option<Option<()>> {
    let start = d.rest().len();
    match op {
        7 | 8 | 13 | 15 | 16 | 17 | 19 | 22..=24 | 31 | 32 | 37 | 39 | 40 | 44 | 45 | 57 | 58 => {}
        3 | 5 => d.skip(8)?,
        4 | 14 | 21 => {
            res.stateids.push(stateid(d)?);
        }
        12 => {
            res.stateids.push(stateid(d)?);
        }
        6 => {
            d.skip(20)?;
            bitmap(d)?;
        }
        9 => {
            bitmap(d)?;
            opaque(d)?;
        }
        10 => {
            let fh = d.var(1 << 16)?;
            res.handles.push((at, fh.to_vec()));
        }
        11 | 28 => d.skip(20)?,
        29 => d.skip(40)?,
        18 => {
            res.stateids.push(stateid(d)?);
            d.skip(24)?;
            bitmap(d)?;
            match d.u32()? {
                0 => {}
                1 | 2 => {
                    let w = d.u32()?;
                    res.stateids.push(stateid(d)?);
                    let _recall = d.u32()?;
                    if w == 2 {
                        // space_limit4: a filesize (u64) or blocks and block size
                        // (two u32): 8 bytes after the discriminant either way.
                        d.skip(4 + 8)?;
                    }
                    d.skip(12)?;
                    opaque(d)?;
                }
                3 => {
                    let why = d.u32()?;
                    if why == 1 || why == 2 {
                        d.skip(4)?;
                    }
                }
                _ => return None,
            }
        }
        25 => {
            d.skip(4)?;
            let data = d.var(1 << 22)?;
            res.sizes.push((at, data.len()));
        }
        27 => opaque(d)?,
        26 => {
            d.skip(8)?;
            let mut n = 0usize;
            while d.u32()? == 1 {
                n += 1;
                if n > 1 << 20 {
                    return None;
                }
                d.skip(8)?;
                opaque(d)?;
                bitmap(d)?;
                opaque(d)?;
            }
            d.skip(4)?;
            res.sizes.push((at, start - d.rest().len()));
        }
        33 | 52 => {
            let n = d.u32()?;
            for _ in 0..n.min(1 << 16) {
                if d.u32()? == 6 {
                    opaque(d)?;
                    d.skip(8)?;
                }
            }
        }
        34 => bitmap(d)?,
        38 => d.skip(16)?,
        41 => d.skip(24)?,
        42 => {
            let id = u64::from(d.u32()?) << 32 | u64::from(d.u32()?);
            let seq = d.u32()?;
            d.skip(4)?;
            if d.u32()? != 0 {
                return Some(None); // state protection other than SP4_NONE
            }
            d.skip(8)?;
            opaque(d)?;
            opaque(d)?;
            let n = d.u32()?;
            if n > 1 {
                return None;
            }
            for _ in 0..n {
                opaque(d)?;
                opaque(d)?;
                d.skip(12)?;
            }
            res.exchange = Some((id, seq));
        }
        43 => {
            let mut sid = [0u8; 16];
            for i in 0..4 {
                sid[4 * i..4 * i + 4].copy_from_slice(&d.u32()?.to_be_bytes());
            }
            d.skip(8)?;
            let slots = channel(d)?;
            channel(d)?;
            res.session = Some((sid, slots));
        }
        53 => d.skip(36)?,
        55 => {
            let n = d.u32()? as usize;
            d.skip(n.checked_mul(4)?)?;
        }
        _ => return Some(None),
    }
    Some(Some(()))
}

/// Checks the accepted result `body` of `req`; `Err` names the broken rule.
pub fn check(req: &Compound, body: &[u8]) -> Result<Res, String> {
    let mut d = Dec::new(body);
    let short = |what: &str| format!("COMPOUND4res cut short ({what})");
    let mut res = Res {
        status: d.u32().ok_or_else(|| short("status"))?,
        ..Res::default()
    };
    let tag = d.var(1 << 16).ok_or_else(|| short("tag"))?;
    if tag != req.tag.as_slice() {
        return Err(format!(
            "tag of {} bytes echoed as {} bytes",
            req.tag.len(),
            tag.len()
        ));
    }
    let n = d.u32().ok_or_else(|| short("resarray length"))? as usize;
    let sent = req.ops.len();
    if n > req.claimed as usize || n > sent + 1 {
        return Err(format!(
            "{n} results for {} ops claimed and {sent} sent",
            req.claimed
        ));
    }
    if !super::v4::served_minor(req.minor) && n != 0 {
        // RFC 8881 §16.2.3: another minor version gets an empty resarray.
        return Err(format!("{n} results for minor version {}", req.minor));
    }
    if n == 0 {
        if res.status == 0 && req.claimed != 0 {
            return Err(format!(
                "NFS4_OK with no results for {} ops claimed",
                req.claimed
            ));
        }
        return Ok(res);
    }
    if res.status == 0 && (n != req.claimed as usize) {
        return Err(format!("NFS4_OK with {n} results for {} ops", req.claimed));
    }
    for i in 0..n {
        let op = d.u32().ok_or_else(|| short("opnum"))?;
        let st = d.u32().ok_or_else(|| short("op status"))?;
        res.results.push((op, st));
        if i < sent && op != result_opnum(req.ops[i], req.minor) {
            return Err(format!(
                "result {i} has opnum {op} for request op {}",
                req.ops[i]
            ));
        }
        if i == sent && st == 0 {
            return Err(format!("NFS4_OK for op {i}, past the {sent} ops sent"));
        }
        let last = i + 1 == n;
        if last {
            if st != res.status {
                return Err(format!(
                    "COMPOUND status {} but its last result's status is {st}",
                    res.status
                ));
            }
            break;
        }
        if st != 0 {
            return Err(format!(
                "result {i} (op {op}) failed with {st} but {} results follow",
                n - i - 1
            ));
        }
        if op == OP_ILLEGAL {
            return Err(format!("result {i} is OP_ILLEGAL with NFS4_OK"));
        }
        match walk_ok(op, &mut d, i, &mut res) {
            None => return Err(format!("result {i} (op {op}) malformed")),
            Some(None) => {
                bounds(req, &res)?;
                return Ok(res);
            }
            Some(Some(())) => {}
        }
    }
    // The last op's own result (successful ones only) is still worth learning from.
    if let Some(&(op, 0)) = res.results.last() {
        let at = res.results.len() - 1;
        if walk_ok(op, &mut d, at, &mut res).is_none() {
            return Err(format!("last result (op {op}) malformed"));
        }
    }
    bounds(req, &res)?;
    Ok(res)
}

/// READ returns at most `count` bytes (RFC 8881 §18.22.3); READDIR4resok fits
/// `maxcount` (§18.23.3).
fn bounds(req: &Compound, res: &Res) -> Result<(), String> {
    for &(at, size) in &res.sizes {
        let Some(&(_, limit)) = req.limits.iter().find(|l| l.0 == at) else {
            continue;
        };
        if size as u64 > u64::from(limit) {
            let what = if req.ops.get(at) == Some(&25) {
                "READ count"
            } else {
                "READDIR maxcount"
            };
            return Err(format!("{what} {limit} but {size} bytes in result {at}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::wire::Enc;

    fn req(ops: &[u32]) -> Compound {
        Compound {
            ops: ops.to_vec(),
            claimed: ops.len() as u32,
            minor: 1,
            ..Compound::default()
        }
    }

    fn res(status: u32, results: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let mut e = Enc::default();
        e.u32(status).var(&[]).u32(results.len() as u32);
        for (op, st, body) in results {
            e.u32(*op).u32(*st).0.extend_from_slice(body);
        }
        e.0
    }

    #[test]
    fn good_results_pass_and_teach_handles() {
        let mut fh = Enc::default();
        fh.var(&[9; 12]);
        let r = check(
            &req(&[24, 10, 9]),
            &res(
                0,
                &[
                    (24, 0, &[]),
                    (10, 0, &fh.0),
                    (9, 0, &[0, 0, 0, 0, 0, 0, 0, 0]),
                ],
            ),
        )
        .unwrap();
        assert_eq!(r.handles, vec![(1, vec![9; 12])]);
        // A failure ends the COMPOUND; illegal ops answer OP_ILLEGAL.
        check(
            &req(&[24, 2, 9]),
            &res(10044, &[(24, 0, &[]), (10044, 10044, &[])]),
        )
        .unwrap();
    }

    #[test]
    fn read_and_readdir_results_fit_their_counts() {
        let mut r = req(&[22, 25]);
        r.limits = vec![(1, 3)];
        let mut ok = Enc::default();
        ok.u32(1).var(b"abc");
        check(&r, &res(0, &[(22, 0, &[]), (25, 0, &ok.0)])).unwrap();
        let mut long = Enc::default();
        long.u32(1).var(b"abcd");
        let e = check(&r, &res(0, &[(22, 0, &[]), (25, 0, &long.0)])).unwrap_err();
        assert!(e.contains("READ count 3 but 4 bytes"), "{e}");
        // READDIR4resok: verifier, no entries, eof = 16 bytes.
        let mut r = req(&[26]);
        r.limits = vec![(0, 15)];
        let rd = [0u8; 16];
        assert!(check(&r, &res(0, &[(26, 0, &rd)])).is_err());
        r.limits = vec![(0, 16)];
        check(&r, &res(0, &[(26, 0, &rd)])).unwrap();
    }

    #[test]
    fn wrong_shapes_fail() {
        // Status not the last result's.
        assert!(check(&req(&[24, 9]), &res(0, &[(24, 0, &[]), (9, 2, &[])])).is_err());
        // A failure followed by more results.
        assert!(check(&req(&[24, 24]), &res(2, &[(24, 2, &[]), (24, 2, &[])])).is_err());
        // Wrong opnum.
        assert!(check(&req(&[24]), &res(0, &[(23, 0, &[])])).is_err());
        // More results than ops.
        assert!(check(&req(&[24]), &res(0, &[(24, 0, &[]), (24, 0, &[])])).is_err());
        // OK but not every op answered.
        assert!(check(&req(&[24, 24]), &res(0, &[(24, 0, &[])])).is_err());
        // OK with no results.
        assert!(check(&req(&[24]), &res(0, &[])).is_err());
        // Malformed GETFH in the middle.
        assert!(check(
            &req(&[10, 9]),
            &res(0, &[(10, 0, &[0, 0, 1, 0]), (9, 0, &[])])
        )
        .is_err());
    }
}
