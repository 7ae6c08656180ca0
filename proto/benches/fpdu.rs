//! Emit and receive throughput of the protocol core for 4 KiB and 64 KiB messages, markers
//! on/off, CRC on/off. `cargo xtask bench core` runs this and prints the ratios (marker tax,
//! CRC cost). Receive includes placing every payload byte into a target buffer (a copy), as the
//! module does from the skb into pinned pages; emit builds each FPDU's scatter list and CRC and
//! writes it out once (what TCP's copy into an skb costs without zero copy).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use iwarp_proto::crc::HostCrc;
use iwarp_proto::markers::{mulpdu, Markers};
use iwarp_proto::rdmap::Opcode;
use iwarp_proto::rx::{self, Event, Receiver, Sink, Target};
use iwarp_proto::stream::Pieces;
use iwarp_proto::terminate::Cause;
use iwarp_proto::tx::{self, Fpdu, Message, Transmitter};
use std::hint::black_box;

const SIZES: [(usize, &str); 2] = [(4096, "4KiB"), (65536, "64KiB")];

fn configs() -> [(Markers, bool, String); 4] {
    let name = |m: bool, c: bool| format!("markers={}/crc={}", if m { "on" } else { "off" }, if c { "on" } else { "off" });
    [
        (Markers::NONE, false, name(false, false)),
        (Markers::RFC, false, name(true, false)),
        (Markers::NONE, true, name(false, true)),
        (Markers::RFC, true, name(true, true)),
    ]
}

fn tx_config(markers: Markers, crc: bool) -> tx::Config {
    tx::Config { markers, crc, mulpdu: mulpdu(1460, markers) }
}

/// Emits one Write of `payload`, appending the wire bytes to `wire` (cleared first).
fn emit(cfg: tx::Config, payload: &[u8], fpdu: &mut Fpdu, wire: &mut Vec<u8>) {
    wire.clear();
    let mut t = Transmitter::new(cfg);
    let mut out = t.start(Message::Write { stag: 1, to: 0 }, payload.len() as u64).unwrap();
    while !out.done() {
        t.next_fpdu::<HostCrc, _>(&mut out, payload, fpdu);
        let at = wire.len();
        wire.resize(at + fpdu.wire_len as usize, 0);
        fpdu.write_to(payload, &mut wire[at..]);
    }
}

struct Place(Vec<u8>);
impl Sink for Place {
    fn check(&mut self, _: Opcode, _: Target, _: u32) -> Result<(), Cause> {
        Ok(())
    }
    fn place(&mut self, t: Target, b: &[u8]) {
        if let Target::Tagged { to, .. } = t {
            self.0[to as usize..to as usize + b.len()].copy_from_slice(b);
        }
    }
    fn deliver(&mut self, e: Event) {
        black_box(e);
    }
}

fn bench(c: &mut Criterion) {
    let mut fpdu = Box::<Fpdu>::default();
    for (size, size_name) in SIZES {
        let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut g = c.benchmark_group(format!("emit/{size_name}"));
        g.throughput(Throughput::Bytes(size as u64));
        for (markers, crc, name) in configs() {
            let mut wire = Vec::with_capacity(size * 2);
            g.bench_function(BenchmarkId::from_parameter(&name), |b| b.iter(|| emit(tx_config(markers, crc), &payload, &mut fpdu, &mut wire)));
        }
        g.finish();
        let mut g = c.benchmark_group(format!("receive/{size_name}"));
        g.throughput(Throughput::Bytes(size as u64));
        for (markers, crc, name) in configs() {
            let mut wire = Vec::new();
            emit(tx_config(markers, crc), &payload, &mut fpdu, &mut wire);
            let mut sink = Place(vec![0; size]);
            let rcfg = rx::Config { markers, crc, expect_rtr: None, expect_rtr_read_response: false };
            g.bench_function(BenchmarkId::from_parameter(&name), |b| {
                b.iter(|| {
                    let mut rx = Receiver::new(rcfg);
                    let n = rx.receive::<HostCrc, _>(&Pieces::new(0, &[&wire]), &mut sink).unwrap();
                    assert_eq!(n, wire.len() as u64);
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
