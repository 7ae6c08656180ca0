//! iwarp-bench: perftest-style measurements over iwarp.ko between two machines.
//!
//!   iwarp-bench server [--port P] [CONNECTION OPTIONS]
//!   iwarp-bench client HOST [--port P] [--test T,..] [--sizes S,..] [--iters N] [--depth D]
//!                           [--format table|csv|json] [--stop-server] [CONNECTION OPTIONS]
//!
//! Connection options (both sides alike): `--markers 0|1`, `--crc 0|1`, `--mpa-rev 1|2`;
//! `--copy 1` has the module copy every payload before sending (no zero copy), to compare;
//! `--ooo 0` has it place what arrives only in order (no out-of-order placement), to compare;
//! `--aligned 1` has it start each FPDU at a TCP segment (what a receiver without markers needs
//! to place out of order);
//! `--marker-interval N` puts markers N octets apart (experiments: both sides must say the same);
//! `--poll 1` waits for completions by busy polling the CQ (and spins on written memory without
//! yielding), never sleeping: the lowest latency, for a CPU kept busy.
//! Client only: `--qps N` runs write_bw over N QPs at once sharing one CQ (the aggregate);
//! `--idle N` keeps N more QPs connected and idle (to the server's port + 1) during the tests.
//!
//! Tests: send_lat, write_lat, read_lat (ping-pong or round trip; half the round trip for the
//! ping-pongs, as perftest reports), send_bw, write_bw, read_bw (payload octets over the time
//! until the peer confirmed the last). Each (test, size) runs on a fresh connection; the client
//! tells the server what to do in the MPA private data. The client ends the server with a last
//! connection of test "quit".

mod report;
mod tests;

use clap::{ArgAction, Args, Parser, Subcommand};
use libiwarp::{ConnectOptions, Role};
use std::error::Error;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tests::Test;

/// How both sides of a run connect and wait.
#[derive(Args, Clone, Copy)]
pub(crate) struct Conn {
    /// Ask for MPA markers.
    #[arg(long, action = ArgAction::Set, value_parser = bit, default_value = "1")]
    pub(crate) markers: bool,
    /// Ask for MPA CRCs.
    #[arg(long, action = ArgAction::Set, value_parser = bit, default_value = "1")]
    pub(crate) crc: bool,
    /// MPA revision.
    #[arg(long, default_value_t = 2)]
    pub(crate) mpa_rev: u8,
    /// Copy every payload before sending (no zero copy).
    #[arg(long, action = ArgAction::Set, value_parser = bit, default_value = "0")]
    pub(crate) copy: bool,
    /// Place what arrives out of order (0: in order only).
    #[arg(long, action = ArgAction::Set, value_parser = bit, default_value = "1")]
    pub(crate) ooo: bool,
    /// Start each FPDU at a TCP segment.
    #[arg(long, action = ArgAction::Set, value_parser = bit, default_value = "0")]
    pub(crate) aligned: bool,
    /// Octets between markers (0: RFC 5044's 512).
    #[arg(long, default_value_t = 0)]
    pub(crate) marker_interval: u32,
    /// Busy poll for completions instead of sleeping.
    #[arg(long, action = ArgAction::Set, value_parser = bit, default_value = "0")]
    pub(crate) poll: bool,
}

/// How to run the client side.
#[derive(Args)]
pub(crate) struct Options {
    /// Tests to run, comma-separated.
    #[arg(long = "test", value_delimiter = ',', value_parser = Test::parse, default_value = "write_bw,write_lat,send_lat")]
    pub(crate) tests: Vec<Test>,
    /// Message sizes in octets, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,64,512,4096,65536")]
    pub(crate) sizes: Vec<usize>,
    /// Iterations per (test, size) (default: 1000 for latency, about 32 MiB for bandwidth).
    #[arg(long)]
    pub(crate) iters: Option<usize>,
    /// Operations in flight in bandwidth tests (perftest's default, so runs beside it compare).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..=1024))]
    depth: u16,
    #[arg(long, value_parser = report::Format::parse, default_value = "table")]
    pub(crate) format: report::Format,
    /// End the server afterwards.
    #[arg(long)]
    pub(crate) stop_server: bool,
    /// QPs write_bw runs over at once, sharing one CQ (the depth is shared, posted round robin).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    qps: u16,
    /// Connected QPs kept idle (to the server's port + 1) while the tests run.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1000))]
    idle: u16,
    #[command(flatten)]
    pub(crate) conn: Conn,
}

impl Options {
    pub(crate) fn depth(&self) -> usize {
        self.depth as usize
    }

