//! libiwarp: RDMA verbs over `iwarp.ko`.
//!
//! Open the device ([`Device`]), allocate a protection domain ([`ProtectionDomain`]), register
//! memory in it ([`MemoryRegion`]), make completion queues
//! ([`CompletionQueue`], polled from shared memory without system calls) and turn a connected
//! TCP stream into a [`QueuePair`] (MPA exchange in the kernel), then post receives and
//! Sends, RDMA Writes and RDMA Reads. The ABI it shares with the module is [`abi`].

pub mod abi;
mod cq;
mod device;
mod endpoint;
mod events;
mod listen;
mod listing;
mod mr;
mod pd;
mod qp;
mod ring;
pub mod sockets_wire;
mod sys;

pub use abi::Sge;
pub use cq::{CompletionQueue, WaitMode, WcOpcode, WcStatus, WorkCompletion};
pub use device::{Device, DEVICE_PATH};
pub use events::{AsyncEvents, Event, QpEvent};
pub use listen::{ConnectRequest, Listener};
pub use listing::QpListing;
pub use mr::{Access, MemoryRegion, SourceRegion};
pub use pd::ProtectionDomain;
pub use qp::{ConnectOptions, Negotiated, Placement, QpInit, QpState, QueuePair, RecvWr, Remote, Role, RtrTypes, SendOp, SendWr};
