//! Campaign 3 generator: NFSv4.1 COMPOUNDs (RFC 8881 §16.2) with hostile operations.
//! A COMPOUND usually starts with a correct SEQUENCE on the connection's session (so the
//! rest reaches the deep code), sometimes with a wrong slot, sequence id or session;
//! then 1-8 operations drawn from every NFSv4.1 operation (3-58) and from illegal
//! numbers, with arguments from [`super::values`] and a few v4-specific hostile values
//! (stateids, fattr4 bitmaps and values, channel attributes). File handles and stateids
//! are the real ones the server gave out (learned from replies) or mangled copies.
//! Ops that could change the export root are only drawn while the current and saved
//! filehandles are known not to be the root, so fuzz COMPOUNDs cannot lock the checks
//! out (the same rule as the structured campaign's read-only root).

use super::rng::Rng;
use super::values::{self as v, u32v, u64v};
use super::wire::Enc;

use nfs_wire::nfs4::NFS4_CALLBACK;
pub use nfs_wire::nfs4::{
    OP_CREATE_SESSION, OP_EXCHANGE_ID, OP_GETFH, OP_ILLEGAL, OP_LOOKUP, OP_PUTROOTFH,
    OP_RECLAIM_COMPLETE, OP_RESTOREFH, OP_SAVEFH, OP_SEQUENCE,
};
use nfs_wire::nfs4args::{EXCHGID4_FLAG_CONFIRMED_R, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A};
use nfs_wire::v4call::Ops;

/// Operation names by number (3-58), for labels.
pub const OP_NAMES: [&str; 59] = [
    "op0",
    "op1",
    "op2",
    "ACCESS",
    "CLOSE",
    "COMMIT",
    "CREATE",
    "DELEGPURGE",
    "DELEGRETURN",
    "GETATTR",
    "GETFH",
    "LINK",
    "LOCK",
    "LOCKT",
    "LOCKU",
    "LOOKUP",
    "LOOKUPP",
    "NVERIFY",
    "OPEN",
    "OPENATTR",
    "OPEN_CONFIRM",
    "OPEN_DOWNGRADE",
    "PUTFH",
    "PUTPUBFH",
    "PUTROOTFH",
    "READ",
    "READDIR",
    "READLINK",
    "REMOVE",
    "RENAME",
    "RENEW",
    "RESTOREFH",
    "SAVEFH",
    "SECINFO",
    "SETATTR",
    "SETCLIENTID",
    "SETCLIENTID_CONFIRM",
    "VERIFY",
    "WRITE",
    "RELEASE_LOCKOWNER",
    "BACKCHANNEL_CTL",
    "BIND_CONN_TO_SESSION",
    "EXCHANGE_ID",
    "CREATE_SESSION",
    "DESTROY_SESSION",
    "FREE_STATEID",
    "GET_DIR_DELEGATION",
    "GETDEVICEINFO",
    "GETDEVICELIST",
    "LAYOUTCOMMIT",
    "LAYOUTGET",
    "LAYOUTRETURN",
    "SECINFO_NO_NAME",
    "SEQUENCE",
    "SET_SSV",
    "TEST_STATEID",
    "WANT_DELEGATION",
    "DESTROY_CLIENTID",
    "RECLAIM_COMPLETE",
];

/// NFSv4.2's operation names (59-75, RFC 7862 §11.1, RFC 8276 §8.3).
pub const OP_NAMES_42: [&str; 17] = [
    "ALLOCATE",
    "COPY",
    "COPY_NOTIFY",
    "DEALLOCATE",
    "IO_ADVISE",
    "LAYOUTERROR",
    "LAYOUTSTATS",
    "OFFLOAD_CANCEL",
    "OFFLOAD_STATUS",
    "READ_PLUS",
    "SEEK",
    "WRITE_SAME",
    "CLONE",
    "GETXATTR",
    "SETXATTR",
    "LISTXATTRS",
    "REMOVEXATTR",
];

pub fn op_name(op: u32) -> String {
    match op {
        3..=58 => OP_NAMES[op as usize].to_string(),
        59..=75 => OP_NAMES_42[op as usize - 59].to_string(),
        OP_ILLEGAL => "ILLEGAL".to_string(),
        _ => format!("op{op}"),
    }
}

/// The opnum a result for request op `op` in a COMPOUND of minor version `minor`
/// carries: itself, or OP_ILLEGAL for a number that is no operation of that minor
/// version (RFC 8881 §15.2, §18.51; NFSv4.2 adds 59-75, RFC 7862 §11.1).
pub fn result_opnum(op: u32, minor: u32) -> u32 {
    let last = if minor >= 2 { 75 } else { 58 };
    if (3..=last).contains(&op) {
        op
    } else {
        OP_ILLEGAL
    }
}

/// Minor versions the server answers (1 and 2); others get an empty result array.
pub fn served_minor(minor: u32) -> bool {
    (1..=2).contains(&minor)
}

/// Operations that change nothing the checks rely on: allowed while the current or
/// saved filehandle may be the export root.
fn harmless(op: u32) -> bool {
    matches!(
        op,
        3 | 9 | 10 | 15 | 16 | 17 | 22 | 26 | 27 | 31 | 32 | 33 | 37 | 52 | 55
    )
}

/// The connection's session, as the setup calls and later replies left it.
#[derive(Debug, Clone, Default)]
pub struct Session {
    pub clientid: u64,
    pub sessionid: [u8; 16],
    /// Next sequence id per slot (the fore channel's granted slot count).
    pub slots: Vec<u32>,
}

