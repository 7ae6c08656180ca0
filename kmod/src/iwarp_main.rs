// SPDX-License-Identifier: GPL-2.0

//! iwarp.ko: a software iWARP RNIC over the kernel's own TCP.
//!
//! Registers `/dev/iwarp`: memory regions (pinned user buffers), completion queues (rings the
//! application maps) and queue pairs over adopted TCP connections, which frame, place and
//! complete with the protocol core compiled in from `../proto` (proven at load with the
//! kernel's crc32c). `tcp_probe=1` proves the C shim's reach into kernel TCP at load.

use kernel::prelude::*;

/// The protocol core (`../proto`), compiled in as one module by path: the kernel build links no
/// external crates. Its `forbid(unsafe_code)` holds for all of it.
#[path = "../../proto/src/lib.rs"]
pub mod proto;
// Proto's files name each other `crate::name`, as at the root of their own crate.
use proto::{atomic, crc, ddp, markers, mpa, rdmap, stream, terminate, tx};

/// The user/kernel ABI shared with libiwarp.
#[path = "../../libiwarp/src/abi.rs"]
pub mod abi;

mod accesses;
mod charged;
mod cq;
mod device;
mod error;
mod eventfd;
mod events;
mod ffi;
mod fifo;
mod frags;
mod handles;
mod ib;
mod kernel_memory;
mod listen;
mod mr;
mod pinned;
mod qp;
mod ring;
mod selftest;
mod shim;
mod socket;
mod sync;
mod uapi;
mod verbs;

module! {
    type: IwarpModule,
    name: "iwarp",
    authors: ["iwarp-rs developers"],
    description: "Software iWARP (RDMAP/DDP/MPA) over kernel TCP",
    license: "GPL",
    params: {
        tcp_probe: u8 {
            default: 0,
            description: "At load, create, bind and release a kernel TCP socket and report it (1 = on)",
        },
        rx_callback_max: u32 {
            default: 4096,
            description: "Receive in the socket's data-ready callback (softirq) while at most this many octets wait, else in a work item that batches (0: always the work item)",
        },
        iw_markers: u8 {
            default: 1,
            description: "Connections of the RDMA core (iw_cm) on links made from now on ask for MPA markers in what they receive (0: they do not; siw has none); each link has its own in /sys/class/infiniband/NAME/mpa_markers",
        },
        iw_crc: u8 {
            default: 1,
            description: "Connections of the RDMA core (iw_cm) on links made from now on ask for MPA CRCs (0: they do not, and use them if the peer asks); each link has its own in /sys/class/infiniband/NAME/mpa_crc",
        },
        iw_mpa_rev: u8 {
            default: 2,
            description: "Connections of the RDMA core (iw_cm) on links made from now on ask for this MPA revision (1 or 2; others count as 2); each link has its own in /sys/class/infiniband/NAME/mpa_rev",
        },
        iw_p2p: u8 {
            default: 1,
            description: "Connections of the RDMA core (iw_cm) on links made from now on ask for MPA peer-to-peer mode, an RTR message before the first FPDU, so that the responder may send first (0: they do not; revision 2 only); each link has its own in /sys/class/infiniband/NAME/mpa_p2p",
        },
        inject_init_failure: u8 {
            default: 0,
            description: "Fail module init on purpose (tests that a broken module is caught)",
        },
        inject_receive_hold_us: u32 {
            default: 0,
            description: "Tests only: the receive work holds the socket lock this many microseconds after each read, so what arrives meanwhile waits in TCP's backlog (0: no hold)",
        },
    },
}

#[pin_data]
struct IwarpModule {
    /// Rings a QP's receive work for segments that arrive out of order.
    _doorbell: socket::Doorbell,
    /// The rdma link type `iwarp`, and our devices of the kernel's RDMA core.
    _links: ib::Links,
    #[pin]
    device: kernel::miscdevice::MiscDeviceRegistration<device::Context>,
    /// Last to go: waits for pages a region's last access left to unpin.
    _later_unpins: pinned::LaterUnpins,
}

impl kernel::InPlaceModule for IwarpModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            _doorbell: {
                startup()?;
                socket::Doorbell::register()?
            },
            _links: ib::Links::register()?,
            device <- device::register(),
            _later_unpins: pinned::LaterUnpins::new(),
        })
    }
}

/// What connections of the RDMA core ask of MPA on links made from now on (each link has its
/// own after: `ib::device`).
pub(crate) fn iw_mpa() -> ib::MpaOptions {
    ib::MpaOptions {
        markers: *module_parameters::iw_markers.value() != 0,
        crc: *module_parameters::iw_crc.value() != 0,
        rev1: *module_parameters::iw_mpa_rev.value() == 1,
        p2p: *module_parameters::iw_p2p.value() != 0,
    }
}

/// Up to how many waiting octets QPs receive in the socket's data-ready callback, without a
/// context switch (what latency needs); beyond it, in the work item, which sees more at once and
/// lets TCP coalesce what arrives meanwhile (what bandwidth needs). 0: always the work item.
pub(crate) fn rx_callback_max() -> u32 {
    *module_parameters::rx_callback_max.value()
}

/// How long the receive work holds the socket lock after each read (tests only; 0: not at all).
pub(crate) fn receive_hold() -> kernel::time::Delta {
    kernel::time::Delta::from_micros(i64::from(*module_parameters::inject_receive_hold_us.value()))
}

/// What must succeed before the device appears.
fn startup() -> Result {
    if *module_parameters::inject_init_failure.value() != 0 {
        pr_err!("init failure injected (inject_init_failure=1)\n");
        return Err(EINVAL);
    }
    selftest::protocol_core_loopback()?;
    if *module_parameters::tcp_probe.value() != 0 {
        let probe = shim::tcp_probe()?;
        pr_info!("tcp_probe: kernel TCP socket bound to 127.0.0.1:{} (write_seq {}), released\n", probe.port, probe.write_seq);
    }
    pr_info!("loaded, /dev/iwarp ready (ABI {})\n", abi::ABI_VERSION);
    Ok(())
}
