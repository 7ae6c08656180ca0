//! Prints what `/dev/iwarp` reports, like `ibv_devinfo`. With `--check`, also verifies the
//! answer against this library's ABI and that bad requests get the right errno; exits 1 if not.

use libiwarp::abi::{self, caps, QueryDevice};
use libiwarp::Device;
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = std::env::args().any(|a| a == "--check");
    let dev = match Device::open() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("iwarp-info: cannot open {}: {e}", libiwarp::DEVICE_PATH);
            return ExitCode::FAILURE;
        }
    };
    let q = match dev.query() {
        Ok(q) => q,
        Err(e) => {
            eprintln!("iwarp-info: QUERY_DEVICE failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    print(&q);
    if !check {
        return ExitCode::SUCCESS;
    }
    let mut failures = Vec::new();
    if q != abi::device_attributes() {
        failures.push(format!("answer differs from the ABI's device_attributes(): {:?}", abi::device_attributes()));
    }
    // An unknown command must be refused with ENOTTY, a known one with the wrong size with EINVAL.
    match dev.raw_query(abi::IOCTL_QUERY_DEVICE + 0x7f) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => {}
        other => failures.push(format!("unknown ioctl: expected ENOTTY, got {other:?}")),
    }
    match dev.raw_query(abi::IOCTL_QUERY_DEVICE - (8 << 16)) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTTY) || e.raw_os_error() == Some(libc::EINVAL) => {}
        other => failures.push(format!("short QUERY_DEVICE: expected an errno, got {other:?}")),
    }
    if failures.is_empty() {
        println!("QUERY_DEVICE check: ok (abi {}, caps {:#x})", q.abi_version, q.caps);
        ExitCode::SUCCESS
    } else {
        failures.iter().for_each(|f| eprintln!("QUERY_DEVICE check FAILED: {f}"));
        ExitCode::FAILURE
    }
}

fn print(q: &QueryDevice) {
    let names = [(caps::MARKERS, "markers"), (caps::CRC, "crc"), (caps::MPA_V2, "mpa-v2"), (caps::OOO_PLACEMENT, "ooo-placement"), (caps::QUEUE_PAIRS, "queue-pairs")];
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