/// One generated COMPOUND, before the RPC header.
#[derive(Debug, Clone, Default)]
pub struct Compound {
    /// COMPOUND4args.
    pub args: Vec<u8>,
    /// Operation numbers actually encoded, in order.
    pub ops: Vec<u32>,
    /// The op count field (may lie: larger than `ops.len()`).
    pub claimed: u32,
    pub tag: Vec<u8>,
    pub minor: u32,
    /// (slot, seqid) of a SEQUENCE sent on the session's own id and a slot it has.
    pub seq: Option<(usize, u32)>,
    /// (op index, bound) for READ (count) and READDIR (maxcount): RFC 8881 §18.22.3
    /// and §18.23.3 bound their results by these.
    pub limits: Vec<(usize, u32)>,
}

impl Compound {
    pub fn label(&self) -> String {
        let names: Vec<String> = self.ops.iter().map(|&o| op_name(o)).collect();
        format!("COMPOUND {}", names.join(","))
    }
}

pub struct V4Gen {
    pub rng: Rng,
    /// Handles of the work area's files (and whatever GETFH returned, up to 64).
    pub files: Vec<Vec<u8>>,
    /// Handles of the work area and its subdirectories.
    pub dirs: Vec<Vec<u8>>,
    /// The work area's name in the export root (PUTROOTFH is always followed by it).
    pub work: Vec<u8>,
    /// The export root's handle: never put in the pools.
    pub root: Vec<u8>,
    /// Stateids the server returned (OPEN, LOCK, ...), up to 64.
    pub stateids: Vec<[u8; 16]>,
    /// Client owners reused across setups (a reused owner replaces its old record, so
    /// the server's client and session tables stay bounded).
    owners: Vec<Vec<u8>>,
    /// The op just encoded has a length field that lies.
    lied: bool,
    /// The session's client id (0 without one), for ops that name a client.
    clientid: u64,
    /// READ counts and READDIR maxcounts of the COMPOUND being built, by op index.
    limits: Vec<(usize, u32)>,
    /// The session's id, for DESTROY_SESSION and BIND_CONN_TO_SESSION.
    sessionid: [u8; 16],
    /// The next OPEN is well-formed (access, deny, owner, claim NULL, plain name).
    plain_open: bool,
    /// An OPEN came earlier in this COMPOUND: stateids are often CURRENT.
    opened: bool,
}

impl V4Gen {
    pub fn new(seed: u64, work: Vec<u8>) -> V4Gen {
        let owners = (0..6)
            .map(|i| format!("fuzz-v4-{seed}-{i}").into_bytes())
            .collect();
        V4Gen {
            rng: Rng::new(seed ^ 0x7634_7634),
            files: Vec::new(),
            dirs: Vec::new(),
            work,
            root: Vec::new(),
            stateids: Vec::new(),
            owners,
            lied: false,
            clientid: 0,
            sessionid: [0; 16],
            limits: Vec::new(),
            plain_open: false,
            opened: false,
        }
    }

    pub fn learn_fh(&mut self, fh: &[u8], dir: bool) {
        if fh == self.root.as_slice() || fh.is_empty() {
            return;
        }
        let pool = if dir { &mut self.dirs } else { &mut self.files };
        if pool.iter().any(|h| h == fh) {
            return;
        }
        if pool.len() >= 64 {
            let i = 4 + self.rng.below(60);
            pool[i] = fh.to_vec();
        } else {
            pool.push(fh.to_vec());
        }
    }

    pub fn learn_stateid(&mut self, s: [u8; 16]) {
        if self.stateids.contains(&s) {
            return;
        }
        if self.stateids.len() >= 64 {
            let i = self.rng.below(64);
            self.stateids[i] = s;
        } else {
            self.stateids.push(s);
        }
    }

    /// EXCHANGE_ID alone (RFC 8881 §18.35): one of a few owners, a random or fixed
    /// verifier, flags mostly ordinary.
    pub fn exchange_id(&mut self) -> Compound {
        let r = &mut self.rng;
        let owner = if r.chance(1, 16) {
            let n = *r.pick(&[0usize, 1024, 1025, 4096]);
            vec![b'o'; n]
        } else {
            r.pick(&self.owners).clone()
        };
        let mut e = Enc::default();
        e.u32(OP_EXCHANGE_ID);
        let verf = if r.chance(1, 3) { 7u64 } else { r.next_u64() };
        e.u64(verf).var(&owner);
        let flags = match r.below(8) {
            0 => r.u32(),
            1 => EXCHGID4_FLAG_CONFIRMED_R | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A,
            _ => 0x1 | 0x2 | 0x10000,
        };
        e.u32(flags).u32(0); // SP4_NONE
        if r.chance(1, 2) {
            e.u32(0);
        } else {
            e.u32(1).var(b"fuzz.example").var(b"nfsgw-fuzz");
            e.u64(r.next_u64()).u32(u32v(r));
        }
        wrap(Vec::new(), 1, 1, vec![OP_EXCHANGE_ID], e.0, None)
    }

