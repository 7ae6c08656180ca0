//! The sockets library's wire format (`preload/`), parsed and emitted here so that its peers
//! in the tests (a lying one among them) speak it from the same code: the UDP question that
//! asks a listener whether it upgrades, the [`Hello`] each side sends first, and the
//! [`Imm`]ediate Data that follows each RDMA Write into the peer's ring (rsockets' design, as
//! rsockets sits in librdmacm beside the verbs).

use crate::Remote;

/// Octets of a question or an answer: the head, then the client's TCP port (big-endian).
pub const QUESTION_LEN: usize = 18;

/// What a client's UDP datagram asks, and a listener's may answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Probe {
    /// Will you upgrade a connection from this port?
    Query,
    /// Yes.
    Answer,
    /// No: the listener's process cannot take another upgraded connection.
    Refusal,
}

impl Probe {
    fn head(self) -> &'static [u8; 16] {
        match self {
            Probe::Query => b"IWARP-SOCKETS/2?",
            Probe::Answer => b"IWARP-SOCKETS/2!",
            Probe::Refusal => b"IWARP-SOCKETS/2-",
        }
    }

    /// The datagram saying `self` about the client's port `port`.
    pub fn emit(self, port: u16) -> [u8; QUESTION_LEN] {
        let mut m = [0u8; QUESTION_LEN];
        m[..16].copy_from_slice(self.head());
        m[16..].copy_from_slice(&port.to_be_bytes());
        m
    }

    /// What datagram `b` says, and about which port; None if it is none of ours.
    pub fn parse(b: &[u8]) -> Option<(Probe, u16)> {
        let b: &[u8; QUESTION_LEN] = b.try_into().ok()?;
        let port = u16::from_be_bytes([b[16], b[17]]);
        [Probe::Query, Probe::Answer, Probe::Refusal].into_iter().find(|p| b[..16] == p.head()[..]).map(|p| (p, port))
    }
}

/// What a message of Immediate Data says, in its 8 octets: the kind (4 bits), the receives
/// given back (12), the ring octets given back (24), and the octets the Write before it placed
/// (24), from the high bits down.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Imm {
    pub kind: Kind,
    pub recvs: u32,
    pub freed: u32,
    pub len: u32,
}

/// What a message is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Kind {
    /// The Write before it placed `len` octets of the stream.
    Data = 0,
    /// Credits alone.
    Credit = 1,
    /// The end of the stream (after its data).
    End = 2,
}

impl Imm {
    /// The most `recvs` can say.
    pub const MAX_RECVS: u32 = 0xfff;
    /// The most `freed` or `len` can say.
    pub const MAX_OCTETS: u32 = 0xff_ffff;

    /// The 8 octets; fields above their widths are cut to them.
    pub fn encode(self) -> u64 {
        (u64::from(self.kind as u8) << 60)
            | (u64::from(self.recvs & Imm::MAX_RECVS) << 48)
            | (u64::from(self.freed & Imm::MAX_OCTETS) << 24)
            | u64::from(self.len & Imm::MAX_OCTETS)
    }

    /// None for a kind that is nobody's.
    pub fn decode(v: u64) -> Option<Imm> {
        let kind = match v >> 60 {
            0 => Kind::Data,
            1 => Kind::Credit,
            2 => Kind::End,
            _ => return None,
        };
        Some(Imm { kind, recvs: (v >> 48) as u32 & Imm::MAX_RECVS, freed: (v >> 24) as u32 & Imm::MAX_OCTETS, len: v as u32 & Imm::MAX_OCTETS })
    }
}

/// The one Send of the protocol, each side's first message: where the peer may write.
/// Octets: `MAGIC`, then the ring's length (u32), then its [`Remote`], little-endian.
pub struct Hello;

impl Hello {
    const MAGIC: [u8; 4] = *b"IWS2";
    /// Octets of a Hello.
    pub const LEN: usize = 8 + Remote::LEN;

    /// A Hello for the ring `ring` of `len` octets.
    pub fn emit(ring: Remote, len: usize) -> [u8; Hello::LEN] {
        let mut b = [0u8; Hello::LEN];
        b[..4].copy_from_slice(&Hello::MAGIC);
        b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        b[8..].copy_from_slice(&ring.to_bytes());
        b
    }

    /// The ring and its length, if `b` is a Hello of a ring that holds something.
    pub fn parse(b: &[u8]) -> Option<(Remote, usize)> {
        if b.len() != Hello::LEN || b[..4] != Hello::MAGIC {
            return None;
        }
        let len = u32::from_le_bytes(b[4..8].try_into().ok()?) as usize;
        (len > 0).then_some((Remote::from_bytes(&b[8..])?, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_parse_what_they_emit_and_nothing_else() {
        for p in [Probe::Query, Probe::Answer, Probe::Refusal] {
            assert_eq!(Probe::parse(&p.emit(8130)), Some((p, 8130)));
        }
        let q = Probe::Query.emit(1);
        assert_eq!(Probe::parse(&q[..17]), None);
        let mut other = q;
        other[15] = b'.';
        assert_eq!(Probe::parse(&other), None);
    }

    #[test]
    fn immediate_data_round_trips_at_each_field_limit() {
        for imm in [
            Imm { kind: Kind::Data, recvs: 0, freed: 0, len: 1 },
            Imm { kind: Kind::Credit, recvs: 256, freed: 2 << 20, len: 0 },
            Imm { kind: Kind::End, recvs: Imm::MAX_RECVS, freed: Imm::MAX_OCTETS, len: Imm::MAX_OCTETS },
        ] {
            assert_eq!(Imm::decode(imm.encode()), Some(imm));
        }
        // Kinds 3 to 15 are nobody's.
        assert_eq!(Imm::decode(3 << 60), None);
        assert_eq!(Imm::decode(u64::MAX), None);
    }

    #[test]
    fn hello_parses_what_it_emits_and_nothing_else() {
        let ring = Remote { addr: 0x7f00_1234_5000, rkey: 0xabcd_0102 };
        let b = Hello::emit(ring, 2 << 20);
        assert_eq!(Hello::parse(&b), Some((ring, 2 << 20)));
        assert_eq!(Hello::parse(&b[..Hello::LEN - 1]), None);
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Hello::parse(&bad), None);
        let mut empty = b;
        empty[4..8].fill(0);
        assert_eq!(Hello::parse(&empty), None);
    }
}
