//! Zero-copy, bounds-checked XDR (RFC 4506) cursor.
//!
//! `XdrReader` borrows the received bytes and hands out sub-slices for opaques and
//! strings, so decoding never copies payloads. Every read checks the remaining length
//! first and every variable-length item is checked against a caller-given maximum
//! *before* anything is sized from it: hostile input yields `XdrError`, never a panic.
//!
//! `XdrWriter` encodes into a caller-provided fixed slice (normally a pool buffer), so
//! encoding never allocates; running out of room is an error the caller must size for.

/// Why a decode or encode failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdrError {
    /// The input ended before the item did.
    Short,
    /// A length prefix exceeded the caller's limit.
    TooLong,
    /// A value outside its enumeration or a non-zero pad/bool out of range.
    BadValue,
    /// The output slice is full.
    Overflow,
}

impl std::fmt::Display for XdrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            XdrError::Short => "truncated XDR item",
            XdrError::TooLong => "XDR length exceeds limit",
            XdrError::BadValue => "invalid XDR value",
            XdrError::Overflow => "XDR output buffer full",
        };
        f.write_str(s)
    }
}

impl std::error::Error for XdrError {}

pub type XdrResult<T> = Result<T, XdrError>;

/// Bytes of padding that follow an opaque of `len` bytes (RFC 4506 §4.10).
#[inline]
pub const fn pad_len(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

/// `len` rounded up to a multiple of four.
#[inline]
pub const fn padded(len: usize) -> usize {
    len + pad_len(len)
}

/// A read cursor over borrowed bytes.
#[derive(Debug, Clone)]
pub struct XdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> XdrReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        XdrReader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The unconsumed tail, without consuming it.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    #[inline]
    fn take(&mut self, n: usize) -> XdrResult<&'a [u8]> {
        if self.remaining() < n {
            return Err(XdrError::Short);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub fn u32(&mut self) -> XdrResult<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub fn i32(&mut self) -> XdrResult<i32> {
        Ok(self.u32()? as i32)
    }

    #[inline]
    pub fn u64(&mut self) -> XdrResult<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    #[inline]
    pub fn i64(&mut self) -> XdrResult<i64> {
        Ok(self.u64()? as i64)
    }

    /// An XDR bool: exactly 0 or 1.
    #[inline]
    pub fn bool(&mut self) -> XdrResult<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(XdrError::BadValue),
        }
    }

    /// Fixed-length opaque of `n` bytes plus its padding.
    pub fn opaque_fixed(&mut self, n: usize) -> XdrResult<&'a [u8]> {
        let data = self.take(n)?;
        self.take(pad_len(n))?;
        Ok(data)
    }

    /// Variable-length opaque whose length must not exceed `max`.
    /// The limit is checked before the body is touched.
    pub fn opaque_var(&mut self, max: usize) -> XdrResult<&'a [u8]> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(XdrError::TooLong);
        }
        self.opaque_fixed(len)
    }

    /// Same as `opaque_var`; names the XDR `string` type at call sites.
    pub fn string(&mut self, max: usize) -> XdrResult<&'a [u8]> {
        self.opaque_var(max)
    }

    /// Skips `n` bytes (already padded by the caller if needed).
    pub fn skip(&mut self, n: usize) -> XdrResult<()> {
        self.take(n).map(|_| ())
    }
}

