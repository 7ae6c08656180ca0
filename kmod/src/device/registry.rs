// SPDX-License-Identifier: GPL-2.0

//! Every QP of every context, for LIST_QPS (what the `iwarp` tool shows, as `rdma statistic`
//! does for RNICs). A QP joins when it is created and leaves when its context lets it go; the
//! list lock is a leaf: it is held only to add, remove or copy references, never while a QP or
//! a socket is locked, so it fits anywhere in the lock order.

use super::translate;
use crate::abi::QpInfo;
use crate::qp::QueuePair;
use crate::socket::Endpoint;
use kernel::prelude::*;
use kernel::sync::Arc;

/// A listed QP and the process that made it.
struct Listed {
    pid: u32,
    qp: Arc<QueuePair>,
}

kernel::sync::global_lock! {
    // SAFETY: `init` is called in module init, before the device exists.
    unsafe(uninit) static QPS: Mutex<KVVec<Listed>> = KVVec::new();
}

/// Readies the list; call once, at module load.
pub(crate) fn init() {
    // SAFETY: module init calls this exactly once, before any context can create a QP.
    unsafe { QPS.init() };
}

/// A QP's place on the list, taken off when this goes.
pub(super) struct Registration(Arc<QueuePair>);

impl Registration {
    /// Lists `qp` as made by the current process.
    pub(super) fn new(qp: &Arc<QueuePair>) -> Result<Registration> {
        let pid = kernel::current!().tgid_nr_ns(None) as u32;
        QPS.lock().push(Listed { pid, qp: qp.clone() }, GFP_KERNEL_ACCOUNT)?;
        Ok(Registration(qp.clone()))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Dropping the list's reference cannot end the QP under the lock: this registration
        // holds another.
        let mut qps = QPS.lock();
        qps.retain(|l| !Arc::ptr_eq(&l.qp, &self.0));
        if qps.is_empty() {
            // A static is never dropped: give its buffer back while the module can (a module
            // unloads only with no QP left).
            *qps = KVVec::new();
        }
    }
}

/// The first `max` listed QPs, and how many are listed in all. Their state is read after the
/// list is released (querying locks the QP, and the socket for its addresses). The lists may be
/// megabytes (the caller picks `max`): they come from kvmalloc, which falls back to vmalloc
/// quietly where kmalloc would warn.
pub(super) fn snapshot(max: usize) -> Result<(KVVec<QpInfo>, usize)> {
    let (listed, count) = {
        let qps = QPS.lock();
        let mut out = KVVec::with_capacity(qps.len().min(max), GFP_KERNEL_ACCOUNT)?;
        for l in qps.iter().take(max) {
            out.push((l.pid, l.qp.clone()), GFP_KERNEL_ACCOUNT)?;
        }
        (out, qps.len())
    };
    let mut infos = KVVec::with_capacity(listed.len(), GFP_KERNEL_ACCOUNT)?;
    for (pid, qp) in listed.iter() {
        let query = translate::query_qp(qp.handle(), &qp.query());
        let (local, remote) = qp.socket().map_or((Endpoint::default(), Endpoint::default()), |s| s.endpoints());
        let (local, remote) = (translate::endpoint(&local), translate::endpoint(&remote));
        infos.push(QpInfo { pid: *pid, reserved: 0, local, remote, query }, GFP_KERNEL_ACCOUNT)?;
    }
    Ok((infos, count))
}
