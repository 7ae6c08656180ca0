//! libiwarp: RDMA verbs over `iwarp.ko`.
//!
//! Today: open the device ([`Device`]), query it, register memory ([`MemoryRegion`]) and turn a
//! connected TCP stream into a [`QueuePair`] (MPA exchange in the kernel); work requests and
//! completion queues arrive with the rest of the data path. The ABI it shares with
//! the module is [`abi`].

pub mod abi;
mod device;
mod mr;
mod qp;
mod sys;

pub use device::{Device, DEVICE_PATH};
pub use mr::{Access, MemoryRegion};
pub use qp::{ConnectOptions, Negotiated, QueuePair, Role, SendOp};
