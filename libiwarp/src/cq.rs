//! Completion queues: the module writes completions into a ring this process maps; polling it
//! is a few loads, no system call. Blocking waits arm the CQ and sleep in poll(2) on an eventfd
//! the module signals (the same descriptor works with epoll).

use crate::abi::{cq_ring, wc_flags, wc_opcode, wc_status, CqOp, Cqe, CreateCq, CQE_SIZE, IOCTL_ARM_CQ, IOCTL_CREATE_CQ, IOCTL_DESTROY_CQ};
use crate::device::Device;
use crate::ring::Mapping;
use crate::sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A Send of ours.
    Send,
    /// An RDMA Write of ours.
    RdmaWrite,
    /// An RDMA Read of ours (the data is in place).
    RdmaRead,
    /// A receive: the peer's Send is in the buffer, or its Immediate Data in the completion.
    Recv,
    /// A Fetch-and-Add of ours (the value before is in place).
    FetchAdd,
    /// A Compare-and-Swap of ours (the value before is in place).
    CompareSwap,
    /// A Local Invalidate of ours.
    LocalInvalidate,
    /// A Fast Register of ours.
    FastRegister,
}

/// How it finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// Done.
    Success,
    /// The message was larger than the receive buffer.
    LocalLength,
    /// A local buffer was outside its region or lacked a right.
    LocalProtection,
    /// The QP left the connected state first (the request was flushed).
    Flushed,
    /// The peer refused access to its region.
    RemoteAccess,
    /// The peer reported an operation error.
    RemoteOperation,
    /// A protocol error ended the connection.
    Fatal,
    /// A status this library does not know (a newer module).
    Unknown(u32),
}

/// One completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// How it finished.
    pub status: WcStatus,
    /// What it was.
    pub opcode: WcOpcode,
    /// Receives and Reads: octets placed.
    pub byte_len: u32,
    /// The QP's handle.
    pub qp: u32,
    /// A receive of a Send with Solicited Event.
    pub solicited: bool,
    /// A receive of a Send with Invalidate: the local STag it invalidated.
    pub invalidated: Option<u32>,
    /// A receive completed by Immediate Data (RFC 7306): its 8 octets.
    pub imm: Option<u64>,
}

impl WorkCompletion {
    /// A placeholder to fill arrays given to [`CompletionQueue::poll`].
    pub const EMPTY: WorkCompletion =
        WorkCompletion { wr_id: 0, status: WcStatus::Success, opcode: WcOpcode::Send, byte_len: 0, qp: 0, solicited: false, invalidated: None, imm: None };

    fn from_raw(c: &Cqe) -> WorkCompletion {
        let status = match c.status {
            wc_status::SUCCESS => WcStatus::Success,
            wc_status::LOC_LEN_ERR => WcStatus::LocalLength,
            wc_status::LOC_PROT_ERR => WcStatus::LocalProtection,
            wc_status::WR_FLUSH_ERR => WcStatus::Flushed,
            wc_status::REM_ACCESS_ERR => WcStatus::RemoteAccess,
            wc_status::REM_OP_ERR => WcStatus::RemoteOperation,
            wc_status::FATAL_ERR => WcStatus::Fatal,
            s => WcStatus::Unknown(s),
        };
        let opcode = match c.opcode {
            wc_opcode::SEND => WcOpcode::Send,
            wc_opcode::RDMA_WRITE => WcOpcode::RdmaWrite,
            wc_opcode::RDMA_READ => WcOpcode::RdmaRead,
            wc_opcode::FETCH_ADD => WcOpcode::FetchAdd,
            wc_opcode::COMPARE_SWAP => WcOpcode::CompareSwap,
            wc_opcode::LOCAL_INVALIDATE => WcOpcode::LocalInvalidate,
            wc_opcode::FAST_REGISTER => WcOpcode::FastRegister,
            _ => WcOpcode::Recv,
        };
        WorkCompletion {
            wr_id: c.wr_id,
            status,
            opcode,
            byte_len: c.byte_len,
            qp: c.qp,
            solicited: c.flags & wc_flags::SOLICITED != 0,
            invalidated: (c.flags & wc_flags::WITH_INVALIDATE != 0).then_some(c.invalidated),
            imm: (c.flags & wc_flags::WITH_IMM != 0).then_some(c.imm_data),
        }
    }
}

/// How [`CompletionQueue::wait`] waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Arm and sleep in poll(2) at once.
    Block,
    /// Poll the ring this long first (CLAN spins about 15 µs), then block.
    SpinThenBlock(Duration),
    /// Poll the ring until a completion is there or the timeout passes, never sleeping (busy
    /// polling: the lowest latency, for a CPU kept busy; no system call either way).
    Poll,
}

