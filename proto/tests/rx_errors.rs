//! Every rejection path of the receive engine: the right Terminate (layer, type, code), the
//! offending header echoed, nothing placed from the bad FPDU, and the stream closed after.

mod common;

use common::{Crc, Memory, Msg};
use iwarp_proto::atomic;
use iwarp_proto::crc::Crc32c;
use iwarp_proto::markers::{self, Markers};
use iwarp_proto::rdmap::{Opcode, ReadRequest};
use iwarp_proto::rx::{self, Event, Receiver, RxError};
use iwarp_proto::stream::Pieces;
use iwarp_proto::terminate::{Cause, Terminate};
use iwarp_proto::tx::Message;

/// One FPDU at stream offset 0, no markers, with a valid CRC around `ulpdu`.
fn fpdu(ulpdu: &[u8]) -> Vec<u8> {
    let mut f = (ulpdu.len() as u16).to_be_bytes().to_vec();
    f.extend_from_slice(ulpdu);
    f.resize(f.len() + markers::pad_len(ulpdu.len() as u32) as usize, 0);
    let crc = Crc::append(0, &f);
    f.extend_from_slice(&crc.to_le_bytes());
    f
}

fn untagged(ctrl0: u8, ctrl1: u8, ulp: u32, qn: u32, msn: u32, mo: u32, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![ctrl0, ctrl1];
    for w in [ulp, qn, msn, mo] {
        u.extend_from_slice(&w.to_be_bytes());
    }
    u.extend_from_slice(payload);
    u
}

fn tagged(ctrl0: u8, ctrl1: u8, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![ctrl0, ctrl1];
    u.extend_from_slice(&stag.to_be_bytes());
    u.extend_from_slice(&to.to_be_bytes());
    u.extend_from_slice(payload);
    u
}

fn memory() -> Memory {
    // One posted receive of 8 bytes (MSN 1) and one 8-byte region, STag 0x100 at TO 4096.
    Memory::for_scenario(&[
        Msg { msg: Message::Send { solicited: false, invalidate: None }, payload: vec![0; 0] },
        Msg { msg: Message::Write { stag: 0x100, to: 4096 }, payload: vec![0; 8] },
    ])
    .with_recv_len(1, 8)
}

trait WithRecv {
    fn with_recv_len(self, msn: u32, n: usize) -> Self;
}
impl WithRecv for Memory {
    fn with_recv_len(mut self, msn: u32, n: usize) -> Memory {
        self.recv.insert(msn, (vec![0; n], vec![0; n]));
        self
    }
}

fn receive(wire: &[u8], mem: &mut Memory) -> Result<u64, RxError> {
    receive_ext(wire, mem, false)
}

/// With `extensions`, both sides agreed to RFC 7306.
fn receive_ext(wire: &[u8], mem: &mut Memory, extensions: bool) -> Result<u64, RxError> {
    let mut rx = Receiver::new(rx::Config { markers: Markers::NONE, crc: true, expect_rtr: None, expect_rtr_read_response: false, extensions });
    let r = rx.receive::<Crc, _>(&Pieces::new(0, &[wire]), mem);
    if r.is_err() {
        assert_eq!(rx.receive::<Crc, _>(&Pieces::new(0, &[wire]), mem), Err(RxError::Closed));
    }
    r
}

fn expect(cause: Cause, ulpdu: Vec<u8>) -> Terminate {
    expect_ext(cause, ulpdu, false, memory())
}

fn expect_ext(cause: Cause, ulpdu: Vec<u8>, extensions: bool, mut mem: Memory) -> Terminate {
    let wire = fpdu(&ulpdu);
    let Err(RxError::Terminate(t)) = receive_ext(&wire, &mut mem, extensions) else { panic!("{cause:?} not detected") };
    assert_eq!(t.cause(), Some(cause));
    assert!(mem.events.is_empty());
    let placed = mem.tagged.values().flat_map(|(_, _, c)| c.iter()).chain(mem.recv.values().flat_map(|(_, c)| c.iter()));
    assert!(placed.into_iter().all(|&c| c == 0), "bytes placed from a rejected FPDU");
    t
}

const SEND: u8 = 0x40 | 3;
const L: u8 = 0x41; // last, DV 1
const LT: u8 = 0xc1; // tagged, last, DV 1

#[test]
fn valid_send_and_write_are_accepted() {
    let mut mem = memory();
    let mut wire = fpdu(&untagged(L, SEND, 0, 0, 1, 0, b"hello"));
    wire.extend(fpdu(&tagged(LT, 0x40, 0x100, 4096, b"abcd")));
    assert_eq!(receive(&wire, &mut mem), Ok(wire.len() as u64));
    assert_eq!(mem.events, vec![Event::Send { msn: 1, len: 5, solicited: false, invalidate: None }, Event::Write { stag: 0x100 }]);
}

