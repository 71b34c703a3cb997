//! Replies whose result data stays where it is (a read cache's pages): the record goes
//! out as its header buffer, then iovecs pointing at the borrowed pieces, then the XDR
//! padding, in the connection's ordinary vectored writes. No byte of the data is
//! copied; the pieces come back to the caller through
//! [`super::TcpTransport::take_released`] once the kernel has them (or the connection
//! is gone). They lie in pools lent to the transport (`lend_pages`, checked by
//! [`super::TcpTransport::send_external`]), whose handle keeps them mapped; the caller
//! keeps their bytes unchanged until they come back (a read cache pins the pages).

use super::pipe::Pipe;
use crate::mem::Buf;
pub use crate::rdma::server::{ExtSeg, MAX_EXT};
use std::io::IoSlice;

/// Up to [`MAX_EXT`] pieces of memory, in order, holding one XDR opaque's body (the
/// padding is added by the transport). Boxed by its users so it travels by pointer and
/// can be recycled (no allocation per reply).
#[derive(Debug, Clone, Copy)]
pub struct ExtList {
    pub n: usize,
    pub segs: [ExtSeg; MAX_EXT],
}

impl ExtList {
    pub const EMPTY: ExtList = ExtList {
        n: 0,
        segs: [ExtSeg {
            addr: 0,
            len: 0,
            lkey: 0,
            tag: 0,
        }; MAX_EXT],
    };

    pub fn as_slice(&self) -> &[ExtSeg] {
        &self.segs[..self.n]
    }

    /// Bytes of data in the pieces.
    pub fn data_len(&self) -> usize {
        self.as_slice().iter().map(|s| s.len as usize).sum()
    }
}

/// What the transport hands back: borrowed lists (boxed on purpose: the caller
/// recycles the boxes, no allocation per reply, and they travel by pointer) and pipes.
#[derive(Default)]
pub(super) struct Released {
    #[allow(clippy::vec_box)]
    pub lists: Vec<Box<ExtList>>,
    pub pipes: Vec<Pipe>,
}

impl Released {
    /// Keeps what a written or dropped record gives back.
    pub fn take(&mut self, out: Out) {
        match out {
            Out::Buf(_) => {}
            Out::Ext { data, .. } => self.lists.push(data),
            Out::Pipe { pipe, .. } => self.pipes.push(pipe),
        }
    }
}

/// XDR padding after external data (at most 3 bytes).
static ZEROS: [u8; 3] = [0; 3];

/// One record in a connection's send queue.
pub(super) enum Out {
    /// The whole record in one pool buffer (record mark first).
    Buf(Buf),
    /// Record mark and header in `head`, then the borrowed data (`data_len` bytes),
    /// then `pad` zero bytes.
    Ext {
        head: Buf,
        data: Box<ExtList>,
        data_len: usize,
        pad: usize,
    },
    /// Record mark and header in `head`, then `data_len` bytes spliced from `pipe`
    /// into the socket (`pipe.rs`), then `pad` zero bytes.
    Pipe {
        head: Buf,
        pipe: Pipe,
        data_len: usize,
        pad: usize,
    },
}

impl Out {
    /// Bytes this record puts on the wire.
    pub fn len(&self) -> usize {
        match self {
            Out::Buf(b) => b.len(),
            Out::Ext {
                head,
                data_len,
                pad,
                ..
            }
            | Out::Pipe {
                head,
                data_len,
                pad,
                ..
            } => head.len() + data_len + pad,
        }
    }

    /// Memory the queued record holds for the `max_queued` budget: its buffer's
    /// capacity, and for borrowed data its bytes too (a client that does not read
    /// keeps cache pages pinned).
    pub fn held(&self) -> usize {
        match self {
            Out::Buf(b) => b.capacity(),
            Out::Ext { head, data_len, .. } | Out::Pipe { head, data_len, .. } => {
                head.capacity() + data_len
            }
        }
    }

    /// The record mark room (first 4 bytes of the buffer or header).
    pub fn mark_mut(&mut self) -> &mut [u8] {
        match self {
            Out::Buf(b) => &mut b[..4],
            Out::Ext { head, .. } | Out::Pipe { head, .. } => &mut head[..4],
        }
    }

    /// Whether a vectored write must end with this record's bytes from `from`: a pipe
    /// record's data leaves by splice, so nothing after its header can be gathered
    /// until the data is sent.
    pub fn ends_gather(&self, from: usize) -> bool {
        match self {
            Out::Pipe { head, data_len, .. } => from < head.len() + data_len,
            _ => false,
        }
    }

    /// Fills `iov` with this record's bytes from offset `from`, in order; returns how
    /// many slices were written (fewer pieces than the record has when `iov` is short:
    /// the write then ends early and the next flush continues from the offset).
    pub fn slices<'a>(&'a self, from: usize, iov: &mut [IoSlice<'a>]) -> usize {
        match self {
            Out::Buf(b) => match iov.first_mut() {
                Some(s) if from < b.len() => {
                    *s = IoSlice::new(&b[from..]);
                    1
                }
                _ => 0,
            },
            Out::Ext {
                head, data, pad, ..
            } => {
                let mut k = 0;
                let mut skip = from;
                let mut put = |piece: &'a [u8], k: &mut usize| {
                    if *k == iov.len() {
                        return;
                    }
                    if skip >= piece.len() {
                        skip -= piece.len();
                        return;
                    }
                    iov[*k] = IoSlice::new(&piece[skip..]);
                    skip = 0;
                    *k += 1;
                };
                put(&head[..], &mut k);
                for s in data.as_slice() {
                    // SAFETY: `send_external` queued this record only after checking
                    // that each piece (`addr`, `len`) lies inside the region of a pool
                    // lent to the transport (`lend_pages`); the transport holds that
                    // pool's handle for its whole life, so the region stays mapped and
                    // readable while the record, and this slice (which lives no longer
                    // than `self`), exists. The bytes are written only by their
                    // `Buf`'s owner, on this reactor thread, never while a flush runs;
                    // the caller's pin keeps even those writes away until the list
                    // comes back (`take_released`).
                    let piece =
                        unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.len as usize) };
                    put(piece, &mut k);
                }
                put(&ZEROS[..*pad], &mut k);
                k
            }
            Out::Pipe {
                head,
                data_len,
                pad,
                ..
            } => {
                // The header, or (once the data left by splice) the padding.
                let (h, d) = (head.len(), *data_len);
                let piece = if from < h {
                    &head[from..]
                } else if from >= h + d && from < h + d + pad {
                    &ZEROS[from - h - d..*pad]
                } else {
                    return 0;
                };
                match iov.first_mut() {
                    Some(s) => {
                        *s = IoSlice::new(piece);
                        1
                    }
                    None => 0,
                }
            }
        }
    }
}
