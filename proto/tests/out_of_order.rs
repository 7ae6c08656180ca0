//! Directed checks of early placement: with markers, FPDUs that arrive ahead of the in-order
//! point land in their buffers at once; nothing is delivered until the gap fills; the record of
//! early placements is bounded.

mod common;

use common::{emit, expected_events, Crc, Memory, Msg};
use iwarp_proto::markers::Markers;
use iwarp_proto::rx::{self, Receiver, RxError};
use iwarp_proto::stream::Pieces;
use iwarp_proto::terminate::Cause;
use iwarp_proto::tx::{self, Message};

fn writes(n: usize, len: usize) -> Vec<Msg> {
    (0..n).map(|i| Msg { msg: Message::Write { stag: 0x100 + i as u32, to: 4096 }, payload: vec![i as u8 + 1; len] }).collect()
}

/// How the sender cut the stream into segments.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    /// Each segment is one FPDU (the sender aligns).
    Aligned,
    /// Each segment starts 4 octets before an FPDU (it does not).
    Shifted,
}

/// `msgs` on the wire (and where each FPDU is), a receiver for them and their buffers.
fn setup(markers: Markers, crc: bool, msgs: &[Msg]) -> (Vec<u8>, Vec<(u64, u32)>, Receiver, Memory) {
    let (wire, fpdus) = emit(msgs, tx::Config { markers, crc, mulpdu: 1400 });
    let rx = Receiver::new(rx::Config { markers, crc, expect_rtr: None, expect_rtr_read_response: false, extensions: false });
    (wire, fpdus, rx, Memory::for_scenario(msgs))
}

/// Offers every FPDU but the first as a segment, newest first, CRCs on if `crc`.
fn run_cut(markers: Markers, crc: bool, cut: Cut, msgs: &[Msg]) -> (Memory, Receiver, Vec<(u64, u32)>, Vec<u8>) {
    let (wire, fpdus, mut rx, mut mem) = setup(markers, crc, msgs);
    for &(start, len) in fpdus.iter().skip(1).rev() {
        let from = if cut == Cut::Shifted { start - 4 } else { start };
        let seg = &wire[from as usize..(start + len as u64) as usize];
        assert_eq!(rx.receive::<Crc, _>(&Pieces::new(from, &[seg]), &mut mem), Ok(0));
    }
    (mem, rx, fpdus, wire)
}

/// Segments that do not start on FPDUs, CRCs on: only markers find FPDUs.
fn run(markers: Markers, msgs: &[Msg]) -> (Memory, Receiver, Vec<(u64, u32)>, Vec<u8>) {
    run_cut(markers, true, Cut::Shifted, msgs)
}

#[test]
fn markers_let_out_of_order_fpdus_be_placed_at_once() {
    let msgs = writes(8, 1000);
    let (mut mem, mut rx, _, wire) = run(Markers::RFC, &msgs);
    assert!(mem.events.is_empty(), "nothing is delivered before the gap fills");
    assert_eq!(rx.placed_ahead(), 7);
    let st = rx.early_stats();
    assert_eq!((st.by_marker, st.by_alignment, st.bad), (7, 0, 0), "{st:?}");
    for (i, m) in msgs.iter().enumerate().skip(1) {
        assert_eq!(mem.tagged[&(0x100 + i as u32)].1, m.payload, "write {i} placed early");
    }
    assert!(mem.tagged[&0x100].1.iter().all(|&b| b == 0));
    let consumed = rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    assert_eq!(consumed, wire.len() as u64);
    assert_eq!(mem.events, expected_events(&msgs));
    assert_eq!(rx.placed_ahead(), 0);
    mem.assert_placed(&msgs);
}

#[test]
fn an_fpdu_placed_early_is_checked_again_in_its_turn() {
    // Two Writes, the second placed early. Before the first arrives, the second's STag stops
    // being valid (as a Send with Invalidate between them would make it): its turn ends the
    // stream with a Terminate instead of delivering it.
    let msgs = writes(2, 1000);
    let (mut mem, mut rx, _, wire) = run(Markers::RFC, &msgs);
    assert_eq!(rx.placed_ahead(), 1);
    mem.tagged.remove(&0x101);
    let r = rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem);
    let Err(RxError::Terminate(t)) = r else { panic!("no Terminate: {r:?}") };
    assert_eq!(t.cause(), Some(Cause::DdpInvalidStag));
    assert_eq!(mem.events, expected_events(&msgs[..1]), "only the first Write is delivered");
}

