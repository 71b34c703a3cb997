//! stateid4 (RFC 8881 §8.2): a 32-bit seqid and 12 opaque bytes.

/// A stateid as it travels on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stateid {
    pub seqid: u32,
    pub other: [u8; 12],
}

impl Stateid {
    /// The anonymous stateid (all zeros, RFC 8881 §8.2.3).
    pub const ANONYMOUS: Stateid = Stateid {
        seqid: 0,
        other: [0; 12],
    };
    /// The READ bypass stateid (all ones).
    pub const BYPASS: Stateid = Stateid {
        seqid: u32::MAX,
        other: [0xff; 12],
    };
    /// The current stateid (seqid 1, other zero): "the stateid the previous
    /// operation produced" (RFC 8881 §16.2.3.1.2).
    pub const CURRENT: Stateid = Stateid {
        seqid: 1,
        other: [0; 12],
    };
    /// Invalid stateid (seqid u32::MAX, other zero).
    pub const INVALID: Stateid = Stateid {
        seqid: u32::MAX,
        other: [0; 12],
    };

    pub fn decode(r: &mut engine::xdr::XdrReader) -> engine::xdr::XdrResult<Stateid> {
        let seqid = r.u32()?;
        let mut other = [0; 12];
        other.copy_from_slice(r.opaque_fixed(12)?);
        Ok(Stateid { seqid, other })
    }

    pub fn encode(&self, w: &mut engine::xdr::XdrWriter) -> engine::xdr::XdrResult<()> {
        w.u32(self.seqid)?;
        w.opaque_fixed(&self.other)
    }
}
