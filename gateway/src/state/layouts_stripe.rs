//! Striped layouts (RFC 8435 §6, "Striping via Sparse Mapping"): a mirror that names
//! W data servers (`ffm_data_servers`) sends the bytes of stripe unit i of the file —
//! offsets `i × ffl_stripe_unit` up to the next unit — to its (i mod W)-th data
//! server, at the file's own offsets (sparse: each data server's copy has holes where
//! the others' units are). Our data servers all serve the one object on the store, so
//! the holes are the other servers' bytes, not holes.
//!
//! Who gets them: only clients whose EXCHANGE_ID named an implementation in
//! `pnfs.stripe_clients` (RFC 8881 §18.35.3, `Client::stripes`): the Linux 6.1 client
//! refuses a mirror of more than one data server (`ff_layout_alloc_lseg`: `ds_count !=
//! 1` is an error), so it keeps one data server per mirror. Which layouts: READ
//! layouts always (any data server serves any file); RW layouts only where the store
//! writes in place (`Stripe::rw`: `fs` with `shared = true`, `config::pnfs::layouts_on`
//! says why not s3). A striped RW layout still has one mirror: a client never writes
//! a byte twice.
//!
//! Placement: the W servers start at the file's hash position and step over servers
//! that are down, as a single server does (`Devices::placement_up`); a layout
//! remembers every server it named (`mask_of`), so a server going down recalls the
//! striped layouts naming it as any other.

use super::Devices;
use crate::config::MAX_LAYOUT_SERVERS;

/// `[pnfs]`'s striping: how wide, for whom, and whether RW layouts too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripe {
    /// Data servers a striped mirror names (`pnfs.stripe_width`); 1: no striping.
    pub width: u32,
    /// nii_names (RFC 8881 §18.35.1 nfs_impl_id4) whose layouts may be striped,
    /// matched byte for byte (`pnfs.stripe_clients`).
    pub clients: Vec<String>,
    /// RW layouts may be striped: the store writes in place.
    pub rw: bool,
}

impl Default for Stripe {
    /// No striping (a table built without `[pnfs]`'s keys: the tests').
    fn default() -> Stripe {
        Stripe {
            width: 1,
            clients: Vec::new(),
            rw: false,
        }
    }
}

impl Stripe {
    /// Whether a client naming its implementation `nii_name` gets striped layouts.
    pub fn accepts(&self, nii_name: &[u8]) -> bool {
        self.width > 1 && self.clients.iter().any(|c| c.as_bytes() == nii_name)
    }

    /// Whether a layout of `iomode` (`write`: RW) for a client that `accepts` is
    /// striped.
    pub fn applies(&self, client: bool, write: bool) -> bool {
        client && self.width > 1 && (!write || self.rw)
    }
}