    /// CREATE_SESSION alone (RFC 8881 §18.36): usually ordinary channel attributes,
    /// one time in 4 hostile ones (0, huge, back-channel flags, RDMA ird).
    pub fn create_session(&mut self, clientid: u64, seq: u32) -> Compound {
        let r = &mut self.rng;
        let hostile = r.chance(1, 4);
        let mut e = Enc::default();
        e.u32(OP_CREATE_SESSION).u64(clientid).u32(seq);
        let flags = if hostile { u32v(r) } else { 0x2 };
        e.u32(flags);
        for fore in [true, false] {
            if hostile && r.chance(1, 2) {
                e.u32(u32v(r)); // header pad
                for _ in 0..5 {
                    e.u32(u32v(r));
                }
                match r.below(4) {
                    0 => {
                        e.u32(1).u32(u32v(r));
                    }
                    1 => {
                        e.u32(u32v(r));
                    }
                    _ => {
                        e.u32(0);
                    }
                }
            } else {
                let (req, resp, ops, n) = if fore {
                    (1 << 20 | 4096, 1 << 20 | 4096, 64, 8)
                } else {
                    (4096, 4096, 2, 1)
                };
                e.u32(0).u32(req).u32(resp).u32(8192).u32(ops).u32(n).u32(0);
            }
        }
        e.u32(NFS4_CALLBACK); // cb_program
        match if hostile { r.below(4) } else { 1 } {
            0 => {
                e.u32(0);
            }
            1 => {
                e.u32(1).u32(1).fixed(&auth_sys());
            }
            2 => {
                e.u32(2).u32(0).u32(6); // RPCSEC_GSS: no body follows (hostile)
            }
            _ => {
                e.u32(u32v(r));
            }
        }
        wrap(Vec::new(), 1, 1, vec![OP_CREATE_SESSION], e.0, None)
    }

    /// SEQUENCE + RECLAIM_COMPLETE (RFC 8881 §18.51), then PUTROOTFH, LOOKUP of the
    /// work area, GETFH, SAVEFH and LOOKUP+GETFH of each of `names` (RESTOREFH between).
    pub fn setup_lookups(&mut self, s: &Session, names: &[&[u8]]) -> Compound {
        let slot = 0;
        let seqid = s.slots[slot];
        let mut o = Ops::new()
            .sequence(s.sessionid, seqid)
            .reclaim_complete()
            .putrootfh()
            .getfh()
            .lookup(&self.work)
            .getfh()
            .savefh();
        let mut ops = vec![OP_SEQUENCE, OP_RECLAIM_COMPLETE, OP_PUTROOTFH, OP_GETFH];
        ops.extend([OP_LOOKUP, OP_GETFH, OP_SAVEFH]);
        for n in names {
            o = o.lookup(n).getfh().restorefh();
            ops.extend([OP_LOOKUP, OP_GETFH, OP_RESTOREFH]);
        }
        Compound {
            args: o.args(),
            claimed: o.n,
            ops,
            tag: Vec::new(),
            minor: 1,
            seq: Some((slot, seqid)),
            limits: Vec::new(),
        }
    }

    /// A fuzz COMPOUND on session `s` (None: no session yet).
    pub fn next(&mut self, s: Option<&Session>) -> Compound {
        let mut e = Enc::default();
        let mut ops = Vec::new();
        let mut seq = None;
        self.clientid = s.map_or(0, |s| s.clientid);
        self.limits.clear();
        self.sessionid = s.map_or([0; 16], |s| s.sessionid);
        let start_seq = s.is_some() && !self.rng.chance(1, 20);
        if let (true, Some(s)) = (start_seq, s) {
            let slot = if self.rng.chance(1, 8) {
                self.rng.below(s.slots.len() + 2)
            } else {
                0
            };
            let cur = s.slots.get(slot).copied().unwrap_or(1);
            let seqid = match self.rng.below(60) {
                0 => cur.wrapping_sub(1), // a retry of the last one
                1 => cur.wrapping_add(1),
                2 => cur.wrapping_add(u32::MAX / 2),
                3 => 0,
                4 => u32::MAX,
                _ => cur,
            };
            let sid = match self.rng.below(40) {
                0 => {
                    let mut x = s.sessionid;
                    x[self.rng.below(16)] ^= 1;
                    x
                }
                1 => [0u8; 16],
                _ => s.sessionid,
            };
            let highest = match self.rng.below(16) {
                0 => u32v(&mut self.rng),
                _ => slot as u32,
            };
            e.u32(OP_SEQUENCE).fixed(&sid).u32(seqid).u32(slot as u32);
            e.u32(highest).bool(self.rng.chance(1, 3));
            ops.push(OP_SEQUENCE);
            if sid == s.sessionid && slot < s.slots.len() {
                seq = Some((slot, seqid));
            }
        }
        let mut n = 1 + self.rng.below(8);
        let mut fh = FhState::default();
        self.lied = false;
        if self.rng.chance(1, 6) && !self.files.is_empty() {
            // The shapes the reactor serves itself (nfs4/fast.rs, fast_io.rs):
            // PUTFH, READ | WRITE [, GETATTR] | COMMIT, with hostile values.
            let h = self.rng.pick(&self.files).clone();
            e.u32(22).var(&h);
            ops.push(22);
            let op = *self.rng.pick(&[25u32, 25, 38, 38, 5, 9]);
            self.op(op, &mut e, &mut fh, &mut ops);
            if op != 5 && self.rng.chance(1, 2) && !self.lied {
                e.u32(9).u32(2).u32(0x0010_011a).u32(0x0030_a23a);
                ops.push(9);
            }
            n = 0;
        } else if self.rng.chance(3, 4) {
            // Most COMPOUNDs start from a real handle so the ops after it reach the
            // code behind the filehandle checks.
            let pool = if self.rng.chance(1, 3) || self.files.is_empty() {
                &self.dirs
            } else {
                &self.files
            };
            if !pool.is_empty() {
                let h = self.rng.pick(pool).clone();
                e.u32(22).var(&h);
                ops.push(22);
                n = n.max(2) - 1;
            }
        }
        self.opened = false;
        for _ in 0..n {
            let op = self.pick_op(&fh);
            if op == 18 && self.rng.chance(1, 2) && !self.dirs.is_empty() {
                // Half the OPENs get a directory to open in, and are well-formed.
                let d = self.rng.pick(&self.dirs).clone();
                e.u32(22).var(&d);
                ops.push(22);
                fh.root_risk = false;
                self.plain_open = true;
            }
            let plain = self.plain_open;
            self.op(op, &mut e, &mut fh, &mut ops);
            self.plain_open = false;
            if op == 18 {
                self.opened = true;
            }
            if plain && self.rng.chance(2, 3) {
                // Use the open at once: the CURRENT stateid reaches the open and
                // lock state code (RFC 8881 §16.2.3.1.2).
                self.follow_open(&mut e, &mut ops);
            }
            if self.lied {
                // The server reads the ops after a lying length from the wrong place:
                // end the COMPOUND here so every result's opnum stays checkable.
                break;
            }
        }
        let r = &mut self.rng;
        let tag = match r.below(24) {
            0 => vec![b't'; 1024],
            1 => vec![b't'; 1025],
            7 => vec![b't'; 70_000],
            2 => vec![0xff; 3],
            3..=6 => b"fuzz".to_vec(),
            _ => Vec::new(),
        };
        let minor = match r.below(48) {
            0 => 0,
            1 => 3,
            2 => u32::MAX,
            3..=12 => 2,
            _ => 1,
        };
        let claimed = match r.below(48) {
            0 => ops.len() as u32 + 1 + r.below(3) as u32,
            1 => u32::MAX,
            2 => 0,
            3 => 65,
            _ => ops.len() as u32,
        };
        let seq = if served_minor(minor) && claimed != 0 {
            seq
        } else {
            None
        };
        let mut c = wrap(tag, minor, claimed, ops, e.0, seq);
        c.limits = std::mem::take(&mut self.limits);
        c
    }

