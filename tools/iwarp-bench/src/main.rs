//! iwarp-bench: perftest-style measurements over iwarp.ko between two machines.
//!
//!   iwarp-bench server [--port P] [--markers 0|1] [--crc 0|1] [--mpa-rev 1|2] [--copy 0|1] [--ooo 0|1]
//!                      [--aligned 0|1] [--marker-interval N]
//!   iwarp-bench client HOST [--port P] [--test T,..] [--sizes S,..] [--iters N] [--depth D]
//!                           [--markers 0|1] [--crc 0|1] [--mpa-rev 1|2] [--copy 0|1] [--ooo 0|1]
//!                           [--aligned 0|1] [--marker-interval N] [--format table|csv|json]
//!                           [--stop-server]
//!
//! `--copy 1` has the module copy every payload before sending (no zero copy), to compare;
//! `--ooo 0` has it place what arrives only in order (no out-of-order placement), to compare;
//! `--aligned 1` has it start each FPDU at a TCP segment (what a receiver without markers needs
//! to place out of order);
//! `--marker-interval N` puts markers N octets apart (experiments: both sides must say the same).
//!
//! Tests: send_lat, write_lat, read_lat (ping-pong or round trip; half the round trip for the
//! ping-pongs, as perftest reports), send_bw, write_bw, read_bw (payload octets over the time
//! until the peer confirmed the last). Each (test, size) runs on a fresh connection; the client
//! tells the server what to do in the MPA private data. The client ends the server with a last
//! connection of test "quit".

mod report;
mod tests;

use libiwarp::{ConnectOptions, Role};
use std::error::Error;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use tests::Test;

/// How to run the client side.
pub(crate) struct Options {
    pub(crate) tests: Vec<Test>,
    pub(crate) sizes: Vec<usize>,
    pub(crate) iters: Option<usize>,
    pub(crate) depth: usize,
    pub(crate) markers: bool,
    pub(crate) crc: bool,
    pub(crate) mpa_rev: u8,
    pub(crate) copy: bool,
    pub(crate) ooo: bool,
    pub(crate) aligned: bool,
    pub(crate) marker_interval: u32,
    pub(crate) format: report::Format,
    pub(crate) stop_server: bool,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("iwarp-bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut port = 7300u16;
    let mut o = Options {
        tests: vec![Test::WriteBw, Test::WriteLat, Test::SendLat],
        sizes: vec![8, 64, 512, 4096, 65536],
        iters: None,
        depth: 64,
        markers: true,
        crc: true,
        mpa_rev: 2,
        copy: false,
        ooo: true,
        aligned: false,
        marker_interval: 0,
        format: report::Format::Table,
        stop_server: false,
    };
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--port" => port = val()?.parse()?,
            "--test" => o.tests = val()?.split(',').map(Test::parse).collect::<Result<_, _>>()?,
            "--sizes" => o.sizes = val()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--iters" => o.iters = Some(val()?.parse()?),
            "--depth" => o.depth = val()?.parse()?,
            "--markers" => o.markers = val()? == "1",
            "--crc" => o.crc = val()? == "1",
            "--mpa-rev" => o.mpa_rev = val()?.parse()?,
            "--copy" => o.copy = val()? == "1",
            "--ooo" => o.ooo = val()? == "1",
            "--aligned" => o.aligned = val()? == "1",
            "--marker-interval" => o.marker_interval = val()?.parse()?,
            "--format" => o.format = report::Format::parse(val()?)?,
            "--stop-server" => o.stop_server = true,
            _ => rest.push(a.clone()),
        }
    }
    if !(1..=1024).contains(&o.depth) {
        return Err("--depth must be 1..=1024".into());
    }
    match rest.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server"] => serve(port, &o),
        ["client", host] => client(host, port, &o),
        _ => Err("usage: see the top of tools/iwarp-bench/src/main.rs".into()),
    }
}

/// Connection options for one run.
fn connect_options(role: Role, o: &Options, private: Vec<u8>) -> ConnectOptions {
    let mut c = ConnectOptions::new(role);
    c.markers = o.markers;
    c.crc = o.crc;
    c.mpa_rev = o.mpa_rev;
    c.copy_send = o.copy;
    c.in_order_only = !o.ooo;
    c.aligned = o.aligned;
    c.marker_interval = o.marker_interval;
    c.private_data = private;
    c.timeout = Duration::from_secs(30);
    c
}

/// Serves runs until a client says quit. The server asks for markers and CRC as its own options
/// say (CRC is used if either side asks; markers are asked per direction), so both sides of a
/// run take the same options.
fn serve(port: u16, o: &Options) -> Result<(), Box<dyn Error>> {
    let l = TcpListener::bind(("0.0.0.0", port))?;
    eprintln!("iwarp-bench: serving on {port}");
    loop {
        let (s, _) = l.accept()?;
        if !tests::serve_one(s, o)? {
            return Ok(());
        }
    }
}

fn dial(host: &str, port: u16) -> Result<TcpStream, Box<dyn Error>> {
    let s = iwarp_testkit::dial(host, &port.to_string())?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn client(host: &str, port: u16, o: &Options) -> Result<(), Box<dyn Error>> {
    let mut results = Vec::new();
    for &t in &o.tests {
        for &size in &o.sizes {
            let r = tests::run_one(dial(host, port)?, t, size, o)?;
            report::progress(o.format, &r);
            results.push(r);
        }
    }
    if o.stop_server {
        tests::quit(dial(host, port)?, o)?;
    }
    report::print(o.format, o, &results);
    Ok(())
}
