//! Checks on the content of successful replies, where RFC 1813 bounds a result by an
//! argument: a READ returns at most `count` bytes and says how many; a WRITE reports at
//! most the bytes it was given; READDIR and READDIRPLUS results fit `count` and
//! `maxcount`; GETATTR's type is a real `ftype3`. A violation is a protocol bug that a
//! client could trip over (buffer sizing, short-read loops), so it fails the campaign.

use super::structured::Call;
use super::wire::{Dec, NFS_PROG};

/// `post_op_attr`: a bool and, when set, 84 bytes of `fattr3`.
fn skip_post_op_attr(d: &mut Dec) -> Option<u32> {
    if d.u32()? == 1 {
        let ftype = d.u32()?;
        d.skip(80)?;
        Some(ftype)
    } else {
        Some(0)
    }
}

/// Why the successful result `body` of `call` breaks the protocol, if it does.
pub fn violation(call: &Call, body: &[u8]) -> Option<String> {
    if call.prog != NFS_PROG || call.vers != 3 {
        return None;
    }
    let mut d = Dec::new(body);
    if d.u32()? != 0 {
        return None;
    }
    let mut a = Dec::new(&call.args);
    a.var(1 << 20)?; // the file handle
    match call.proc_ {
        1 => {
            let ftype = d.u32()?;
            (!(1..=7).contains(&ftype)).then(|| format!("GETATTR type {ftype}"))
        }
        6 => {
            let (_off, want) = (a.u32().zip(a.u32())?, a.u32()?);
            skip_post_op_attr(&mut d)?;
            let count = d.u32()?;
            let _eof = d.u32()?;
            let data = d.var(usize::MAX)?;
            if count as usize != data.len() {
                Some(format!("READ count {count} but {} data bytes", data.len()))
            } else if count > want {
                Some(format!("READ returned {count} bytes for count {want}"))
            } else {
                None
            }
        }
        7 => {
            let (_off, want) = (a.u32().zip(a.u32())?, a.u32()?);
            let _stable = a.u32()?;
            let given = a.u32()?;
            // wcc_data: pre_op_attr (a bool and 24 bytes of wcc_attr), post_op_attr.
            if d.u32()? == 1 {
                d.skip(24)?;
            }
            skip_post_op_attr(&mut d)?;
            let count = d.u32()?;
            (count > want.min(given)).then(|| {
                format!(
                    "WRITE reports {count} bytes written for count {want} with {given} data bytes"
                )
            })
        }
        16 | 17 => {
            let _cookie = a.u32().zip(a.u32())?;
            a.skip(8)?;
            let count = a.u32()?;
            let limit = if call.proc_ == 17 { a.u32()? } else { count };
            let resok = body.len() - 4;
            let name = if call.proc_ == 16 {
                "READDIR count"
            } else {
                "READDIRPLUS maxcount"
            };
            (resok as u64 > limit as u64)
                .then(|| format!("{name} {limit} but a {resok}-byte result"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::wire::{Cred, Enc};

    fn call(proc_: u32, args: Enc) -> Call {
        Call {
            prog: NFS_PROG,
            vers: 3,
            proc_,
            cred: Cred::None,
            args: args.0,
        }
    }

    #[test]
    fn read_results_are_bounded_by_count() {
        let mut a = Enc::default();
        a.var(&[1; 8]).u64(0).u32(4);
        let c = call(6, a);
        let mut ok = Enc::default();
        ok.u32(0).u32(0).u32(3).u32(1).var(b"abc");
        assert_eq!(violation(&c, &ok.0), None);
        let mut long = Enc::default();
        long.u32(0).u32(0).u32(5).u32(1).var(b"abcde");
        assert!(violation(&c, &long.0)
            .unwrap()
            .contains("5 bytes for count 4"));
        let mut lie = Enc::default();
        lie.u32(0).u32(0).u32(2).u32(1).var(b"abc");
        assert!(violation(&c, &lie.0).is_some());
        assert_eq!(violation(&c, &[0, 0, 0, 2]), None);
    }

    #[test]
    fn readdir_results_fit_count() {
        let mut a = Enc::default();
        a.var(&[1; 8]).u64(0).fixed(&[0; 8]).u32(16);
        let c = call(16, a);
        assert_eq!(violation(&c, &[0; 20]), None);
        assert!(violation(&c, &[0; 24]).is_some());
    }
}