    /// The next operation: weighted toward filehandle and I/O operations, every
    /// NFSv4.1 operation reachable, 1 in 30 an illegal number.
    fn pick_op(&mut self, fh: &FhState) -> u32 {
        let r = &mut self.rng;
        let op = match r.below(60) {
            0 => *r.pick(&[0u32, 1, 2, 59, 60, OP_ILLEGAL, u32::MAX, 10043]),
            1..=8 => 22,  // PUTFH
            9..=10 => 24, // PUTROOTFH (+ LOOKUP of the work area)
            11..=13 => 15,
            14..=15 => 10,
            16..=17 => 25,
            18..=19 => 38,
            20..=21 => 18,
            22..=23 => 9,
            24 => 34,
            25 => 12,
            26 => 26,
            27..=29 => 59 + r.below(17) as u32, // NFSv4.2's (illegal in 4.1)
            _ => 3 + r.below(56) as u32,
        };
        if fh.root_risk && !harmless(op) {
            22 // PUTFH of a work-area handle first
        } else {
            op
        }
    }

    fn fh_any(&mut self) -> Vec<u8> {
        let r = &mut self.rng;
        let pool = if r.chance(1, 3) && !self.dirs.is_empty() {
            &self.dirs
        } else {
            &self.files
        };
        v::handle(r, pool)
    }

    fn stateid(&mut self, e: &mut Enc) {
        let r = &mut self.rng;
        if self.opened && r.chance(1, 2) {
            // RFC 8881 §16.2.3.1.2: the stateid the OPEN before left.
            e.u32(1).fixed(&[0u8; 12]);
            return;
        }
        let (seqid, other) = match r.below(12) {
            0 => (0, [0u8; 12]),         // anonymous
            1 => (u32::MAX, [0xff; 12]), // READ bypass
            2 => (1, [0u8; 12]),         // CURRENT
            3 => (u32v(r), {
                let b = r.bytes(12);
                let mut o = [0u8; 12];
                o.copy_from_slice(&b);
                o
            }),
            _ if !self.stateids.is_empty() => {
                let s = *r.pick(&self.stateids);
                let mut o = [0u8; 12];
                o.copy_from_slice(&s[4..]);
                let sq = u32::from_be_bytes([s[0], s[1], s[2], s[3]]);
                let sq = match r.below(8) {
                    0 => 0,
                    1 => u32::MAX,
                    2 => sq.wrapping_add(1),
                    _ => sq,
                };
                (sq, o)
            }
            _ => (0, [0u8; 12]),
        };
        e.u32(seqid).fixed(&other);
    }

    /// bitmap4: ordinary attributes, or hostile lengths (0, 3, 1000 words) and bits
    /// past the supported ones.
    fn bitmap(&mut self, e: &mut Enc) {
        let r = &mut self.rng;
        match r.below(10) {
            0 => {
                e.u32(0);
            }
            1 => {
                e.u32(3).u32(u32::MAX).u32(u32::MAX).u32(u32::MAX);
            }
            2 => {
                e.u32(1000);
                for _ in 0..1000 {
                    e.u32(r.u32());
                }
            }
            3 => {
                e.u32(2).u32(r.u32()).u32(r.u32());
            }
            4 => {
                e.u32(u32::MAX); // a length with nothing behind it
            }
            _ => {
                // type, change, size, fileid, mode, numlinks, owner, time_modify...
                e.u32(2).u32(0x0010_011a).u32(0x0030_a23a);
            }
        }
    }

