//! Asynchronous events: the module reports each QP that a Terminate or a broken connection
//! ended (not those the program disconnects or destroys), so a program learns which QP and why
//! without asking each one. The eventfd is readable while events wait, for epoll.

use crate::abi::{event_flags, event_kind, AsyncEvent, SetEventFd, IOCTL_GET_ASYNC_EVENT, IOCTL_SET_EVENT_FD};
use crate::device::Device;
use crate::sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// Why a QP ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpEvent {
    /// A Terminate (layer, type, code as in RFC 5040 section 4.8); `sent`: we sent it.
    Terminated { terminate: (u8, u8, u8), sent: bool },
    /// The connection closed or broke without a Terminate.
    ConnectionLost,
}

/// One asynchronous event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The QP's handle ([`crate::QueuePair::handle`]).
    pub qp: u32,
    pub what: QpEvent,
    /// Events before this one were dropped (more than the module keeps were waiting).
    pub lost_before: bool,
}

/// The asynchronous events of a device context ([`Device::async_events`]); one at a time.
pub struct AsyncEvents<'a> {
    dev: &'a Device,
    event: OwnedFd,
}

impl<'a> AsyncEvents<'a> {
    pub(crate) fn new(dev: &'a Device) -> io::Result<Self> {
        let event = sys::eventfd()?;
        sys::ioctl(dev.file().as_fd(), IOCTL_SET_EVENT_FD, &mut SetEventFd { eventfd: event.as_raw_fd(), reserved: 0 })?;
        Ok(AsyncEvents { dev, event })
    }

    /// The eventfd the module signals for every new event.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }

    /// The oldest event not taken yet, without waiting.
    pub fn next(&self) -> io::Result<Option<Event>> {
        let mut ev = AsyncEvent::default();
        match sys::ioctl(self.dev.file().as_fd(), IOCTL_GET_ASYNC_EVENT, &mut ev) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(None),
            Err(e) => return Err(e),
        }
        let t = ev.terminate;
        let what = match ev.kind {
            event_kind::QP_TERMINATED => QpEvent::Terminated { terminate: ((t >> 16) as u8, (t >> 8) as u8, t as u8), sent: ev.flags & event_flags::SENT != 0 },
            _ => QpEvent::ConnectionLost,
        };
        Ok(Some(Event { qp: ev.qp, what, lost_before: ev.flags & event_flags::LOST != 0 }))
    }

    /// Waits up to `timeout` for the next event.
    pub fn wait(&self, timeout: Duration) -> io::Result<Option<Event>> {
        let start = Instant::now();
        loop {
            if let Some(ev) = self.next()? {
                return Ok(Some(ev));
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            sys::sleep_on(self.event.as_fd(), left)?;
        }
    }
}

impl Drop for AsyncEvents<'_> {
    fn drop(&mut self) {
        let _ = sys::ioctl(self.dev.file().as_fd(), IOCTL_SET_EVENT_FD, &mut SetEventFd { eventfd: -1, reserved: 0 });
    }
}
