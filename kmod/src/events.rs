// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events of a context: a QP that a Terminate (ours or the peer's) or a broken
//! connection ended is reported here, besides its flushed completions, so the application
//! learns which QP and why without asking each one (GET_ASYNC_EVENT; an eventfd it gives wakes
//! poll(2)/epoll). A QP its owner disconnects or destroys reports nothing.

use crate::eventfd::EventFd;
use crate::qp::OnEnded;
use crate::sync::SpinLockBh;
use crate::verbs::{QpEvent, MAX_ASYNC_EVENTS};
use kernel::prelude::*;

/// The events not fetched yet, oldest first.
pub(crate) struct AsyncEvents {
    queue: KVec<QpEvent>,
    /// Events were dropped because the queue was full; told with the next one fetched.
    lost: bool,
    notify: Option<EventFd>,
}

impl AsyncEvents {
    /// Room for every event kept is allocated here: reporting (in softirq context too) never
    /// allocates.
    pub(crate) fn new() -> Result<AsyncEvents> {
        Ok(AsyncEvents { queue: KVec::with_capacity(MAX_ASYNC_EVENTS, GFP_KERNEL_ACCOUNT)?, lost: false, notify: None })
    }

    /// Signals `notify` (an eventfd) on every new event from now on, or nothing; returns the one
    /// it replaces (dropped by the caller, outside the lock).
    pub(crate) fn set_notify(&mut self, notify: Option<EventFd>) -> Option<EventFd> {
        core::mem::replace(&mut self.notify, notify)
    }

    /// Reports `ev` (dropped, and counted as lost, when the queue is full).
    pub(crate) fn push(&mut self, ev: QpEvent) {
        if self.queue.push_within_capacity(ev).is_err() {
            self.lost = true;
        }
        if let Some(n) = &self.notify {
            n.signal();
        }
    }

    /// The oldest event not fetched yet, and whether events before it were dropped, if any.
    pub(crate) fn pop(&mut self) -> Option<(QpEvent, bool)> {
        if self.queue.is_empty() {
            return None;
        }
        let ev = self.queue.remove(0).ok()?;
        Some((ev, core::mem::take(&mut self.lost)))
    }

    /// Puts back, first again, what [`AsyncEvents::pop`] gave and could not be handed over (a
    /// bad address): the caller's error loses no event (unless the queue filled meanwhile).
    pub(crate) fn put_back(&mut self, (ev, lost): (QpEvent, bool)) {
        self.lost |= lost;
        if self.queue.insert_within_capacity(0, ev).is_err() {
            self.lost = true;
        }
    }
}

/// The context's QPs report how they ended here.
impl OnEnded for SpinLockBh<AsyncEvents> {
    fn ended(&self, event: Option<QpEvent>) {
        if let Some(ev) = event {
            self.lock().push(ev);
        }
    }
}