#[test]
fn a_placement_refused_after_its_check_ends_the_stream_undelivered() {
    let mut mem = Memory { refuse_place: Some(Cause::DdpInvalidStag), ..memory() };
    let t = expect_ext(Cause::DdpInvalidStag, tagged(LT, 0x40, 0x100, 4096, b"abcd"), false, mem);
    assert!(!t.ddp_header().is_empty(), "the refused segment's header is echoed");
    mem = Memory { refuse_place: Some(Cause::RdmapCatastrophic), ..memory() };
    expect_ext(Cause::RdmapCatastrophic, untagged(L, SEND, 0, 0, 1, 0, b"hello"), false, mem);
}

#[test]
fn ddp_version_errors() {
    expect(Cause::DdpUntaggedVersion, untagged(0x42, SEND, 0, 0, 1, 0, b"x"));
    expect(Cause::DdpTaggedVersion, tagged(0xc0, 0x40, 0x100, 4096, b"x"));
}

#[test]
fn rdmap_version_and_opcode_errors() {
    expect(Cause::RdmapVersion, untagged(L, 0x83, 0, 0, 1, 0, b"x"));
    expect(Cause::RdmapOpcode, untagged(L, 0x4f, 0, 0, 1, 0, b"x"));
    expect(Cause::RdmapOpcode, untagged(L, 0x40, 0, 0, 1, 0, b"x")); // Write untagged
    expect(Cause::RdmapOpcode, tagged(LT, SEND, 0x100, 4096, b"x")); // Send tagged
}

#[test]
fn rfc7306_messages_are_checked_and_refused_unless_agreed() {
    let fa = atomic::Request::fetch_add(7, 0x100, 4096, 1).emit();
    let resp = atomic::Response { id: 7, original: 9 }.emit();
    let imm = 0x0102_0304_0506_0708u64.to_be_bytes();
    // Without the extensions, their four opcodes are unexpected.
    for (op, qn, payload) in [(8, 0, &imm[..]), (9, 0, &imm[..]), (10, 1, &fa[..]), (11, 3, &resp[..])] {
        expect(Cause::RdmapOpcode, untagged(L, 0x40 | op, 0, qn, 1, 0, payload));
    }
    // With them: delivered in order, Immediate Data taking receive MSN 1 without placing.
    let mut mem = memory();
    let mut wire = fpdu(&untagged(L, 0x49, 0, 0, 1, 0, &imm));
    wire.extend(fpdu(&untagged(L, 0x4a, 0, 1, 1, 0, &fa)));
    wire.extend(fpdu(&untagged(L, 0x4b, 0, 3, 1, 0, &resp)));
    assert_eq!(receive_ext(&wire, &mut mem, true), Ok(wire.len() as u64));
    assert_eq!(
        mem.events,
        vec![
            Event::Immediate { msn: 1, data: 0x0102_0304_0506_0708, solicited: true },
            Event::AtomicRequest(atomic::Request::fetch_add(7, 0x100, 4096, 1)),
            Event::AtomicResponse(atomic::Response { id: 7, original: 9 }),
        ]
    );
    assert!(mem.recv[&1].1.iter().all(|&c| c == 0));
    // Malformed: wrong lengths, a wrong queue, no receive buffer, an unknown operation, a
    // target that is not 64-bit aligned (RFC 7306 section 8.2).
    expect_ext(Cause::RdmapStreamCatastrophic, untagged(L, 0x48, 0, 0, 1, 0, &imm[..7]), true, memory());
    expect_ext(Cause::RdmapStreamCatastrophic, untagged(L, 0x4a, 0, 1, 1, 0, &fa[..51]), true, memory());
    expect_ext(Cause::RdmapStreamCatastrophic, untagged(L, 0x4b, 0, 3, 1, 0, &fa[..13]), true, memory());
    expect_ext(Cause::DdpInvalidQn, untagged(L, 0x4a, 0, 0, 1, 0, &fa), true, memory());
    expect_ext(Cause::DdpNoBuffer, untagged(L, 0x48, 0, 0, 1, 0, &imm), true, Memory::default());
    let mut bad_op = fa;
    bad_op[3] = 1;
    expect_ext(Cause::RdmapOpcode, untagged(L, 0x4a, 0, 1, 1, 0, &bad_op), true, memory());
    let misaligned = atomic::Request::compare_swap(7, 0x100, 4100, 0, 1).emit();
    let t = expect_ext(Cause::RdmapStreamCatastrophic, untagged(L, 0x4a, 0, 1, 1, 0, &misaligned), true, memory());
    assert!(t.rdma_hdr.is_none(), "RFC 7306 section 8.1: the RDMA header is not echoed");
}

