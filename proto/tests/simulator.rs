//! Property test: random message streams are emitted, re-segmented at random (as a middlebox
//! may split or coalesce), reordered and duplicated, and fed to the receive engine the way a
//! TCP receiver would (out-of-order segments as they arrive, in-order bytes as they become
//! contiguous). Every payload byte must land exactly once where it belongs, every delivery must
//! come in order exactly once, and (CRC on) any flipped bit must be caught.
//! Case counts: SIM_CASES (default 10000) for delivery, a fifth of that for bit flips.

mod common;

use common::{emit, expected_events, markers_choice, Crc, Memory, Rng};
use iwarp_proto::markers::{mulpdu, Markers};
use iwarp_proto::mpa::negotiate::Rtr;
use iwarp_proto::rdmap::ReadRequest;
use iwarp_proto::rx::Event;
use iwarp_proto::rx::{self, Receiver, RxError};
use iwarp_proto::stream::Pieces;
use iwarp_proto::tx;
use iwarp_proto::tx::Message;
use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest, ProptestConfig};
use std::collections::BTreeMap;

fn cases(div: u32) -> u32 {
    std::env::var("SIM_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000) / div
}

/// Cuts the wire into segments: FPDU-aligned (what our sender does), then merged or split at
/// random, or cut at random points.
fn segment(rng: &mut Rng, wire: &[u8], fpdus: &[(u64, u32)]) -> Vec<(u64, Vec<u8>)> {
    let mut cuts: Vec<u64> = if rng.chance(60) { fpdus.iter().map(|f| f.0).filter(|_| !rng.chance(20)).collect() } else { Vec::new() };
    let extra = rng.below(wire.len() as u64 / 200 + 3);
    for _ in 0..extra {
        cuts.push(rng.below(wire.len() as u64 + 1));
    }
    cuts.push(0);
    cuts.push(wire.len() as u64);
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2).map(|w| (w[0], wire[w[0] as usize..w[1] as usize].to_vec())).collect()
}

/// Reorders (near or far) and duplicates segments.
fn disorder(rng: &mut Rng, segs: &mut Vec<(u64, Vec<u8>)>) {
    let n = segs.len();
    if n > 1 {
        let swaps = rng.below(n as u64 * 2);
        let far = rng.chance(30);
        for _ in 0..swaps {
            let i = rng.below(n as u64) as usize;
            let j = if far { rng.below(n as u64) as usize } else { (i + 1 + rng.below(3) as usize).min(n - 1) };
            segs.swap(i, j);
        }
    }
    for _ in 0..rng.below(n as u64 / 4 + 2) {
        let i = rng.below(segs.len() as u64) as usize;
        let d = segs[i].clone();
        let at = rng.below(segs.len() as u64 + 1) as usize;
        segs.insert(at, d);
    }
}

/// Feeds segments like a TCP receiver: out-of-order ones straight to the engine (the module's
/// hook does this) and kept, in-order bytes once contiguous, split in two pieces at random.
/// Returns the first receive error.
fn feed(rng: &mut Rng, rx: &mut Receiver, mem: &mut Memory, segs: &[(u64, Vec<u8>)]) -> Option<RxError> {
    let mut ooo: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut inbuf: Vec<u8> = Vec::new();
    let mut base = 0u64; // stream offset of inbuf[0] (== rx.next())
    for (start, bytes) in segs {
        let end = start + bytes.len() as u64;
        let contiguous = base + inbuf.len() as u64;
        if *start > contiguous {
            if let Err(e) = rx.receive::<Crc, _>(&Pieces::new(*start, &[bytes]), mem) {
                return Some(e);
            }
            ooo.insert(*start, bytes.clone());
            continue;
        }
        if end <= contiguous {
            continue; // a duplicate TCP drops
        }
        inbuf.extend_from_slice(&bytes[(contiguous - start) as usize..]);
        while let Some((&s, _)) = ooo.iter().next() {
            let c = base + inbuf.len() as u64;
            if s > c {
                break;
            }
            let b = ooo.remove(&s).unwrap();
            if s + b.len() as u64 > c {
                inbuf.extend_from_slice(&b[(c - s) as usize..]);
            }
        }
        let split = rng.below(inbuf.len() as u64 + 1) as usize;
        let parts = [&inbuf[..split], &inbuf[split..]];
        match rx.receive::<Crc, _>(&Pieces::new(base, &parts), mem) {
            Ok(n) => {
                inbuf.drain(..n as usize);
                base += n;
                assert_eq!(base, rx.next());
            }
            Err(e) => return Some(e),
        }
    }
    None
}