impl Devices {
    /// The data servers of a layout of `fileid`, mirror by mirror, among those `up`
    /// accepts. Not `striped`: one server per mirror, as `placement_up`. Striped: each
    /// mirror names `stripe.width` servers (fewer when fewer are up), and mirror m
    /// starts m servers further round, so each stripe unit's mirrors are on different
    /// servers and every mirror has the same width (RFC 8435 §8: each mirror has the
    /// same striping pattern). A write layout has one mirror, a read layout up to
    /// `read_mirrors`, fewer when the layout would name more than
    /// `MAX_LAYOUT_SERVERS` servers in all. Empty when none is up.
    pub fn layout_up(
        &self,
        fileid: u64,
        write: bool,
        striped: bool,
        up: impl Fn(usize) -> bool,
    ) -> Vec<Vec<usize>> {
        let ring = self.ring(fileid, up);
        if ring.is_empty() {
            return Vec::new();
        }
        let width = if striped {
            (self.stripe.width as usize).clamp(1, ring.len())
        } else {
            1
        };
        let want = if write { 1 } else { self.read_mirrors as usize };
        let mirrors = want.min(ring.len()).min(MAX_LAYOUT_SERVERS / width).max(1);
        (0..mirrors)
            .map(|m| (0..width).map(|j| ring[(m + j) % ring.len()]).collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DataServer, Probe};
    use super::*;

    fn devices(n: usize, mirrors: u32, width: u32) -> Devices {
        Devices {
            servers: (0..n)
                .map(|i| DataServer {
                    addr: format!("10.0.0.{}:2049", i + 1).parse().unwrap(),
                    rdma: false,
                    probe: None,
                })
                .collect(),
            stripe_unit: 1 << 20,
            rsize: 1 << 20,
            wsize: 1 << 20,
            read_mirrors: mirrors,
            stripe: Stripe {
                width,
                clients: vec!["bench".into()],
                rw: false,
            },
            probe: Probe::default(),
        }
    }

    #[test]
    fn who_gets_stripes() {
        let s = devices(3, 1, 3).stripe;
        assert!(s.accepts(b"bench"));
        // Exact match: another implementation, a prefix, another case: none.
        for other in [
            &b"Linux 6.1.0-13-amd64"[..],
            b"benc",
            b"bench ",
            b"Bench",
            b"",
        ] {
            assert!(!s.accepts(other), "{other:?}");
        }
        // Width 1 is off, whoever asks.
        assert!(!devices(3, 1, 1).stripe.accepts(b"bench"));
        // READ layouts for a client that accepts; RW only where the store writes in
        // place; never for one that does not accept.
        assert!(s.applies(true, false) && !s.applies(true, true));
        assert!(!s.applies(false, false));
        let rw = Stripe { rw: true, ..s };
        assert!(rw.applies(true, true) && !rw.applies(false, true));
    }

    /// A striped layout names `width` distinct servers from the file's hash position
    /// (the unstriped layout's first server first), mirror m starting m further on;
    /// every mirror the same width, each stripe unit's mirrors on distinct servers.
    #[test]
    fn striped_placement_starts_at_the_files_server() {
        let d = devices(5, 2, 3);
        for fileid in 0..200u64 {
            let home = d.placement_up(fileid, true, |_| true)[0];
            let w = d.layout_up(fileid, true, true, |_| true);
            assert_eq!(w.len(), 1, "a write layout has one mirror");
            assert_eq!(w[0], vec![home, (home + 1) % 5, (home + 2) % 5]);
            let r = d.layout_up(fileid, false, true, |_| true);
            assert_eq!(r.len(), 2);
            assert_eq!(r[0], w[0]);
            assert_eq!(r[1], vec![(home + 1) % 5, (home + 2) % 5, (home + 3) % 5]);
            for (j, (a, b)) in r[0].iter().zip(&r[1]).enumerate() {
                assert_ne!(a, b, "stripe {j} mirrored on one server");
            }
            // Not striped: today's one server per mirror.
            let flat = d.layout_up(fileid, false, false, |_| true);
            assert_eq!(flat, vec![vec![home], vec![(home + 1) % 5]]);
            assert_eq!(
                flat.concat(),
                d.placement_up(fileid, false, |_| true),
                "the same servers as placement_up"
            );
        }
    }

    /// Servers that are down are stepped over; the width shrinks to the servers up;
    /// none up, no layout.
    #[test]
    fn striped_placement_skips_servers_that_are_down() {
        let d = devices(4, 1, 3);
        for fileid in 0..100u64 {
            let home = d.placement_up(fileid, true, |_| true)[0];
            let down = (home + 1) % 4;
            let l = d.layout_up(fileid, true, true, |i| i != down);
            assert_eq!(l, vec![vec![home, (home + 2) % 4, (home + 3) % 4]]);
            let two = d.layout_up(fileid, false, true, |i| i == home || i == down);
            assert_eq!(two, vec![vec![home, down]]);
            assert!(d.layout_up(fileid, false, true, |_| false).is_empty());
        }
    }

    /// Mirrors × width never passes `MAX_LAYOUT_SERVERS` (the reply's bound).
    #[test]
    fn a_layout_names_a_bounded_number_of_servers() {
        let d = devices(16, 8, 16);
        let l = d.layout_up(7, false, true, |_| true);
        assert_eq!((l.len(), l[0].len()), (1, 16));
        let d = devices(16, 8, 4);
        let l = d.layout_up(7, false, true, |_| true);
        assert_eq!((l.len(), l[0].len()), (4, 4));
        assert!(l.iter().map(Vec::len).sum::<usize>() <= MAX_LAYOUT_SERVERS);
    }
}