    pub(crate) fn qps(&self) -> usize {
        self.qps as usize
    }
}

#[derive(Parser)]
#[command(name = "iwarp-bench", about = "perftest-style measurements over iwarp.ko between two machines")]
struct Cli {
    #[command(subcommand)]
    side: Side,
}

#[derive(Subcommand)]
enum Side {
    /// Serve runs until a client says quit.
    Server {
        #[arg(long, default_value_t = 7300)]
        port: u16,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run the tests against a server.
    Client {
        host: String,
        #[arg(long, default_value_t = 7300)]
        port: u16,
        #[command(flatten)]
        options: Options,
    },
}

/// A 0|1 flag value.
fn bit(s: &str) -> Result<bool, String> {
    match s {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("{s}: 0 or 1")),
    }
}

fn main() {
    let result = match Cli::parse().side {
        Side::Server { port, conn } => serve(port, &conn),
        Side::Client { host, port, options } => client(&host, port, &options),
    };
    if let Err(e) = result {
        eprintln!("iwarp-bench: {e}");
        std::process::exit(1);
    }
}

/// Connection options for one run.
fn connect_options(role: Role, o: &Conn, private: Vec<u8>) -> ConnectOptions {
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

/// Serves runs until a client says quit, each connection in a thread of its own (a client may
/// run several QPs at once), and keeps QPs idle on `port + 1` for clients that ask for them. The
/// server asks for markers and CRC as its own options say (CRC is used if either side asks;
/// markers are asked per direction), so both sides of a run take the same options. Exits 1 if
/// any connection failed.
fn serve(port: u16, o: &Conn) -> Result<(), Box<dyn Error>> {
    let l = TcpListener::bind(("0.0.0.0", port))?;
    let idle = TcpListener::bind(("0.0.0.0", port + 1))?;
    let conn = *o;
    std::thread::spawn(move || {
        if let Err(e) = tests::serve_idle(idle, &conn) {
            eprintln!("iwarp-bench: idle QPs: {e}");
        }
    });
    eprintln!("iwarp-bench: serving on {port}");
    static FAILED: AtomicBool = AtomicBool::new(false);
    loop {
        let (s, _) = l.accept()?;
        std::thread::spawn(move || match tests::serve_one(s, &conn) {
            Ok(true) => {}
            Ok(false) => std::process::exit(FAILED.load(Ordering::Relaxed) as i32),
            Err(e) => {
                eprintln!("iwarp-bench: {e}");
                FAILED.store(true, Ordering::Relaxed);
            }
        });
    }
}

fn dial(host: &str, port: u16) -> Result<TcpStream, Box<dyn Error>> {
    let s = iwarp_testkit::dial(host, &port.to_string())?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn client(host: &str, port: u16, o: &Options) -> Result<(), Box<dyn Error>> {
    // The idle QPs, connected first and kept until the end.
    let dev = libiwarp::Device::open()?;
    let (pd, cq) = (dev.alloc_pd()?, dev.create_cq(16)?);
    let idle = (0..o.idle).map(|_| tests::idle_qp(&dev, &pd, &cq, dial(host, port + 1)?, &o.conn)).collect::<Result<Vec<_>, _>>()?;
    let mut results = Vec::new();
    for &t in &o.tests {
        for &size in &o.sizes {
            let r = if t == Test::WriteBw && o.qps() > 1 {
                tests::write_bw_many((0..o.qps()).map(|_| dial(host, port)).collect::<Result<_, _>>()?, size, o)?
            } else {
                tests::run_one(dial(host, port)?, t, size, o)?
            };
            report::progress(o.format, &r);
            results.push(r);
        }
    }
    if o.stop_server {
        tests::quit(dial(host, port)?, &o.conn)?;
    }
    drop(idle);
    report::print(o.format, o, &results);
    Ok(())
}

#[cfg(test)]
mod cli_tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_take_zero_or_one() {
        let cli = Cli::try_parse_from(["iwarp-bench", "client", "h", "--markers", "0", "--crc", "1", "--poll", "1", "--qps", "4"]).unwrap();
        let Side::Client { options: o, .. } = cli.side else { panic!("not a client") };
        assert!(!o.conn.markers && o.conn.crc && o.conn.poll && !o.conn.copy);
        assert_eq!(o.qps(), 4);
        let Side::Server { conn, .. } = Cli::try_parse_from(["iwarp-bench", "server"]).unwrap().side else { panic!("not a server") };
        assert!(conn.markers && conn.crc && !conn.poll);
        assert!(Cli::try_parse_from(["iwarp-bench", "server", "--markers", "true"]).is_err());
    }
}
