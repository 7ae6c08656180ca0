//! libiwarp: RDMA verbs over `iwarp.ko`.
//!
//! Today: open the device ([`Device`]), query it, and register memory ([`MemoryRegion`]); queue
//! pairs and completion queues arrive with the rest of the data path. The ABI it shares with
//! the module is [`abi`].

pub mod abi;
mod device;
mod mr;
mod sys;

pub use device::{Device, DEVICE_PATH};
pub use mr::{Access, MemoryRegion};