    /// fattr4 with settable attributes (size 4, mode 33, owner 36, owner_group 37,
    /// time_access_set 48, time_modify_set 54) and hostile values, sometimes with
    /// unknown or read-only bits, or an attrlist longer or shorter than the bits say.
    fn fattr(&mut self, e: &mut Enc) {
        let r = &mut self.rng;
        let mut bits = [0u32; 2];
        let mut vals = Enc::default();
        if r.chance(1, 2) {
            bits[0] |= 1 << 4;
            vals.u64(u64v(r));
        }
        if r.chance(1, 2) {
            bits[1] |= 1 << 1;
            vals.u32(*r.pick(&[0o644, 0o7777, 0, u32::MAX, 0o40755, 0o100777]));
        }
        for bit in [4, 5] {
            if r.chance(1, 4) {
                bits[1] |= 1 << bit;
                let s: Vec<u8> = match r.below(6) {
                    0 => Vec::new(),
                    1 => vec![b'u'; 4096],
                    2 => vec![0xff, 0xfe, 0x80],
                    3 => b"root".to_vec(),
                    4 => b"4294967295".to_vec(),
                    _ => b"0".to_vec(),
                };
                vals.var(&s);
            }
        }
        for bit in [16, 22] {
            if r.chance(1, 3) {
                bits[1] |= 1 << bit;
                let how = *r.pick(&[0u32, 1, 1, 2, u32::MAX]);
                vals.u32(how);
                if how == 1 {
                    let secs = *r.pick(&[0u64, 1, u64::MAX, 1 << 63, (1 << 63) - 1, 1 << 40]);
                    let ns = *r.pick(&[0u32, 999_999_999, 1_000_000_000, u32::MAX]);
                    vals.u64(secs).u32(ns);
                }
            }
        }
        match r.below(12) {
            0 => {
                bits[0] |= 1 << 1; // type: read-only
                vals.u32(2);
            }
            1 => {
                e.u32(3).u32(bits[0]).u32(bits[1]).u32(1 << 31);
                e.var(&vals.0);
                return;
            }
            2 => {
                let n = vals.0.len();
                vals.0.truncate(n / 2);
            }
            3 => vals.0.extend(r.bytes(8)),
            _ => {}
        }
        e.u32(2).u32(bits[0]).u32(bits[1]).var(&vals.0);
    }

    fn component(&mut self, e: &mut Enc) {
        let n = v::name(&mut self.rng);
        e.var(&n);
    }

    fn lock_owner(&mut self, e: &mut Enc) {
        let r = &mut self.rng;
        e.u64(if r.chance(1, 8) {
            r.next_u64()
        } else {
            self.clientid
        });
        let o = match r.below(6) {
            0 => Vec::new(),
            1 => vec![b'L'; 1025],
            _ => vec![b'l', b'0' + r.below(3) as u8],
        };
        e.var(&o);
    }

