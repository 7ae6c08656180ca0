// SPDX-License-Identifier: GPL-2.0

//! The C shim's declarations (`shim/shim.h`), made by bindgen when the module is built, so the
//! two sides cannot disagree. Only the safe wrappers use them: `shim`, `socket`, `frags`,
//! `pinned` and `ring`.

#![allow(
    clippy::all,
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unreachable_pub,
    unsafe_op_in_unsafe_fn
)]

// The kernel structures the header only names, as the kernel crate's bindings define them.
use kernel::bindings::{bio_vec, miscdevice, net_device, page, sk_buff, socket, spinlock, vm_area_struct, workqueue_struct};

include!(env!("IWARP_SHIM_BINDINGS"));
