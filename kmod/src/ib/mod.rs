// SPDX-License-Identifier: GPL-2.0

//! The kernel RDMA core's front door: iwarp.ko as devices the RDMA core knows, one per
//! `rdma link add NAME type iwarp netdev DEV`, listed by `rdma dev`, `rdma link` and
//! `/sys/class/infiniband` as RNICs with one iWARP port that follows its netdev.
//!
//! The devices answer the RDMA core's queries (device limits from the engine, port state, MTU
//! and GID from the netdev), the kernel verbs (protection domains, the DMA region, CQs, QPs,
//! posting, fast registration of kernel pages), translated into the engine as `device/`
//! translates `/dev/iwarp`'s ABI, and the iWARP connection manager's calls (`cm.rs`). They are
//! kernel verbs providers: rdma_cm and kernel services (NVMe over Fabrics) bind to them. User
//! processes reach them through uverbs with rdma-core's siw provider, in siw's ABI
//! (`siw_rings.rs`).

mod cm;
mod cq;
mod device;
mod events;
mod link;
mod qp;
mod siw_rings;
mod verbs;

pub(crate) use device::MpaOptions;
pub(crate) use link::Links;