#[test]
fn untagged_queue_msn_and_offset_errors() {
    let t = expect(Cause::DdpInvalidQn, untagged(L, SEND, 0, 5, 1, 0, b"x"));
    assert_eq!(t.segment_len, Some(19));
    assert_eq!(t.ddp_header().len(), 18, "offending DDP header echoed");
    expect(Cause::DdpMsnRange, untagged(L, SEND, 0, 0, 2, 0, b"x"));
    expect(Cause::DdpInvalidMo, untagged(L, SEND, 0, 0, 1, 4, b"x"));
    expect(Cause::DdpInvalidMo, untagged(L, SEND, 0, 0, 1, u32::MAX, b"xy"));
    expect(Cause::DdpTooLong, untagged(L, SEND, 0, 0, 1, 0, b"123456789"));
}

#[test]
fn tagged_buffer_errors_from_the_sink() {
    expect(Cause::DdpInvalidStag, tagged(LT, 0x40, 0x999, 4096, b"x"));
    expect(Cause::DdpBaseBounds, tagged(LT, 0x40, 0x100, 4100, b"12345"));
    expect(Cause::DdpToWrap, tagged(LT, 0x40, 0x100, u64::MAX - 1, b"12345"));
}

#[test]
fn malformed_read_request_and_terminate() {
    let rr = ReadRequest { sink_stag: 1, sink_to: 2, size: 3, src_stag: 4, src_to: 5 }.emit();
    let t = expect(Cause::RdmapStreamCatastrophic, untagged(L, 0x41, 0, 1, 1, 0, &rr[..20]));
    assert!(t.rdma_hdr.is_none());
    expect(Cause::RdmapStreamCatastrophic, untagged(0x01, 0x41, 0, 1, 1, 0, &rr));
    expect(Cause::RdmapStreamCatastrophic, untagged(0x01, 0x47, 0, 2, 1, 0, &[0x12, 0x01, 0, 0]));
    let t = expect(Cause::DdpMsnRange, untagged(L, 0x41, 0, 1, 9, 0, &rr));
    assert_eq!(t.rdma_hdr, Some(rr), "offending Read Request header echoed");
}

#[test]
fn short_ulpdu_is_a_ddp_error() {
    expect(Cause::DdpCatastrophic, vec![L, SEND, 0, 0]);
    expect(Cause::DdpCatastrophic, vec![]);
}

#[test]
fn crc_and_marker_errors() {
    let mut mem = memory();
    let mut wire = fpdu(&untagged(L, SEND, 0, 0, 1, 0, b"hello"));
    let n = wire.len();
    wire[n - 1] ^= 0x80;
    let Err(RxError::Terminate(t)) = receive(&wire, &mut mem) else { panic!() };
    assert_eq!(t.cause(), Some(Cause::MpaCrc));
    assert!(mem.recv[&1].1.iter().all(|&c| c == 0), "nothing placed before the CRC is checked");

    // Markers on: a marker that does not point at its FPDU.
    let mut m = vec![0, 0, 0, 4];
    m.extend(fpdu(&untagged(L, SEND, 0, 0, 1, 0, b"hello")));
    let mut rx = Receiver::new(rx::Config { markers: Markers::RFC, crc: false, expect_rtr: None, expect_rtr_read_response: false, extensions: false });
    let Err(RxError::Terminate(t)) = rx.receive::<Crc, _>(&Pieces::new(0, &[&m]), &mut memory()) else { panic!() };
    assert_eq!(t.cause(), Some(Cause::MpaMarker));
}

/// An FPDU that starts at a marker position: its later markers point at its Length field, 4
/// octets after the marker (RFC 5044 section 4.3). One that points at the leading marker instead
/// (what this stack sent before the fix) is refused.
#[test]
fn markers_after_a_leading_marker_point_past_it() {
    // The first FPDU (its marker at 0, 2 + 14 + 488 + 4 octets of body) ends at 512: the second
    // starts at the marker there, and its marker at 1024 must hold 1024 - 516.
    let msgs = vec![
        Msg { msg: Message::Write { stag: 0x100, to: 0 }, payload: vec![1; 488] },
        Msg { msg: Message::Write { stag: 0x101, to: 0 }, payload: vec![2; 1000] },
    ];
    let (mut wire, fpdus) = common::emit(&msgs, iwarp_proto::tx::Config { markers: Markers::RFC, crc: false, mulpdu: 1400 });
    assert_eq!(fpdus[1].0, 512);
    assert_eq!(wire[1024..1028], [0, 0, 0x01, 0xfc]);
    let cfg = rx::Config { markers: Markers::RFC, crc: false, expect_rtr: None, expect_rtr_read_response: false, extensions: false };
    let mut mem = Memory::for_scenario(&msgs);
    assert_eq!(Receiver::new(cfg).receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem), Ok(wire.len() as u64));
    mem.assert_placed(&msgs);

    wire[1026..1028].copy_from_slice(&[0x02, 0x00]);
    let Err(RxError::Terminate(t)) = Receiver::new(cfg).receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut Memory::for_scenario(&msgs)) else { panic!() };
    assert_eq!(t.cause(), Some(Cause::MpaMarker));
}

