//! RFC 8797 RPC-over-RDMA connection private data: the 8-byte message each side puts
//! in its RDMA-CM connect/accept, and the inline thresholds it yields.

/// Format Identifier, network order (RFC 8797 §4).
pub const FORMAT_ID: [u8; 4] = [0xf6, 0xab, 0x0e, 0x18];
/// The only version we understand.
pub const VERSION: u8 = 1;
/// Bit 0 of the flags byte: remote invalidation is acceptable (the "R" bit).
pub const FLAG_REMOTE_INVALIDATE: u8 = 0x01;
/// Largest size the encoding can express (255 + 1 KiB units).
pub const MAX_SIZE: usize = 256 * 1024;

/// What one peer advertised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivData {
    /// Largest Send this peer will post.
    pub send_size: usize,
    /// Largest message this peer's Receives accept.
    pub recv_size: usize,
    /// The R bit.
    pub remote_invalidate: bool,
}

impl PrivData {
    /// What a peer that sent nothing (or nothing we understand) is taken to have sent
    /// (RFC 8797 §5.1): 1024 both ways, R = 0.
    pub const ABSENT: PrivData = PrivData {
        send_size: 1024,
        recv_size: 1024,
        remote_invalidate: false,
    };
}

/// Encoded size: bytes / 1024 - 1, rounded down, clamped to 0..=255 (RFC 8797 §4.2).
pub fn encode_size(bytes: usize) -> u8 {
    (bytes / 1024).saturating_sub(1).min(255) as u8
}

/// Decoded size: (encoded + 1) KiB.
pub fn decode_size(enc: u8) -> usize {
    (enc as usize + 1) * 1024
}

/// Our 8 bytes, placed at offset 0 of the CM private data (where Linux looks).
/// Reserved flag bits are sent as zero (R8797-03).
pub fn encode(p: &PrivData) -> [u8; 8] {
    let flags = if p.remote_invalidate {
        FLAG_REMOTE_INVALIDATE
    } else {
        0
    };
    [
        FORMAT_ID[0],
        FORMAT_ID[1],
        FORMAT_ID[2],
        FORMAT_ID[3],
        VERSION,
        flags,
        encode_size(p.send_size),
        encode_size(p.recv_size),
    ]
}

/// Parses a peer's private data: the identifier is searched at any offset (other
/// layers may put data first, R8797-09); a missing identifier, another version, or
/// fewer than 8 bytes from it means "absent" (R8797-07/08/10). Reserved flag bits are
/// ignored (R8797-04).
pub fn decode(buf: &[u8]) -> PrivData {
    let Some(at) = buf.windows(4).position(|w| w == FORMAT_ID) else {
        return PrivData::ABSENT;
    };
    let Some(m) = buf.get(at..at + 8) else {
        return PrivData::ABSENT;
    };
    if m[4] != VERSION {
        return PrivData::ABSENT;
    }
    PrivData {
        remote_invalidate: m[5] & FLAG_REMOTE_INVALIDATE != 0,
        send_size: decode_size(m[6]),
        recv_size: decode_size(m[7]),
    }
}

/// The two inline thresholds of a connection, as seen from one side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Largest message we may Send.
    pub send: usize,
    /// Largest message the peer may Send us (our Receive size need not exceed it).
    pub recv: usize,
    /// Both sides set R: Send-With-Invalidate is allowed.
    pub remote_invalidate: bool,
}

