//! Prints what `/dev/iwarp` reports, like `ibv_devinfo`.

use libiwarp::abi::{caps, QueryDevice};
use libiwarp::Device;
use std::process::ExitCode;

fn main() -> ExitCode {
    let q = match Device::open().and_then(|d| d.query()) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("iwarp-info: {}: {e}", libiwarp::DEVICE_PATH);
            return ExitCode::FAILURE;
        }
    };
    print(&q);
    ExitCode::SUCCESS
}
fn print(q: &QueryDevice) {
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