#[test]
fn a_received_terminate_is_delivered_and_ends_the_stream() {
    let mut payload = [0u8; 64];
    let n = Terminate::new(Cause::RdmapAccessRights).emit(&mut payload).unwrap();
    let wire = fpdu(&untagged(L, 0x47, 0, 2, 1, 0, &payload[..n]));
    let mut mem = memory();
    let mut rx = Receiver::new(rx::Config { markers: Markers::NONE, crc: true, expect_rtr: None, expect_rtr_read_response: false, extensions: false });
    assert_eq!(rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem), Ok(wire.len() as u64));
    assert_eq!(mem.events, vec![Event::Terminate(Terminate::new(Cause::RdmapAccessRights))]);
    assert_eq!(rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem), Err(RxError::Closed));
}

#[test]
fn peer_to_peer_rtr_comes_first() {
    use iwarp_proto::mpa::negotiate::Rtr;
    let cfg = rx::Config { markers: Markers::NONE, crc: true, expect_rtr: Some(Rtr::Write), expect_rtr_read_response: false, extensions: false };
    let rtr = fpdu(&tagged(LT, 0x40, 0, 0, b""));
    let mut rx = Receiver::new(cfg);
    let mut mem = memory();
    rx.receive::<Crc, _>(&Pieces::new(0, &[&rtr]), &mut mem).unwrap();
    assert_eq!(mem.events, vec![Event::ReadyToReceive(Rtr::Write)]);
    let send = fpdu(&untagged(L, SEND, 0, 0, 1, 0, b""));
    let mut rx = Receiver::new(cfg);
    let Err(RxError::Terminate(t)) = rx.receive::<Crc, _>(&Pieces::new(0, &[&send]), &mut memory()) else { panic!() };
    assert_eq!(t.cause(), Some(Cause::MpaNoMatchingRtr));
    let _ = Opcode::Send;
}

#[test]
fn nothing_is_placed_or_delivered_after_a_delivery_the_sink_refused() {
    // A Send the upper layer cannot complete (say, its Invalidate names a foreign STag), then a
    // Write and a Send in the same bytes: neither may touch memory or complete (RFC 5040 7.2).
    let msgs = vec![
        Msg { msg: Message::Send { solicited: false, invalidate: Some(0xbad) }, payload: vec![1; 16] },
        Msg { msg: Message::Write { stag: 0x100, to: 0 }, payload: vec![2; 64] },
        Msg { msg: Message::Send { solicited: false, invalidate: None }, payload: vec![3; 16] },
    ];
    let (wire, _) = common::emit(&msgs, iwarp_proto::tx::Config { markers: Markers::RFC, crc: true, mulpdu: 1400 });
    let mut rx = Receiver::new(rx::Config { markers: Markers::RFC, crc: true, expect_rtr: None, expect_rtr_read_response: false, extensions: false });
    let mut mem = Memory::for_scenario(&msgs);
    mem.fail_after = Some(1);
    assert_eq!(rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem), Err(RxError::Closed));
    assert_eq!(mem.events.len(), 1, "only the refused Send was delivered: {:?}", mem.events);
    assert!(mem.tagged[&0x100].1.iter().all(|&b| b == 0), "the Write after it was not placed");
    assert!(mem.recv[&2].0.iter().all(|&b| b == 0), "the Send after it was not placed");
    assert_eq!(rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem), Err(RxError::Closed));
}

#[test]
fn reserved_header_bits_are_ignored_on_receipt() {
    // DDP's 4 reserved bits (RFC 5041 4.1) and RDMAP's bits 26-27 (RFC 5040 4.1) set by a peer
    // change nothing: the Write is placed and the Send delivered as without them.
    const DDP_RSVD: u8 = 0x3c;
    const RDMAP_RSVD: u8 = 0x30;
    let write = fpdu(&tagged(LT | DDP_RSVD, 0x40 | RDMAP_RSVD, 0x100, 4096, b"12345678"));
    let send = fpdu(&untagged(L | DDP_RSVD, SEND | RDMAP_RSVD, 0, 0, 1, 0, b"hi"));
    let mut mem = memory();
    let wire = [write, send].concat();
    assert_eq!(receive(&wire, &mut mem), Ok(wire.len() as u64));
    assert_eq!(&mem.tagged[&0x100].1, b"12345678");
    assert_eq!(&mem.recv[&1].0[..2], b"hi");
    assert_eq!(mem.events, vec![Event::Write { stag: 0x100 }, Event::Send { msn: 1, len: 2, solicited: false, invalidate: None }]);
}