/// Thresholds from our advertisement and the peer's (RFC 8797 §4.2): what we send is
/// bounded by our send size and the peer's receive size, and vice versa.
pub fn thresholds(ours: &PrivData, peer: &PrivData) -> Thresholds {
    Thresholds {
        send: ours.send_size.min(peer.recv_size),
        recv: ours.recv_size.min(peer.send_size),
        remote_invalidate: ours.remote_invalidate && peer.remote_invalidate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r8797_02_03_our_bytes_at_offset_zero_reserved_bits_zero() {
        let p = PrivData {
            send_size: 4096,
            recv_size: 4096,
            remote_invalidate: true,
        };
        assert_eq!(encode(&p), [0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3]);
        let p = PrivData {
            remote_invalidate: false,
            ..p
        };
        assert_eq!(encode(&p)[5], 0);
    }

    #[test]
    fn r8797_04_reserved_bits_are_ignored() {
        let d = decode(&[0xf6, 0xab, 0x0e, 0x18, 1, 0xff, 0, 0]);
        assert!(d.remote_invalidate);
        assert_eq!((d.send_size, d.recv_size), (1024, 1024));
    }

    #[test]
    fn r8797_05_size_codec() {
        assert_eq!(encode_size(1024), 0);
        assert_eq!(encode_size(4096), 3);
        assert_eq!(encode_size(5000), 3);
        assert_eq!(encode_size(262144), 255);
        assert_eq!(encode_size(1 << 30), 255);
        assert_eq!(decode_size(0), 1024);
        assert_eq!(decode_size(255), 262144);
    }

    #[test]
    fn r8797_06_threshold_selection() {
        let client = PrivData {
            send_size: 8192,
            recv_size: 8192,
            remote_invalidate: false,
        };
        let server = PrivData {
            send_size: 4096,
            recv_size: 16384,
            remote_invalidate: false,
        };
        let t = thresholds(&client, &server);
        assert_eq!(t.send, 8192, "client to server");
        assert_eq!(t.recv, 4096, "server to client");
        let s = thresholds(&server, &client);
        assert_eq!((s.send, s.recv), (4096, 8192));
    }

    #[test]
    fn r8797_07_08_absent_or_foreign_data_means_1024_and_no_r() {
        assert_eq!(decode(&[]), PrivData::ABSENT);
        assert_eq!(decode(&[1, 2, 3, 4, 5, 6, 7, 8, 9]), PrivData::ABSENT);
    }

    #[test]
    fn r8797_09_identifier_found_at_an_unaligned_offset() {
        let mut b = [0u8; 20];
        b[3..11].copy_from_slice(&[0xf6, 0xab, 0x0e, 0x18, 1, 1, 7, 15]);
        let d = decode(&b);
        assert_eq!(
            (d.send_size, d.recv_size, d.remote_invalidate),
            (8192, 16384, true)
        );
    }

    #[test]
    fn r8797_10_wrong_version_or_short_tail_means_absent() {
        assert_eq!(
            decode(&[0xf6, 0xab, 0x0e, 0x18, 2, 1, 3, 3]),
            PrivData::ABSENT
        );
        assert_eq!(
            decode(&[0, 0, 0xf6, 0xab, 0x0e, 0x18, 1, 1, 3]),
            PrivData::ABSENT
        );
    }

    #[test]
    fn r8797_01_with_no_private_data_both_directions_run_at_1024() {
        let ours = PrivData {
            send_size: 4096,
            recv_size: 4096,
            remote_invalidate: true,
        };
        let t = thresholds(&ours, &decode(&[]));
        assert_eq!((t.send, t.recv, t.remote_invalidate), (1024, 1024, false));
    }

    /// Every size byte pair a peer can send yields thresholds within
    /// [1024, ours] (R8797-05/06), and private data of any length and content decodes
    /// without a panic (the identifier at the very end, truncated, is "absent").
    #[test]
    fn r8797_05_06_any_peer_bytes_give_thresholds_within_our_sizes() {
        let ours = PrivData {
            send_size: 4096,
            recv_size: 4096,
            remote_invalidate: true,
        };
        for send in 0..=255u8 {
            for recv in 0..=255u8 {
                let p = decode(&[0xf6, 0xab, 0x0e, 0x18, 1, 0xff, send, recv]);
                let t = thresholds(&ours, &p);
                assert!((1024..=4096).contains(&t.send), "{send} {recv}: {t:?}");
                assert!((1024..=4096).contains(&t.recv), "{send} {recv}: {t:?}");
            }
        }
        let mut x = 0x1234_5678_9abc_def1u64;
        for len in 0..=64usize {
            for _ in 0..64 {
                let mut b: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                if len >= 4 && x.is_multiple_of(2) {
                    let at = (x as usize >> 8) % (len - 3);
                    b[at..at + 4].copy_from_slice(&FORMAT_ID);
                }
                let p = decode(&b);
                assert!((1024..=MAX_SIZE).contains(&p.send_size));
                assert!((1024..=MAX_SIZE).contains(&p.recv_size));
            }
        }
        assert_eq!(decode(&[0, 0, 0xf6, 0xab, 0x0e, 0x18, 1]), PrivData::ABSENT);
    }
}