#[test]
fn an_fpdu_placed_early_whose_octets_changed_is_checked_in_full() {
    // Two Writes, the second placed early. Then TCP holds other octets where it was (a
    // retransmission that overlapped it differently replaced them): a payload octet differs, so
    // its CRC no longer matches, and its turn ends the stream rather than delivering it on the
    // early check's word.
    let msgs = writes(2, 1000);
    let (mut mem, mut rx, fpdus, mut wire) = run(Markers::RFC, &msgs);
    assert_eq!(rx.placed_ahead(), 1);
    let (start, len) = fpdus[1];
    wire[(start + u64::from(len) / 2) as usize] ^= 0x40;
    let r = rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem);
    let Err(RxError::Terminate(t)) = r else { panic!("no Terminate: {r:?}") };
    assert_eq!(t.cause(), Some(Cause::MpaCrc));
    assert_eq!(mem.events, expected_events(&msgs[..1]), "only the first Write is delivered");
}

#[test]
fn an_fpdu_placed_early_is_placed_again_if_other_valid_octets_took_its_place() {
    // The second Write placed early, then replaced in TCP's queue by another valid FPDU of the
    // same length (another Write's payload): what its turn delivers is what it places.
    let msgs = writes(2, 1000);
    let (mut mem, mut rx, _, wire) = run(Markers::RFC, &msgs);
    assert_eq!(rx.placed_ahead(), 1);
    let other = vec![msgs[0].clone(), Msg { msg: msgs[1].msg, payload: vec![0x77; 1000] }];
    let (wire2, _) = emit(&other, tx::Config { markers: Markers::RFC, crc: true, mulpdu: 1400 });
    assert_eq!(wire2.len(), wire.len());
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire2]), &mut mem).unwrap();
    assert_eq!(mem.events, expected_events(&other));
    assert_eq!(mem.tagged[&0x101].1, other[1].payload, "the octets delivered are the ones placed");
}

#[test]
fn early_placement_checks_no_more_than_the_callers_limit() {
    // Eight Writes, every one but the first offered out of order, with room to check three:
    // three are placed early, the rest in their turn, all of them right.
    let msgs = writes(8, 1000);
    let (wire, fpdus, mut rx, mut mem) = setup(Markers::RFC, true, &msgs);
    let three: u64 = fpdus[1..4].iter().map(|&(_, len)| u64::from(len)).sum();
    rx.limit_ahead(three);
    for &(start, len) in fpdus.iter().skip(1) {
        let seg = &wire[start as usize - 4..(start + u64::from(len)) as usize];
        assert_eq!(rx.receive::<Crc, _>(&Pieces::new(start - 4, &[seg]), &mut mem), Ok(0));
    }
    assert_eq!(rx.placed_ahead(), 3);
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    assert_eq!(mem.events, expected_events(&msgs));
    mem.assert_placed(&msgs);
}

#[test]
fn without_markers_or_alignment_nothing_is_placed_early() {
    let msgs = writes(4, 1000);
    let (mut mem, mut rx, _, wire) = run(Markers::NONE, &msgs);
    assert_eq!(rx.placed_ahead(), 0);
    assert_eq!(rx.early_stats(), Default::default(), "a wrong guess is not a bad FPDU");
    assert!(mem.tagged.values().all(|(_, b, _)| b.iter().all(|&x| x == 0)));
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    mem.assert_placed(&msgs);
}

#[test]
fn fpdus_at_segment_starts_are_placed_early_without_markers() {
    let msgs = writes(8, 1000);
    let (mut mem, mut rx, _, wire) = run_cut(Markers::NONE, true, Cut::Aligned, &msgs);
    assert_eq!(rx.placed_ahead(), 7);
    assert_eq!(rx.early_stats().by_alignment, 7);
    assert!(mem.events.is_empty());
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    assert_eq!(mem.events, expected_events(&msgs));
    mem.assert_placed(&msgs);
}

#[test]
fn without_crcs_a_segment_start_is_not_trusted() {
    let msgs = writes(4, 1000);
    let (mut mem, mut rx, _, wire) = run_cut(Markers::NONE, false, Cut::Aligned, &msgs);
    assert_eq!(rx.placed_ahead(), 0);
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    mem.assert_placed(&msgs);
}

#[test]
fn early_placement_record_is_bounded() {
    let msgs = writes(100, 1000);
    let (mut mem, mut rx, _, wire) = run(Markers::RFC, &msgs);
    assert_eq!(rx.placed_ahead(), iwarp_proto::rx::placed::CAPACITY);
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    assert_eq!(mem.events, expected_events(&msgs));
    mem.assert_placed(&msgs);
}

