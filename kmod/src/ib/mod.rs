// SPDX-License-Identifier: GPL-2.0

//! The kernel RDMA core's front door: iwarp.ko as devices the RDMA core knows, one per
//! `rdma link add NAME type iwarp netdev DEV`, listed by `rdma dev`, `rdma link` and
//! `/sys/class/infiniband` as RNICs with one iWARP port that follows its netdev.
//!
//! Today the devices answer the RDMA core's queries (device limits from the engine, port
//! state, MTU and GID from the netdev) and nothing else: without the verbs (PD, CQ, QP, MR)
//! and the connection manager's calls, the core marks them as no kernel verbs provider, so no
//! kernel service or rdma_cm binds to them yet. The verbs come next, as translations into the
//! engine (`verbs.rs`), as `device/` translates `/dev/iwarp`'s ABI.

mod link;

pub(crate) use link::Links;