fn config(rng: &mut Rng, crc: bool) -> (tx::Config, rx::Config) {
    let markers = markers_choice(rng);
    let emss = 128 + rng.below(9000) as u32;
    let m = mulpdu(emss, if markers.enabled() { Markers::RFC } else { Markers::NONE }).max(80);
    (tx::Config { markers, crc, mulpdu: m }, rx::Config { markers, crc, expect_rtr: None, expect_rtr_read_response: false, extensions: true })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(1), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_byte_placed_once_and_every_event_delivered_in_order(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let crc = rng.chance(70);
        let big = rng.chance(3);
        let mut msgs = common::scenario(&mut rng, big);
        let (tcfg, mut rcfg) = config(&mut rng, crc);
        // Peer-to-peer mode in some cases: the stream opens with the initiator's RTR.
        let rtr = peer_to_peer(&mut rng, &mut msgs);
        rcfg.expect_rtr = rtr;
        let (wire, fpdus) = emit(&msgs, tcfg);
        let mut segs = segment(&mut rng, &wire, &fpdus);
        disorder(&mut rng, &mut segs);
        let mut rx = Receiver::new(rcfg);
        let mut mem = Memory::for_scenario(&msgs);
        let err = feed(&mut rng, &mut rx, &mut mem, &segs);
        prop_assert_eq!(err, None);
        prop_assert_eq!(rx.next(), wire.len() as u64);
        prop_assert_eq!(rx.placed_ahead(), 0);
        prop_assert_eq!(&mem.events, &expected_with_rtr(&msgs, rtr));
        mem.assert_placed(&msgs);
    }
}

/// In a sixth of the cases, prepends a zero-length RTR of a random kind.
fn peer_to_peer(rng: &mut Rng, msgs: &mut Vec<common::Msg>) -> Option<Rtr> {
    if !rng.chance(17) {
        return None;
    }
    let (rtr, msg) = match rng.below(3) {
        0 => (Rtr::Send, Message::Send { solicited: false, invalidate: None }),
        1 => (Rtr::Write, Message::Write { stag: 0x99, to: 0 }),
        _ => (Rtr::Read, Message::ReadRequest(ReadRequest { sink_stag: 0x98, sink_to: 0, size: 0, src_stag: 0x97, src_to: 0 })),
    };
    msgs.insert(0, common::Msg { msg, payload: Vec::new() });
    Some(rtr)
}

/// What the receiver must deliver: the RTR's own event is replaced by ReadyToReceive (a Read
/// RTR also stays a Read Request, to be answered).
fn expected_with_rtr(msgs: &[common::Msg], rtr: Option<Rtr>) -> Vec<Event> {
    let mut ev = expected_events(msgs);
    match rtr {
        None => {}
        Some(Rtr::Read) => ev.insert(0, Event::ReadyToReceive(Rtr::Read)),
        Some(r) => ev[0] = Event::ReadyToReceive(r),
    }
    ev
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(5), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn flipped_bits_are_always_caught_with_crc(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let msgs = common::scenario(&mut rng, false);
        let (tcfg, rcfg) = config(&mut rng, true);
        let (mut wire, fpdus) = emit(&msgs, tcfg);
        let bit = rng.below(wire.len() as u64 * 8);
        wire[(bit / 8) as usize] ^= 1 << (bit % 8);
        let hit = fpdus.iter().position(|f| f.0 * 8 <= bit && bit < (f.0 + f.1 as u64) * 8).unwrap();
        let mut segs = segment(&mut rng, &wire, &fpdus);
        disorder(&mut rng, &mut segs);
        let mut rx = Receiver::new(rcfg);
        let mut mem = Memory::for_scenario(&msgs);
        let err = feed(&mut rng, &mut rx, &mut mem, &segs);
        // The corrupted FPDU is never accepted: the stream ends with a Terminate there, or (a
        // corrupted length field) it waits for bytes that never come. Either way nothing at or
        // after it is delivered.
        let stalled = err.is_none() && rx.next() <= fpdus[hit].0;
        prop_assert!(matches!(err, Some(RxError::Terminate(_))) || stalled, "corruption not caught: {:?}", err);
        prop_assert!(rx.next() <= fpdus[hit].0);
        let delivered_before: usize = {
            // Messages whose last FPDU ends before the corrupted one.
            let expected = expected_events(&msgs);
            let n = mem.events.len();
            prop_assert_eq!(&mem.events[..], &expected[..n]);
            n
        };
        let _ = delivered_before;
    }
}