/// A write cursor over a fixed, caller-provided slice.
#[derive(Debug)]
pub struct XdrWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> XdrWriter<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        XdrWriter { buf, pos: 0 }
    }

    /// Starts writing at `pos` (e.g. after a reserved record mark).
    pub fn at(buf: &'a mut [u8], pos: usize) -> Self {
        assert!(pos <= buf.len(), "writer start beyond buffer");
        XdrWriter { buf, pos }
    }

    /// Bytes written so far (including any start offset).
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    fn room(&mut self, n: usize) -> XdrResult<&mut [u8]> {
        if self.remaining() < n {
            return Err(XdrError::Overflow);
        }
        let s = &mut self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub fn u32(&mut self, v: u32) -> XdrResult<()> {
        self.room(4)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }

    #[inline]
    pub fn i32(&mut self, v: i32) -> XdrResult<()> {
        self.u32(v as u32)
    }

    #[inline]
    pub fn u64(&mut self, v: u64) -> XdrResult<()> {
        self.room(8)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }

    #[inline]
    pub fn i64(&mut self, v: i64) -> XdrResult<()> {
        self.u64(v as u64)
    }

    #[inline]
    pub fn bool(&mut self, v: bool) -> XdrResult<()> {
        self.u32(v as u32)
    }

    /// Fixed-length opaque plus zero padding.
    pub fn opaque_fixed(&mut self, data: &[u8]) -> XdrResult<()> {
        let n = data.len();
        let p = pad_len(n);
        let dst = self.room(n + p)?;
        dst[..n].copy_from_slice(data);
        dst[n..].fill(0);
        Ok(())
    }

    /// Length-prefixed opaque plus zero padding.
    pub fn opaque_var(&mut self, data: &[u8]) -> XdrResult<()> {
        if self.remaining() < 4 + padded(data.len()) {
            return Err(XdrError::Overflow);
        }
        self.u32(data.len() as u32)?;
        self.opaque_fixed(data)
    }

    pub fn string(&mut self, s: &[u8]) -> XdrResult<()> {
        self.opaque_var(s)
    }

    /// Reserves a u32 slot to be filled later with `patch_u32` (lengths, counts).
    pub fn reserve_u32(&mut self) -> XdrResult<usize> {
        let at = self.pos;
        self.u32(0)?;
        Ok(at)
    }

    pub fn patch_u32(&mut self, at: usize, v: u32) {
        assert!(at + 4 <= self.pos, "patch outside written area");
        self.buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Reserves `n` bytes (plus padding) for a payload the caller fills in place,
    /// e.g. a READ result read from storage straight into the reply buffer.
    /// Returns the mutable payload area; padding is zeroed.
    pub fn reserve_opaque_fixed(&mut self, n: usize) -> XdrResult<&mut [u8]> {
        let p = pad_len(n);
        let dst = self.room(n + p)?;
        dst[n..].fill(0);
        Ok(&mut dst[..n])
    }

    /// Shrinks a payload reserved last with `reserve_opaque_fixed(n)` to `actual`
    /// bytes (storage returned less than asked), re-padding. `at` is the position the
    /// payload started at.
    pub fn truncate_opaque(&mut self, at: usize, actual: usize) {
        assert!(at + padded(actual) <= self.pos, "truncate grows payload");
        self.pos = at + actual;
        let p = pad_len(actual);
        self.buf[self.pos..self.pos + p].fill(0);
        self.pos += p;
    }

    /// Moves the writer back to `start`, dropping what was written after it (a result
    /// that failed part way is replaced by its error). Never moves forward.
    pub fn rewind(&mut self, start: usize) {
        if self.pos > start {
            self.pos = start;
        }
    }

    /// The bytes written so far.
    pub fn written(&self) -> &[u8] {
        &self.buf[..self.pos]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_scalars_and_opaques() {
        let mut buf = [0u8; 64];
        let mut w = XdrWriter::new(&mut buf);
        w.u32(7).unwrap();
        w.u64(0x0102_0304_0506_0708).unwrap();
        w.bool(true).unwrap();
        w.opaque_var(b"abcde").unwrap();
        w.string(b"xy").unwrap();
        let n = w.position();
        assert_eq!(n, 4 + 8 + 4 + 4 + 8 + 4 + 4);
        let mut r = XdrReader::new(&buf[..n]);
        assert_eq!(r.u32().unwrap(), 7);
        assert_eq!(r.u64().unwrap(), 0x0102_0304_0506_0708);
        assert!(r.bool().unwrap());
        assert_eq!(r.opaque_var(16).unwrap(), b"abcde");
        assert_eq!(r.string(16).unwrap(), b"xy");
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn padding_is_zero() {
        let mut buf = [0xffu8; 12];
        let mut w = XdrWriter::new(&mut buf);
        w.opaque_var(b"a").unwrap();
        assert_eq!(&buf[..8], &[0, 0, 0, 1, b'a', 0, 0, 0]);
    }

    #[test]
    fn short_input_is_an_error_not_a_panic() {
        let mut r = XdrReader::new(&[0, 0, 0]);
        assert_eq!(r.u32(), Err(XdrError::Short));
        let mut r = XdrReader::new(&[0, 0, 0, 9, 1, 2]);
        assert_eq!(r.opaque_var(100), Err(XdrError::Short));
        // Missing padding counts as short.
        let mut r = XdrReader::new(&[0, 0, 0, 1, b'a']);
        assert_eq!(r.opaque_var(100), Err(XdrError::Short));
    }

    #[test]
    fn length_limit_checked_before_body() {
        // Claims 4 GiB: must fail on the limit, not try to read.
        let mut r = XdrReader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(r.opaque_var(1024), Err(XdrError::TooLong));
    }

    #[test]
    fn bool_rejects_other_values() {
        let mut r = XdrReader::new(&[0, 0, 0, 2]);
        assert_eq!(r.bool(), Err(XdrError::BadValue));
    }

    #[test]
    fn writer_overflow() {
        let mut buf = [0u8; 6];
        let mut w = XdrWriter::new(&mut buf);
        w.u32(1).unwrap();
        assert_eq!(w.u32(2), Err(XdrError::Overflow));
        assert_eq!(w.opaque_var(b"a"), Err(XdrError::Overflow));
        assert_eq!(w.position(), 4);
    }

    #[test]
    fn reserve_patch_and_truncate() {
        let mut buf = [0u8; 32];
        let mut w = XdrWriter::new(&mut buf);
        let at = w.reserve_u32().unwrap();
        let start = w.position();
        w.reserve_opaque_fixed(10).unwrap().fill(7);
        w.truncate_opaque(start, 5);
        w.patch_u32(at, 5);
        assert_eq!(w.position(), 4 + 8);
        let n = w.position();
        let mut r = XdrReader::new(&buf[..n]);
        assert_eq!(r.opaque_var(10).unwrap(), &[7; 5]);
    }
}
