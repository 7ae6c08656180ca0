//! `iwarp`: what `/dev/iwarp` reports, in the spirit of iproute2's `rdma` tool.
//!
//! - `iwarp dev`: the device's ABI version, capabilities and limits (like `ibv_devinfo`).
//! - `iwarp qp`: every QP on this host, a line each: process, handle, state, connection.
//! - `iwarp stat` (the default): every QP with its counters as `name value` pairs (like
//!   `rdma statistic`): octets sent zero copy and copied; octets placed in order and out of
//!   order; FPDUs placed out of order, found through markers and at segment starts; held back;
//!   bad; walks of TCP's out-of-order queue; doorbells; octets received through the bounce
//!   buffer (segments too small to gather).

use libiwarp::abi::{caps, QueryDevice};
use libiwarp::{Device, QpListing, QpState};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cmd = std::env::args().nth(1).unwrap_or_else(|| "stat".into());
    let run = |dev: Device| -> std::io::Result<()> {
        match cmd.as_str() {
            "dev" => print_device(&dev.query()?),
            "qp" => dev.list_qps()?.iter().for_each(|q| println!("{}", qp_line(q))),
            "stat" => dev.list_qps()?.iter().for_each(|q| println!("{}", stat_line(q))),
            _ => return Err(std::io::Error::other("usage: iwarp [dev|qp|stat]")),
        }
        Ok(())
    };
    match Device::open().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iwarp {cmd}: {}: {e}", libiwarp::DEVICE_PATH);
            ExitCode::FAILURE
        }
    }
}

fn print_device(q: &QueryDevice) {
    let names =
        [(caps::MARKERS, "markers"), (caps::CRC, "crc"), (caps::MPA_V2, "mpa-v2"), (caps::OOO_PLACEMENT, "ooo-placement"), (caps::QUEUE_PAIRS, "queue-pairs")];
    let set: Vec<&str> = names.iter().filter(|(b, _)| q.caps & b != 0).map(|(_, n)| *n).collect();
    println!("device:          {}", libiwarp::DEVICE_PATH);
    println!("abi_version:     {}", q.abi_version);
    println!("caps:            {:#x} [{}]", q.caps, set.join(" "));
    println!("marker_interval: {}", q.marker_interval);
    println!("max_qp/wr:       {}/{}", q.max_qp, q.max_qp_wr);
    println!("max_cq/cqe:      {}/{}", q.max_cq, q.max_cqe);
    println!("max_mr/size:     {}/{}", q.max_mr, q.max_mr_size);
    println!("max_sge:         {}", q.max_sge);
    println!("max_ird/ord:     {}/{}", q.max_ird, q.max_ord);
}

/// `pid 812 qp 1 state rts 10.77.0.1:7210 > 10.77.0.2:53940 markers 512/512`
fn qp_line(q: &QpListing) -> String {
    let end = |a: Option<std::net::SocketAddr>| a.map_or("-".into(), |a| a.to_string());
    let state = match q.state {
        QpState::Init => "init".to_string(),
        QpState::Connected => "rts".to_string(),
        QpState::Error { terminate: Some((l, t, c)), sent } => format!("error terminate {l}/{t}/{c} {}", if sent { "sent" } else { "received" }),
        QpState::Error { terminate: None, .. } => "error".to_string(),
    };
    let p = &q.placement;
    format!("pid {} qp {} state {state} {} > {} markers {}/{}", q.pid, q.handle, end(q.local), end(q.remote), p.rx_marker_interval, p.tx_marker_interval)
}

/// [`qp_line`] and then every counter.
fn stat_line(q: &QpListing) -> String {
    let p = &q.placement;
    let counters = [
        ("sent_zero_copy", q.sent.0),
        ("sent_copied", q.sent.1),
        ("placed_in_order", p.in_order),
        ("placed_out_of_order", p.out_of_order),
        ("fpdus_out_of_order", p.fpdus_out_of_order),
        ("fpdus_by_marker", p.fpdus_by_marker),
        ("fpdus_by_alignment", p.fpdus_by_alignment),
        ("fpdus_held_back", p.fpdus_held_back),
        ("fpdus_bad", p.fpdus_bad),
        ("ooo_walks", p.ooo_walks),
        ("doorbells", p.doorbells),
        ("received_copied", p.received_copied),
    ];
    let mut line = qp_line(q);
    for (name, value) in counters {
        line += &format!(" {name} {value}");
    }
    line
}
