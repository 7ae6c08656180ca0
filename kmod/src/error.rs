// SPDX-License-Identifier: GPL-2.0

//! The module's errors: errnos the kernel crate does not name, the C shim's constructor
//! convention, and [`QpError`], why a queue pair's stream must end.

use crate::cq::Overrun;
use crate::proto::terminate::{Cause, Terminate};
use core::ptr::NonNull;
use kernel::error::from_err_ptr;
use kernel::prelude::*;

fn errno(e: u32) -> Error {
    Error::from_errno(-(e as i32))
}

/// EPROTO: the peer broke the MPA exchange.
pub(crate) fn eproto() -> Error {
    errno(kernel::bindings::EPROTO)
}

/// ENOTCONN: the QP is not (or no longer) connected.
pub(crate) fn enotconn() -> Error {
    errno(kernel::bindings::ENOTCONN)
}

/// EOPNOTSUPP: the connection did not agree to what the request needs (RFC 7306).
pub(crate) fn eopnotsupp() -> Error {
    errno(kernel::bindings::EOPNOTSUPP)
}

/// ECONNREFUSED: the peer refused the connection (a TCP reset or an MPA reject frame).
pub(crate) fn econnrefused() -> Error {
    errno(kernel::bindings::ECONNREFUSED)
}

/// EAFNOSUPPORT: an address of a family other than IPv4 and IPv6.
pub(crate) fn eafnosupport() -> Error {
    errno(kernel::bindings::EAFNOSUPPORT)
}

/// ECONNABORTED: the connection's owner gave it up before it was made (its QP destroyed).
pub(crate) fn econnaborted() -> Error {
    errno(kernel::bindings::ECONNABORTED)
}

/// What a shim constructor returned: the object, or the errno its ERR_PTR carries.
pub(crate) fn made<T>(raw: *mut T) -> Result<NonNull<T>> {
    NonNull::new(from_err_ptr(raw)?).ok_or(EINVAL)
}

/// Why a QP's stream must end, in the spirit of binder's `BinderError`: each variant knows the
/// Terminate it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpError {
    /// A completion queue was full (an overrun, RFC 5040's local catastrophic error).
    CqOverrun,
    /// Sending failed part way: part of a message may be on the wire, the stream cannot go on.
    StreamLost,
    /// This host could not frame a message (no memory, or one its transmitter refuses): the
    /// stream is whole up to the last FPDU sent, and RDMAP's local catastrophic error says the
    /// fault is ours.
    Local,
}

impl QpError {
    /// The Terminate that reports it to the peer.
    pub(crate) fn terminate(self) -> Terminate {
        Terminate::new(match self {
            QpError::CqOverrun | QpError::Local => Cause::RdmapCatastrophic,
            QpError::StreamLost => Cause::MpaStreamLost,
        })
    }
}

impl From<Overrun> for QpError {
    fn from(_: Overrun) -> QpError {
        QpError::CqOverrun
    }
}

impl From<Overrun> for Terminate {
    fn from(e: Overrun) -> Terminate {
        QpError::from(e).terminate()
    }
}

/// TCP refused what was handed to it: the socket's error ends the stream.
impl From<Error> for QpError {
    fn from(_: Error) -> QpError {
        QpError::StreamLost
    }
}

/// The first fatal error a receive pass met: later ones are not recorded (the Terminate reports
/// the first, and nothing after it is placed).
#[derive(Default)]
pub(crate) struct FirstError(Option<Terminate>);

impl FirstError {
    /// Records `t` unless an error is recorded already.
    pub(crate) fn set(&mut self, t: Terminate) {
        if self.0.is_none() {
            self.0 = Some(t);
        }
    }

    /// Whether no error is recorded.
    pub(crate) fn is_clear(&self) -> bool {
        self.0.is_none()
    }

    /// The recorded error, leaving none.
    pub(crate) fn take(&mut self) -> Option<Terminate> {
        self.0.take()
    }
}