    /// Encodes operation `op` (its number and arguments) into `e`.
    fn op(&mut self, op: u32, e: &mut Enc, fh: &mut FhState, ops: &mut Vec<u32>) {
        ops.push(op);
        e.u32(op);
        match op {
            3 => {
                e.u32(u32v(&mut self.rng));
            }
            4 => {
                e.u32(u32v(&mut self.rng));
                self.stateid(e);
            }
            5 => {
                e.u64(u64v(&mut self.rng)).u32(u32v(&mut self.rng));
            }
            6 => {
                let t = *self
                    .rng
                    .pick(&[1u32, 2, 2, 3, 4, 5, 6, 7, 8, 0, 9, u32::MAX]);
                e.u32(t);
                match t {
                    5 => {
                        let p = v::path(&mut self.rng);
                        e.var(&p);
                    }
                    3 | 4 => {
                        e.u32(u32v(&mut self.rng)).u32(u32v(&mut self.rng));
                    }
                    _ => {}
                }
                self.component(e);
                self.fattr(e);
            }
            7 | 30 | 57 => {
                let id = if self.rng.chance(1, 2) {
                    self.clientid
                } else {
                    u64v(&mut self.rng)
                };
                e.u64(id);
            }
            8 | 45 => self.stateid(e),
            9 | 17 | 37 => {
                if op == 9 {
                    self.bitmap(e)
                } else {
                    self.fattr(e)
                }
            }
            11 => self.component(e),
            12 => {
                let r = &mut self.rng;
                e.u32(*r.pick(&[1u32, 2, 3, 4, 0, 5, u32::MAX]));
                e.bool(r.chance(1, 10));
                range(r, e);
                if r.chance(2, 3) {
                    e.u32(1).u32(u32v(r));
                    self.stateid(e);
                    e.u32(u32v(&mut self.rng));
                    self.lock_owner(e);
                } else {
                    e.u32(0);
                    self.stateid(e);
                    e.u32(u32v(&mut self.rng));
                }
            }
            13 => {
                let r = &mut self.rng;
                e.u32(*r.pick(&[1u32, 2, 3, 4, 0, u32::MAX]));
                range(r, e);
                self.lock_owner(e);
            }
            14 => {
                let r = &mut self.rng;
                e.u32(*r.pick(&[1u32, 2, 0, u32::MAX])).u32(u32v(r));
                self.stateid(e);
                range(&mut self.rng, e);
            }
            15 => self.component(e),
            16 => fh.root_risk = true, // LOOKUPP of the work area is the root
            18 => self.open(e),
            19 => {
                e.bool(self.rng.chance(1, 2));
            }
            20 => {
                self.stateid(e);
                e.u32(u32v(&mut self.rng));
            }
            21 => {
                self.stateid(e);
                let r = &mut self.rng;
                e.u32(u32v(r))
                    .u32(*r.pick(&[0u32, 1, 2, 3, 4, 0x100, u32::MAX]));
                e.u32(*r.pick(&[0u32, 1, 3, u32::MAX]));
            }
            22 => {
                let h = if self.rng.chance(1, 4) && !self.dirs.is_empty() {
                    self.rng.pick(&self.dirs).clone()
                } else {
                    self.fh_any()
                };
                e.var(&h);
                fh.root_risk = false;
            }
            23 => fh.root_risk = true,
            24 => {
                // PUTROOTFH always followed by LOOKUP of the work area.
                e.u32(OP_LOOKUP).var(&self.work.clone());
                ops.push(OP_LOOKUP);
                fh.root_risk = false;
            }
            25 => {
                self.stateid(e);
                let r = &mut self.rng;
                let count = u32v(r);
                e.u64(u64v(r)).u32(count);
                self.limits.push((ops.len() - 1, count));
            }
            26 => {
                let r = &mut self.rng;
                e.u64(if r.chance(1, 2) { 0 } else { u64v(r) });
                let verf = if r.chance(1, 2) {
                    [0u8; 8]
                } else {
                    r.next_u64().to_be_bytes()
                };
                let maxcount = u32v(r);
                e.fixed(&verf).u32(u32v(r)).u32(maxcount);
                self.limits.push((ops.len() - 1, maxcount));
                self.bitmap(e);
            }
            27 | 10 | 31 | 32 => {
                if op == 31 {
                    fh.root_risk = fh.saved_risk;
                }
                if op == 32 {
                    fh.saved_risk = fh.root_risk;
                }
            }
            28 | 33 => self.component(e),
            29 => {
                self.component(e);
                self.component(e);
            }
            34 => {
                self.stateid(e);
                self.fattr(e);
            }
            35 => {
                let r = &mut self.rng;
                e.u64(r.next_u64()).var(b"fuzz-v40").u32(NFS4_CALLBACK);
                e.var(b"tcp").var(b"127.0.0.1.8.1").u32(1);
            }
            36 => {
                e.u64(u64v(&mut self.rng)).u64(self.rng.next_u64());
            }
            38 => {
                self.stateid(e);
                let r = &mut self.rng;
                e.u64(u64v(r)).u32(*r.pick(&[0u32, 1, 2, 3, u32::MAX]));
                let n = match r.below(10) {
                    0 => 0,
                    1 => 1 << 20,
                    2 => (1 << 20) + 1,
                    3 => 65536,
                    _ => r.below(9000),
                };
                if r.chance(1, 12) {
                    // A length field that lies about the bytes behind it.
                    e.u32(u32v(r));
                    e.0.extend(vec![0x5a; n.div_ceil(4) * 4]);
                    self.lied = true;
                } else {
                    e.var(&vec![0x5a; n]);
                }
            }
            39 => self.lock_owner(e),
            40 => {
                let r = &mut self.rng;
                e.u32(u32v(r));
                sec_parms(r, e);
            }
            41 => {
                let r = &mut self.rng;
                let sid = if r.chance(1, 2) {
                    self.sessionid.to_vec()
                } else {
                    r.bytes(16)
                };
                e.fixed(&sid).u32(*r.pick(&[1u32, 2, 3, 0, u32::MAX]));
                e.bool(r.chance(1, 2));
            }
            42 => {
                let c = self.exchange_id();
                e.0.extend_from_slice(&c.args[16..]);
            }
            43 => {
                let r = &mut self.rng;
                let (id, sq) = (r.next_u64(), u32v(r));
                let c = self.create_session(id, sq);
                e.0.extend_from_slice(&c.args[16..]);
                // Its hostile channel attributes and security parameters may have
                // lengths and discriminants that make the server read the ops after
                // it as arguments: end the COMPOUND here.
                self.lied = true;
            }
            44 => {
                // The session itself one time in 4: later COMPOUNDs then meet
                // NFS4ERR_BADSESSION and the runner sets up another.
                let b = if self.rng.chance(1, 4) {
                    self.sessionid.to_vec()
                } else {
                    self.rng.bytes(16)
                };
                e.fixed(&b);
            }
            46 => {
                let r = &mut self.rng;
                e.bool(r.chance(1, 2)).u32(1).u32(u32v(r));
                e.u64(u64v(r)).u32(u32v(r)).u64(u64v(r)).u32(u32v(r));
                self.bitmap(e);
                self.bitmap(e);
            }
            47 => {
                let r = &mut self.rng;
                e.fixed(&r.bytes(16))
                    .u32(u32v(r))
                    .u32(u32v(r))
                    .u32(1)
                    .u32(u32v(r));
            }
            48 => {
                let r = &mut self.rng;
                e.u32(u32v(r)).u32(u32v(r)).u64(u64v(r)).fixed(&[0; 8]);
            }
            49 => {
                let r = &mut self.rng;
                e.u64(u64v(r)).u64(u64v(r)).bool(false);
                self.stateid(e);
                e.u32(1).u64(u64v(&mut self.rng)).u32(0);
                e.u32(1).var(&[1, 2, 3]);
            }
            50 => {
                let r = &mut self.rng;
                e.bool(false).u32(u32v(r)).u32(*r.pick(&[1u32, 2, 3]));
                range(r, e);
                e.u64(u64v(r));
                self.stateid(e);
                e.u32(u32v(&mut self.rng));
            }
            51 => {
                let r = &mut self.rng;
                e.bool(false).u32(1).u32(3).u32(*r.pick(&[1u32, 2, 3, 9]));
                range(r, e);
                self.stateid(e);
                e.var(&[]);
            }
            52 => {
                e.u32(*self.rng.pick(&[0u32, 1, 2, u32::MAX]));
            }
            53 => {
                let r = &mut self.rng;
                e.fixed(&r.bytes(16))
                    .u32(u32v(r))
                    .u32(u32v(r))
                    .u32(u32v(r))
                    .bool(false);
            }
            54 => {
                e.var(&[7; 32]).var(&[9; 20]);
            }
            55 => {
                let r = &mut self.rng;
                let n = *r.pick(&[0u32, 1, 3, 1000, u32::MAX]);
                e.u32(n);
                for _ in 0..n.min(1000) {
                    self.stateid(e);
                }
            }
            56 => {
                let r = &mut self.rng;
                e.u32(u32v(r));
                match r.below(3) {
                    0 => e.u32(4),
                    1 => e.u32(1).u32(u32v(r)),
                    _ => e.u32(u32v(r)),
                };
            }
            58 => {
                e.bool(self.rng.chance(1, 2));
            }
            59..=75 => self.op42(op, e),
            _ => {
                // Illegal operations: a little junk after them.
                let n = 4 * self.rng.below(4);
                let b = self.rng.bytes(n);
                e.0.extend(b);
            }
        }
    }

