// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events of a context: a QP that a Terminate (ours or the peer's) or a broken
//! connection ended is reported here, besides its flushed completions, so the application
//! learns which QP and why without asking each one (GET_ASYNC_EVENT; an eventfd it gives wakes
//! poll(2)/epoll). A QP its owner disconnects or destroys reports nothing.

use crate::abi::{AsyncEvent, MAX_ASYNC_EVENTS};
use crate::eventfd::EventFd;
use kernel::prelude::*;

/// The events not fetched yet, oldest first.
pub(crate) struct AsyncEvents {
    queue: KVec<AsyncEvent>,
    /// Events were dropped because the queue was full; told with the next one fetched.
    lost: bool,
    notify: Option<EventFd>,
}

impl AsyncEvents {
    pub(crate) fn new() -> AsyncEvents {
        AsyncEvents { queue: KVec::new(), lost: false, notify: None }
    }

    /// Signals `fd` (an eventfd) on every new event from now on; a negative `fd` stops it.
    pub(crate) fn set_eventfd(&mut self, fd: i32) -> Result {
        self.notify = if fd < 0 { None } else { Some(EventFd::get(fd)?) };
        Ok(())
    }

    /// Reports `ev` (dropped, and counted as lost, when the queue is full or memory is short).
    pub(crate) fn push(&mut self, ev: AsyncEvent) {
        if self.queue.len() >= MAX_ASYNC_EVENTS || self.queue.push(ev, GFP_KERNEL).is_err() {
            self.lost = true;
        }
        if let Some(n) = &self.notify {
            n.signal();
        }
    }

    /// The oldest event not fetched yet (with `abi::event_flags::LOST` if some were dropped
    /// before it), if any.
    pub(crate) fn pop(&mut self) -> Option<AsyncEvent> {
        if self.queue.is_empty() {
            return None;
        }
        let mut ev = self.queue.remove(0).ok()?;
        if core::mem::take(&mut self.lost) {
            ev.flags |= crate::abi::event_flags::LOST;
        }
        Some(ev)
    }
}
