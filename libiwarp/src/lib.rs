//! libiwarp: RDMA verbs over `iwarp.ko`.
//!
//! Today it opens the device and queries it; the verbs (PD, MR, CQ, QP) arrive with the data
//! path. The ABI it shares with the module is [`abi`].

pub mod abi;
mod device;
mod sys;

pub use device::{Device, DEVICE_PATH};

