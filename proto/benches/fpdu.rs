//! Emit and receive throughput of the protocol core for 4 KiB and 64 KiB messages, markers
//! on/off, CRC on/off. `cargo xtask bench core` runs this and prints the ratios (marker tax,
//! CRC cost). Receive includes placing every payload byte into a target buffer (a copy), as the
//! module does from the skb into pinned pages; emit frames each FPDU, copies it out and computes
//! its CRC over the copy (what the module does when CRCs or markers are on). The pipeline group
//! sets emit + receive + place beside one `memcpy` of the same payload.

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

/// Emits one Write of `payload` into `wire` (large enough, as an skb's data is): each FPDU is
/// framed, copied out and its CRC computed over the copy, as a copying sender does. Returns the
/// octets written.
fn emit(cfg: tx::Config, payload: &[u8], fpdu: &mut Fpdu, wire: &mut [u8]) -> usize {
    let mut t = Transmitter::new(cfg);
    let mut out = t.start(Message::Write { stag: 1, to: 0 }, payload.len() as u64).unwrap();
    let mut at = 0;
    while !out.done() {
        t.frame(&mut out, fpdu);
        at += fpdu.write_sealed::<HostCrc, _>(payload, &mut wire[at..]);
    }
    at
}

/// Receives `wire` (one Write) and places its payload into `sink`.
fn receive(cfg: rx::Config, wire: &[u8], sink: &mut Place) {
    let mut rx = Receiver::new(cfg);
    let n = rx.receive::<HostCrc, _>(&Pieces::new(0, &[wire]), sink).unwrap();
    assert_eq!(n, wire.len() as u64);
}

fn rx_config(markers: Markers, crc: bool) -> rx::Config {
    rx::Config { markers, crc, expect_rtr: None, expect_rtr_read_response: false, extensions: false }
}

struct Place(Vec<u8>);
impl Sink for Place {
    fn check(&mut self, _: Opcode, _: Target, _: u32) -> Result<(), Cause> {
        Ok(())
    }
    fn place(&mut self, t: Target, b: &[u8]) -> Result<(), Cause> {
        if let Target::Tagged { to, .. } = t {
            self.0[to as usize..to as usize + b.len()].copy_from_slice(b);
        }
        Ok(())
    }
    fn deliver(&mut self, e: Event) {
        black_box(e);
    }
}

fn bench(c: &mut Criterion) {
    let mut fpdu = Box::<Fpdu>::default();
    for (size, size_name) in SIZES {
        let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut wire = vec![0u8; size * 2];
        let mut g = c.benchmark_group(format!("emit/{size_name}"));
        g.throughput(Throughput::Bytes(size as u64));
        for (markers, crc, name) in configs() {
            g.bench_function(BenchmarkId::from_parameter(&name), |b| b.iter(|| emit(tx_config(markers, crc), &payload, &mut fpdu, &mut wire)));
        }
        g.finish();
        let mut g = c.benchmark_group(format!("receive/{size_name}"));
        g.throughput(Throughput::Bytes(size as u64));
        for (markers, crc, name) in configs() {
            let n = emit(tx_config(markers, crc), &payload, &mut fpdu, &mut wire);
            let mut sink = Place(vec![0; size]);
            g.bench_function(BenchmarkId::from_parameter(&name), |b| b.iter(|| receive(rx_config(markers, crc), &wire[..n], &mut sink)));
        }
        g.finish();
    }
    // The physical limit: one copy of the same octets, beside a whole pass through the core
    // (emit, then receive and place) with markers and CRCs on.
    let (size, size_name) = SIZES[1];
    let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut wire = vec![0u8; size * 2];
    let mut sink = Place(vec![0; size]);
    let mut g = c.benchmark_group(format!("pipeline/{size_name}"));
    g.throughput(Throughput::Bytes(size as u64));
    g.bench_function("memcpy", |b| b.iter(|| sink.0.copy_from_slice(black_box(&payload))));
    for (markers, crc, name) in configs() {
        g.bench_function(BenchmarkId::from_parameter(&name), |b| {
            b.iter(|| {
                let n = emit(tx_config(markers, crc), &payload, &mut fpdu, &mut wire);
                receive(rx_config(markers, crc), &wire[..n], &mut sink);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
