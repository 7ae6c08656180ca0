//! The iWARP wire protocol as a sans-IO core: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and
//! RDMAP (RFC 5040) with its extensions (RFC 7306: Atomic Operations, Immediate Data).
//!
//! No I/O, no allocation, no `unsafe`: the kernel module compiles these same files in (it cannot
//! link external crates), a user-level engine can drive them over a socket, and the host tests
//! prove them exhaustively. iwarp.ko includes this file as its module `proto` and names these
//! modules at its own root too, so `crate::name` resolves in both builds.
// iwarp.ko (built with `--cfg MODULE`) is no_std already; there this file is not a crate root.
#![cfg_attr(not(MODULE), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
// The kernel builds these files too, with its minimum Rust (1.85), which has no is_multiple_of.
#![allow(clippy::manual_is_multiple_of)]

pub mod atomic;
pub mod crc;
pub mod ddp;
pub mod markers;
pub mod mpa;
pub mod rdmap;
pub mod rx;
pub mod stream;
pub mod terminate;
pub mod tx;