    /// NFSv4.2's arguments (RFC 7862 §15, RFC 8276 §8.4): hostile offsets, lengths
    /// and counts near 2^64, xattr names empty, long or with NUL, large values.
    fn op42(&mut self, op: u32, e: &mut Enc) {
        match op {
            // ALLOCATE, DEALLOCATE, IO_ADVISE (+ hints), WRITE_SAME's start.
            59 | 62 | 63 | 70 => {
                self.stateid(e);
                range(&mut self.rng, e);
                if op == 63 {
                    self.bitmap(e);
                }
            }
            // COPY, CLONE: two stateids, offsets, count; COPY's requirements and
            // (rarely) a source server.
            60 | 71 => {
                self.stateid(e);
                self.stateid(e);
                e.u64(u64v(&mut self.rng));
                range(&mut self.rng, e);
                if op == 60 {
                    e.bool(self.rng.chance(1, 2)).bool(self.rng.chance(1, 2));
                    if self.rng.chance(1, 8) {
                        e.u32(1).u32(1).var(b"elsewhere");
                    } else {
                        e.u32(0);
                    }
                }
            }
            // OFFLOAD_CANCEL, OFFLOAD_STATUS, COPY_NOTIFY's start.
            61 | 66 | 67 => self.stateid(e),
            // READ_PLUS, SEEK.
            68 | 69 => {
                self.stateid(e);
                e.u64(u64v(&mut self.rng)).u32(u32v(&mut self.rng) % 4);
            }
            72 | 75 => self.xattr_name(e),
            73 => {
                e.u32(self.rng.below(4) as u32);
                self.xattr_name(e);
                let n = match self.rng.below(8) {
                    0 => 65_537,
                    1 => 70_000,
                    _ => self.rng.below(64),
                };
                e.var(&vec![b'v'; n]);
            }
            74 => {
                e.u64(u64v(&mut self.rng)).u32(u32v(&mut self.rng));
            }
            _ => {
                let n = 4 * self.rng.below(4);
                let b = self.rng.bytes(n);
                e.0.extend(b);
            }
        }
    }

    /// An xattr name: short, empty, 255 and 256 bytes, with NUL or '/'.
    fn xattr_name(&mut self, e: &mut Enc) {
        let name: Vec<u8> = match self.rng.below(8) {
            0 => Vec::new(),
            1 => vec![b'n'; 255],
            2 => vec![b'n'; 256],
            3 => b"a\0b".to_vec(),
            4 => b"a/b".to_vec(),
            _ => format!("x{}", self.rng.below(4)).into_bytes(),
        };
        e.var(&name);
    }

    /// OPEN4args (RFC 8881 §18.16): every claim type and create mode.
    fn open(&mut self, e: &mut Enc) {
        if self.plain_open {
            return self.open_plain(e);
        }
        let r = &mut self.rng;
        e.u32(u32v(r));
        let access = *r.pick(&[1u32, 2, 3, 3, 0, 4, 0x100 | 1, 0x300 | 2, 0x10003, u32::MAX]);
        e.u32(access).u32(*r.pick(&[0u32, 0, 1, 2, 3, 4, u32::MAX]));
        e.u64(if r.chance(1, 8) {
            r.next_u64()
        } else {
            self.clientid
        });
        let owner = match r.below(8) {
            0 => Vec::new(),
            1 => vec![b'O'; 1025],
            _ => vec![b'o', b'0' + r.below(4) as u8],
        };
        e.var(&owner);
        if r.chance(1, 2) {
            e.u32(1);
            let mode = *r.pick(&[0u32, 1, 2, 3, 3, 4, u32::MAX]);
            e.u32(mode);
            match mode {
                0 | 1 => self.fattr(e),
                2 => {
                    e.u64(self.rng.next_u64());
                }
                3 => {
                    e.u64(self.rng.next_u64());
                    self.fattr(e);
                }
                _ => {}
            }
        } else {
            e.u32(*self.rng.pick(&[0u32, 0, 0, 2, u32::MAX]));
        }
        let claim = *self
            .rng
            .pick(&[0u32, 0, 0, 0, 1, 2, 3, 4, 4, 5, 6, 7, u32::MAX]);
        e.u32(claim);
        match claim {
            0 | 3 => self.component(e),
            1 => {
                e.u32(*self.rng.pick(&[0u32, 1, 2, 3, u32::MAX]));
            }
            2 => {
                self.stateid(e);
                self.component(e);
            }
            5 => self.stateid(e),
            _ => {}
        }
    }
}