#[test]
fn fpdus_without_a_marker_are_found_after_an_early_placed_one() {
    // 100-octet FPDUs: most carry no marker. Arriving in order after a hole, each one starts
    // where the previous early-placed one ended.
    let msgs = writes(20, 100);
    let (wire, fpdus, mut rx, mut mem) = setup(Markers::RFC, true, &msgs);
    let first_marked = fpdus.iter().position(|&(s, l)| s > 0 && (s + l as u64) / 512 > s.saturating_sub(1) / 512 && s % 512 != 0).unwrap();
    for &(start, len) in &fpdus[first_marked..] {
        let seg = &wire[start as usize..(start + len as u64) as usize];
        rx.receive::<Crc, _>(&Pieces::new(start, &[seg]), &mut mem).unwrap();
    }
    assert!(rx.placed_ahead() >= fpdus.len() - first_marked - 1, "only {} placed", rx.placed_ahead());
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    assert_eq!(mem.events, expected_events(&msgs));
    mem.assert_placed(&msgs);
}

#[test]
fn early_placement_goes_on_past_an_fpdu_it_cannot_place() {
    let msgs = writes(8, 1000);
    let (wire, fpdus, mut rx, mut mem) = setup(Markers::RFC, true, &msgs);
    // Write 3's buffer is not there (yet): its FPDU cannot be placed early.
    let held = mem.tagged.remove(&0x103).unwrap();
    // Everything after the first FPDU arrives as one run: its first FPDU found through its
    // marker (with markers, the start of the bytes is not guessed at), the next right after it,
    // write 3 held back, write 4 through a marker, the rest after it.
    let s = fpdus[1].0 as usize;
    assert_eq!(rx.receive::<Crc, _>(&Pieces::new(s as u64, &[&wire[s..]]), &mut mem), Ok(0));
    let st = rx.early_stats();
    assert_eq!((st.by_alignment, st.by_marker, st.after_placed, st.held_back, st.bad), (0, 2, 4, 1, 0), "{st:?}");
    for i in [1, 2, 4, 5, 6, 7] {
        assert_eq!(mem.tagged[&(0x100 + i as u32)].1, msgs[i].payload, "write {i} placed early");
    }
    // In order, write 3 is placed then (its buffer registered by now) and the rest delivered.
    mem.tagged.insert(0x103, held);
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    assert_eq!(mem.events, expected_events(&msgs));
    mem.assert_placed(&msgs);
}

#[test]
fn a_split_fpdu_is_left_for_the_in_order_pass() {
    let msgs = writes(3, 1000);
    let (wire, fpdus, mut rx, mut mem) = setup(Markers::RFC, true, &msgs);
    let (s, l) = fpdus[2];
    let half = &wire[s as usize..(s + l as u64 / 2) as usize];
    rx.receive::<Crc, _>(&Pieces::new(s, &[half]), &mut mem).unwrap();
    assert_eq!(rx.placed_ahead(), 0);
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    mem.assert_placed(&msgs);
}

#[test]
fn nothing_is_placed_early_before_the_peer_to_peer_rtr() {
    use iwarp_proto::mpa::negotiate::Rtr;
    // The initiator's zero-length RTR Write, then a real Write; the second arrives first.
    let msgs = vec![
        Msg { msg: Message::Write { stag: 0x200, to: 0 }, payload: Vec::new() },
        Msg { msg: Message::Write { stag: 0x100, to: 4096 }, payload: vec![9; 3000] },
    ];
    let (wire, fpdus) = emit(&msgs, tx::Config { markers: Markers::RFC, crc: true, mulpdu: 1400 });
    let cfg = rx::Config { markers: Markers::RFC, crc: true, expect_rtr: Some(Rtr::Write), expect_rtr_read_response: false, extensions: false };
    let mut rx = Receiver::new(cfg);
    let mut mem = Memory::for_scenario(&msgs[1..]);
    for &(start, len) in fpdus.iter().skip(1).rev() {
        let seg = &wire[start as usize..(start + len as u64) as usize];
        rx.receive::<Crc, _>(&Pieces::new(start, &[seg]), &mut mem).unwrap();
    }
    rx.receive::<Crc, _>(&Pieces::new(0, &[&wire]), &mut mem).unwrap();
    assert_eq!(mem.events, vec![iwarp_proto::rx::Event::ReadyToReceive(Rtr::Write), iwarp_proto::rx::Event::Write { stag: 0x100 }]);
    mem.assert_placed(&msgs[1..]);
}