/// A completion queue. Not `Sync`: one thread polls it at a time. Its consumer index lives in
/// the ring, so processes that share it after a fork may take turns (under a lock of theirs).
pub struct CompletionQueue<'d> {
    dev: &'d Device,
    handle: u32,
    ring: Mapping,
    depth: u32,
    event: OwnedFd,
    /// Polled by one thread at a time.
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl<'d> CompletionQueue<'d> {
    pub(crate) fn new(dev: &'d Device, depth: u32) -> io::Result<CompletionQueue<'d>> {
        let event = sys::eventfd()?;
        let mut req = CreateCq { depth, eventfd: event.as_raw_fd(), ..CreateCq::default() };
        sys::ioctl(dev.file().as_fd(), IOCTL_CREATE_CQ, &mut req)?;
        let handle = req.cq;
        let ring = Mapping::new(dev.file().as_fd(), req.mmap_offset, req.mmap_len).inspect_err(|_| {
            let _ = sys::ioctl(dev.file().as_fd(), IOCTL_DESTROY_CQ, &mut CqOp { cq: handle, solicited_only: 0 });
        })?;
        Ok(CompletionQueue { dev, handle, ring, depth: req.depth, event, _not_sync: std::marker::PhantomData })
    }

    /// The module's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Entries the ring holds.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Takes up to `out.len()` completions; returns how many. No system call.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let producer = self.ring.word(cq_ring::PRODUCER).load(Ordering::Acquire);
        // Only we write it (the module reads it to know which slots are free again).
        let mut consumer = self.ring.word(cq_ring::CONSUMER).load(Ordering::Relaxed);
        let mut n = 0;
        while n < out.len() && consumer != producer {
            let slot = (consumer & (self.depth - 1)) as usize;
            // The module wrote the slot before publishing `producer` (acquire above) and will not
            // touch it again until we publish a consumer index past it.
            let raw: Cqe = self.ring.read(cq_ring::ENTRIES + slot * CQE_SIZE);
            out[n] = WorkCompletion::from_raw(&raw);
            n += 1;
            consumer = consumer.wrapping_add(1);
        }
        if n > 0 {
            self.ring.word(cq_ring::CONSUMER).store(consumer, Ordering::Release);
        }
        n
    }

    /// Asks for one wake-up through [`CompletionQueue::event_fd`] at the next completion (only
    /// solicited receives and errors if `solicited_only`).
    pub fn arm(&self, solicited_only: bool) -> io::Result<()> {
        sys::ioctl(self.dev.file().as_fd(), IOCTL_ARM_CQ, &mut CqOp { cq: self.handle, solicited_only: solicited_only as u32 })
    }

    /// The eventfd the module signals after [`CompletionQueue::arm`]; readable when woken.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }

    /// Waits until at least one completion is there (or `timeout` passes: returns 0) and takes
    /// up to `out.len()`.
    pub fn wait(&self, out: &mut [WorkCompletion], mode: WaitMode, timeout: Duration) -> io::Result<usize> {
        let start = Instant::now();
        if mode == WaitMode::Poll {
            loop {
                let n = self.poll(out);
                if n > 0 || start.elapsed() >= timeout {
                    return Ok(n);
                }
                std::hint::spin_loop();
            }
        }
        if let WaitMode::SpinThenBlock(spin) = mode {
            while start.elapsed() < spin {
                let n = self.poll(out);
                if n > 0 {
                    return Ok(n);
                }
                std::hint::spin_loop();
            }
        }
        loop {
            let n = self.poll(out);
            if n > 0 {
                return Ok(n);
            }
            self.arm(false)?;
            // A completion may have landed between the poll and the arm.
            let n = self.poll(out);
            if n > 0 {
                return Ok(n);
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(0);
            }
            sys::sleep_on(self.event.as_fd(), left)?;
        }
    }
}

impl CompletionQueue<'_> {
    /// Waits for one completion (spinning 15 µs first, then blocking); None after `timeout`.
    pub fn wait_one(&self, timeout: Duration) -> io::Result<Option<WorkCompletion>> {
        let mut wc = [WorkCompletion::EMPTY];
        let n = self.wait(&mut wc, WaitMode::SpinThenBlock(Duration::from_micros(15)), timeout)?;
        Ok((n == 1).then_some(wc[0]))
    }
}

impl Drop for CompletionQueue<'_> {
    fn drop(&mut self) {
        // QPs borrow the CQ, so none uses it any more; closing the device frees it anyway.
        let _ = sys::ioctl(self.dev.file().as_fd(), IOCTL_DESTROY_CQ, &mut CqOp { cq: self.handle, solicited_only: 0 });
    }
}