impl V4Gen {
    /// A well-formed OPEN4args: read/write/both, deny none, a plain owner of this
    /// client, CREATE UNCHECKED with no attributes or NOCREATE, claim NULL of an
    /// existing or new plain name; so LOCK, READ, WRITE, CLOSE after it get a real
    /// open stateid.
    /// READ, WRITE, LOCK (a new lock owner), LOCKT or CLOSE on the OPEN just before,
    /// with the CURRENT stateid and hostile offsets, counts and ranges.
    fn follow_open(&mut self, e: &mut Enc, ops: &mut Vec<u32>) {
        let r = &mut self.rng;
        let op = *r.pick(&[25u32, 38, 12, 12, 13, 4, 34]);
        ops.push(op);
        e.u32(op);
        let current = |e: &mut Enc| {
            e.u32(1).fixed(&[0u8; 12]);
        };
        match op {
            25 => {
                current(e);
                let count = u32v(r);
                e.u64(u64v(r)).u32(count);
                self.limits.push((ops.len() - 1, count));
            }
            38 => {
                current(e);
                let off = if r.chance(1, 2) {
                    r.below(1 << 20) as u64
                } else {
                    u64v(r)
                };
                let n = r.below(9000);
                e.u64(off).u32(r.below(3) as u32).var(&vec![0xa5; n]);
            }
            12 => {
                e.u32(*r.pick(&[1u32, 2, 3, 4])).bool(false);
                range(r, e);
                e.u32(1).u32(0);
                current(e);
                e.u32(0).u64(self.clientid).var(b"l0");
            }
            13 => {
                e.u32(*r.pick(&[1u32, 2]));
                range(r, e);
                e.u64(self.clientid).var(b"l1");
            }
            34 => {
                // SETATTR of the size alone, from the 64-bit edges (truncate, extend,
                // past 2^63 and the file system's limit).
                current(e);
                let mut v = Enc::default();
                v.u64(u64v(r));
                e.u32(1).u32(1 << 4).var(&v.0);
            }
            _ => {
                e.u32(0);
                current(e);
            }
        }
    }

    fn open_plain(&mut self, e: &mut Enc) {
        let r = &mut self.rng;
        e.u32(0)
            .u32(*r.pick(&[1u32, 2, 3]))
            .u32(0)
            .u64(self.clientid);
        e.var(&[b'o', b'0' + r.below(3) as u8]);
        if r.chance(1, 2) {
            e.u32(1).u32(0).u32(0).var(&[]); // CREATE, UNCHECKED4, empty fattr4
        } else {
            e.u32(0);
        }
        let names: [&[u8]; 6] = [b"f0", b"f1", b"f2", b"f3", b"n0", b"n1"];
        let name = *r.pick(&names);
        e.u32(0).var(name);
    }
}

/// Where the current and saved filehandles may be the export root.
#[derive(Default)]
struct FhState {
    root_risk: bool,
    saved_risk: bool,
}

/// offset + length of a byte range: wrapping 2^64, length 0, NFS4_UINT64_MAX.
fn range(r: &mut Rng, e: &mut Enc) {
    let off = u64v(r);
    let len = match r.below(6) {
        0 => u64::MAX,
        1 => 0,
        2 => u64::MAX - off,
        3 => (u64::MAX - off).wrapping_add(1),
        _ => u64v(r),
    };
    e.u64(off).u64(len);
}

fn auth_sys() -> Vec<u8> {
    let mut b = Enc::default();
    b.u32(0).var(b"fuzz").u32(0).u32(0).u32(0);
    b.0
}

/// callback_sec_parms4<>: a hostile count or hostile flavors.
fn sec_parms(r: &mut Rng, e: &mut Enc) {
    match r.below(5) {
        0 => {
            e.u32(u32::MAX);
        }
        1 => {
            e.u32(2).u32(0).u32(1).fixed(&auth_sys());
        }
        2 => {
            e.u32(1).u32(6).u32(1).var(&[]).var(&[]);
        }
        3 => {
            // A flavor with no arm in callback_sec_parms4 (not 0, 1, 6): the server
            // cannot decode it, so nothing after it is read as arguments.
            e.u32(1).u32(*r.pick(&[2u32, 3, 5, 7, 390_003, u32::MAX]));
        }
        _ => {
            e.u32(1).u32(1).fixed(&auth_sys());
        }
    }
}

/// COMPOUND4args: tag, minor version, op count, the encoded ops.
fn wrap(
    tag: Vec<u8>,
    minor: u32,
    claimed: u32,
    ops: Vec<u32>,
    body: Vec<u8>,
    seq: Option<(usize, u32)>,
) -> Compound {
    let mut e = Enc::default();
    e.var(&tag).u32(minor).u32(claimed);
    e.0.extend_from_slice(&body);
    Compound {
        args: e.0,
        ops,
        claimed,
        tag,
        minor,
        seq,
        limits: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compounds_are_deterministic_and_cover_every_op() {
        let mk = || {
            let mut g = V4Gen::new(5, b"fz-5-v4".to_vec());
            g.files.push(vec![1; 20]);
            g.dirs.push(vec![2; 20]);
            g.root = vec![3; 20];
            g
        };
        let (mut a, mut b) = (mk(), mk());
        let s = Session {
            slots: vec![1; 4],
            ..Default::default()
        };
        let s2 = s.clone();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4000 {
            let x = a.next(Some(&s));
            let y = b.next(Some(&s2));
            assert_eq!(x.args, y.args);
            assert_eq!(x.args.len() % 4, 0);
            seen.extend(x.ops.iter().copied());
        }
        for op in 3..=58 {
            assert!(seen.contains(&op), "op {op} never generated");
        }
        assert!(seen.contains(&OP_ILLEGAL) && seen.contains(&0));
    }

    #[test]
    fn exchange_id_skips_its_header_in_the_op() {
        let mut g = V4Gen::new(1, b"w".to_vec());
        let c = g.exchange_id();
        // tag (empty) + minor + count, then the opnum.
        assert_eq!(
            &c.args[..16],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 42]
        );
    }
}
