// SPDX-License-Identifier: GPL-2.0

//! The verbs the RDMA core calls (`shim/ib_shim.c` trampolines them here): each takes what
//! the shim passes, finds the object Rust gave the core for it, and answers an errno. The
//! objects cross as foreign pointers: the device's [`IbDevice`] and each CQ's [`IbCq`] as
//! `Arc`s, each QP's [`KernelQp`] as a `KBox`, freed in the matching destroy.

use super::cm::{self, CmListener};
use super::cq::IbCq;
use super::device::IbDevice;
use super::qp::KernelQp;
use crate::ffi;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::types::ForeignOwnable;

pub(super) static VERBS: ffi::iwarp_ib_verbs = ffi::iwarp_ib_verbs {
    alloc_pd: Some(alloc_pd),
    dealloc_pd: Some(dealloc_pd),
    dma_mr: Some(dma_mr),
    user_mr: Some(user_mr),
    dereg_mr: Some(dereg_mr),
    alloc_mr: Some(alloc_mr),
    map_mr: Some(map_mr),
    create_cq: Some(create_cq),
    destroy_cq: Some(destroy_cq),
    poll_cq: Some(poll_cq),
    req_notify_cq: Some(req_notify_cq),
    create_qp: Some(create_qp),
    modify_qp: Some(modify_qp),
    query_qp: Some(query_qp),
    qp_counters: Some(qp_counters),
    end_qp: Some(end_qp),
    destroy_qp: Some(destroy_qp),
    post_send: Some(post_send),
    doorbell: Some(doorbell),
    post_recv: Some(post_recv),
    hand_over: Some(hand_over),
    dev_free: Some(dev_free),
    ring_put: Some(ring_put),
    dev_mpa: Some(dev_mpa),
    dev_set_mpa: Some(dev_set_mpa),
    iw_get_qp: Some(iw_get_qp),
    iw_connect: Some(iw_connect),
    iw_accept: Some(iw_accept),
    iw_reject: Some(iw_reject),
    iw_listen: Some(iw_listen),
    iw_unlisten: Some(iw_unlisten),
};

/// 0 or the negative errno, as the shim returns them.
fn errno(r: Result) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// `dev` came from [`Arc::into_foreign`] of an [`IbDevice`] not freed yet.
unsafe fn device<'a>(dev: *mut c_void) -> ArcBorrow<'a, IbDevice> {
    // SAFETY: the function's contract.
    unsafe { <Arc<IbDevice> as ForeignOwnable>::borrow(dev) }
}

/// # Safety
///
/// `cq` came from [`Arc::into_foreign`] of an [`IbCq`] not destroyed yet.
unsafe fn cq<'a>(cq: *mut c_void) -> ArcBorrow<'a, IbCq> {
    // SAFETY: the function's contract.
    unsafe { <Arc<IbCq> as ForeignOwnable>::borrow(cq) }
}

/// # Safety
///
/// `qp` came from [`KBox::into_foreign`] of a [`KernelQp`] not destroyed yet.
unsafe fn qp<'a>(qp: *mut c_void) -> &'a KernelQp {
    // SAFETY: the function's contract.
    unsafe { <KBox<KernelQp> as ForeignOwnable>::borrow(qp) }
}

// Every function below is called by the shim with the pointers Rust gave it for the RDMA
// core's objects, which the core keeps alive for the call (it destroys an object only after
// the calls on it and on the objects using it), and with its out-pointers valid.

/// # Safety
///
/// See above.
unsafe extern "C" fn alloc_pd(dev: *mut c_void, pd: *mut u32) -> c_int {
    // SAFETY: see above.
    match unsafe { device(dev) }.alloc_pd() {
        Ok(h) => {
            // SAFETY: see above.
            unsafe { *pd = h };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// See above.
unsafe extern "C" fn dealloc_pd(dev: *mut c_void, pd: u32) -> c_int {
    // SAFETY: see above.
    errno(unsafe { device(dev) }.dealloc_pd(pd))
}

/// # Safety
///
/// See above.
unsafe extern "C" fn dma_mr(dev: *mut c_void, pd: u32, access: c_int, stag: *mut u32) -> c_int {
    // SAFETY: see above.
    match unsafe { device(dev) }.dma_mr(pd, access) {
        Ok(s) => {
            // SAFETY: see above.
            unsafe { *stag = s };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// See above.
unsafe extern "C" fn user_mr(dev: *mut c_void, pd: u32, start: u64, len: u64, iova: u64, access: c_int, stag: *mut u32) -> c_int {
    // SAFETY: see above.
    match unsafe { device(dev) }.user_mr(pd, start, len, iova, access) {
        Ok(s) => {
            // SAFETY: see above.
            unsafe { *stag = s };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// See above.
unsafe extern "C" fn dereg_mr(dev: *mut c_void, stag: u32) -> c_int {
    // SAFETY: see above.
    errno(unsafe { device(dev) }.dereg_mr(stag))
}

/// # Safety
///
/// See above.
unsafe extern "C" fn alloc_mr(dev: *mut c_void, pd: u32, max_pages: u32, stag: *mut u32) -> c_int {
    // SAFETY: see above.
    match unsafe { device(dev) }.alloc_mr(pd, max_pages) {
        Ok(s) => {
            // SAFETY: see above.
            unsafe { *stag = s };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// See above; `pages` holds `n` entries, valid for the call.
unsafe extern "C" fn map_mr(dev: *mut c_void, stag: u32, iova: u64, length: u64, page_size: u32, pages: *const u64, n: u32) -> c_int {
    if pages.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: the function's contract.
    let pages = unsafe { core::slice::from_raw_parts(pages, n as usize) };
    // SAFETY: see above.
    errno(unsafe { device(dev) }.map_mr(stag, iova, length, u64::from(page_size), pages))
}

/// # Safety
///
/// See above.
unsafe extern "C" fn create_cq(_dev: *mut c_void, ibcq: *mut ffi::ib_cq, entries: *mut u32, ring: *mut ffi::iwarp_mapped_ring, out: *mut *mut c_void) -> c_int {
    // SAFETY: see above.
    let n = unsafe { *entries };
    let made = if ring.is_null() {
        IbCq::new(ibcq, n)
    } else {
        IbCq::new_mapped(ibcq, n).map(|(cq, mapping)| {
            // SAFETY: see above: a user process's CQ, whose ring the shim maps.
            unsafe { *ring = mapping.into_ffi() };
            cq
        })
    };
    match made {
        Ok(cq) => {
            // SAFETY: see above; the CQ's size is what was asked for.
            unsafe { *out = cq.into_foreign() };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// `ring` is the `rust` of an `iwarp_mapped_ring` Rust gave, not put yet.
unsafe extern "C" fn ring_put(ring: *mut c_void) {
    // SAFETY: the function's contract: the reference `siw_rings::mapped` made.
    drop(unsafe { <Arc<crate::ring::SharedRing> as ForeignOwnable>::from_foreign(ring) });
}

/// # Safety
///
/// See above; the CQ is not used after.
unsafe extern "C" fn destroy_cq(cq: *mut c_void) {
    // SAFETY: see above: this takes back the CQ's reference (the QPs' are gone).
    let cq = unsafe { <Arc<IbCq> as ForeignOwnable>::from_foreign(cq) };
    cq.destroy();
}

/// # Safety
///
/// See above; `wc` holds `n` entries.
unsafe extern "C" fn poll_cq(cq_ptr: *mut c_void, wc: *mut ffi::iwarp_ib_wc, n: c_int) -> c_int {
    let Ok(n) = usize::try_from(n) else { return EINVAL.to_errno() };
    if n == 0 || wc.is_null() {
        return 0;
    }
    // SAFETY: see above: the shim's array of `n` entries, ours for the call.
    let out = unsafe { core::slice::from_raw_parts_mut(wc, n) };
    // SAFETY: see above.
    unsafe { cq(cq_ptr) }.poll(out) as c_int
}

/// # Safety
///
/// See above.
unsafe extern "C" fn req_notify_cq(cq_ptr: *mut c_void, flags: u32) -> c_int {
    // SAFETY: see above.
    unsafe { cq(cq_ptr) }.arm(flags)
}

/// # Safety
///
/// See above; `attr`'s CQ pointers are the shim's for CQs of this device, or null.
unsafe extern "C" fn create_qp(dev: *mut c_void, ibqp: *mut ffi::ib_qp, attr: *mut ffi::iwarp_ib_qp_attr, out: *mut *mut c_void) -> c_int {
    // SAFETY: see above.
    let attr = unsafe { &mut *attr };
    if attr.send_cq.is_null() || attr.recv_cq.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: see above: the CQs live while the QP uses them (the RDMA core counts it).
    let (send_cq, recv_cq) = unsafe { (cq(attr.send_cq).into(), cq(attr.recv_cq).into()) };
    // SAFETY: see above.
    let dev = unsafe { device(dev) };
    // The box first: once made, the QP is listed, and nothing may fail after that.
    let made = KBox::<KernelQp>::new_uninit(GFP_KERNEL)
        .map_err(Error::from)
        .and_then(|b| KernelQp::new(dev.into(), ibqp, attr, send_cq, recv_cq).map(|(q, mappings)| (KBox::write(b, q), mappings)));
    match made {
        Ok((q, mappings)) => {
            if let Some(m) = mappings {
                (attr.sq, attr.rq) = (m.send.into_ffi(), m.recv.into_ffi());
            }
            // SAFETY: see above.
            unsafe { *out = q.into_foreign() };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// See above.
unsafe extern "C" fn modify_qp(qp_ptr: *mut c_void, mask: u32, state: u32) -> c_int {
    // SAFETY: see above.
    errno(unsafe { qp(qp_ptr) }.modify(mask, state))
}

/// # Safety
///
/// See above.
unsafe extern "C" fn query_qp(qp_ptr: *mut c_void, attr: *mut ffi::iwarp_ib_qp_attr) -> c_int {
    // SAFETY: see above.
    unsafe { qp(qp_ptr).query(&mut *attr) };
    0
}

/// # Safety
///
/// See above.
unsafe extern "C" fn qp_counters(qp_ptr: *mut c_void, counters: *mut ffi::iwarp_ib_qp_counters) {
    // SAFETY: see above.
    unsafe { qp(qp_ptr).counters(&mut *counters) };
}

/// # Safety
///
/// See above.
unsafe extern "C" fn end_qp(qp_ptr: *mut c_void) {
    // SAFETY: see above: ends the QP (flushing what was posted, reporting CLOSE).
    unsafe { qp(qp_ptr) }.end();
}

/// # Safety
///
/// See above; `end_qp` ran, and the QP is not used after.
unsafe extern "C" fn destroy_qp(qp_ptr: *mut c_void) {
    // SAFETY: see above: frees it.
    drop(unsafe { <KBox<KernelQp> as ForeignOwnable>::from_foreign(qp_ptr) });
}

/// # Safety
///
/// See above; `wr` and its entries are the consumer's, valid for the call.
unsafe extern "C" fn post_send(qp_ptr: *mut c_void, wr: *const ffi::iwarp_ib_send_wr) -> c_int {
    // SAFETY: see above.
    errno(unsafe { qp(qp_ptr).post_send(&*wr) })
}

/// # Safety
///
/// See above.
unsafe extern "C" fn doorbell(qp_ptr: *mut c_void) -> c_int {
    // SAFETY: see above.
    errno(unsafe { qp(qp_ptr) }.doorbell())
}

/// # Safety
///
/// See above; the QP's destroy waits for this to return (it runs in a work item).
unsafe extern "C" fn hand_over(qp_ptr: *mut c_void) {
    // SAFETY: see above.
    unsafe { qp(qp_ptr) }.hand_over()
}

/// # Safety
///
/// See above; `wr` and its entries are the consumer's, valid for the call.
unsafe extern "C" fn post_recv(qp_ptr: *mut c_void, wr: *const ffi::iwarp_ib_recv_wr) -> c_int {
    // SAFETY: see above.
    errno(unsafe { qp(qp_ptr).post_recv(&*wr) })
}

/// # Safety
///
/// `dev` came from [`Arc::into_foreign`] of an [`IbDevice`]; it is not used after.
unsafe extern "C" fn dev_free(dev: *mut c_void) {
    // SAFETY: the function's contract.
    drop(unsafe { <Arc<IbDevice> as ForeignOwnable>::from_foreign(dev) });
}

/// # Safety
///
/// As [`device`]: called from the device's sysfs files, which the RDMA core removes (waiting
/// for calls in them to return) before `dealloc_driver` frees it.
unsafe extern "C" fn dev_mpa(dev: *mut c_void) -> u32 {
    // SAFETY: the function's contract.
    unsafe { device(dev) }.mpa_options()
}

/// # Safety
///
/// As [`dev_mpa`].
unsafe extern "C" fn dev_set_mpa(dev: *mut c_void, option: u32, on: bool) {
    // SAFETY: the function's contract.
    unsafe { device(dev) }.set_mpa_option(option, on)
}

/// # Safety
///
/// See above; called with interrupts off (it neither sleeps nor takes a `_bh` lock).
unsafe extern "C" fn iw_get_qp(dev: *mut c_void, qpn: u32) -> *mut ffi::ib_qp {
    // SAFETY: see above.
    unsafe { device(dev) }.ibqp(qpn).map_or(core::ptr::null_mut(), |ibqp| ibqp as *mut ffi::ib_qp)
}

/// # Safety
///
/// See above; `id` is iw_cm's, held for the call; `p` and its private data are valid for it.
unsafe extern "C" fn iw_connect(dev: *mut c_void, id: *mut ffi::iw_cm_id, p: *const ffi::iwarp_iw_param) -> c_int {
    // SAFETY: see above.
    errno(cm::connect(&*unsafe { device(dev) }, id, unsafe { &*p }))
}

/// # Safety
///
/// See above; `pending` is what we gave iw_cm as a request's `provider_data`.
unsafe extern "C" fn iw_accept(dev: *mut c_void, id: *mut ffi::iw_cm_id, pending: *mut c_void, p: *const ffi::iwarp_iw_param) -> c_int {
    // SAFETY: see above.
    errno(cm::accept(&*unsafe { device(dev) }, id, pending as usize, unsafe { &*p }))
}

/// # Safety
///
/// See above; `private` holds `len` octets (or is null with 0).
unsafe extern "C" fn iw_reject(dev: *mut c_void, pending: *mut c_void, private: *const u8, len: u32) -> c_int {
    let private = if len == 0 || private.is_null() {
        &[][..]
    } else {
        // SAFETY: see above.
        unsafe { core::slice::from_raw_parts(private, len as usize) }
    };
    // SAFETY: see above.
    errno(cm::reject(&*unsafe { device(dev) }, pending as usize, private))
}

/// # Safety
///
/// See above; `out` is the `cm_id`'s `provider_data`, which the shim keeps for `iw_unlisten`.
unsafe extern "C" fn iw_listen(dev: *mut c_void, id: *mut ffi::iw_cm_id, p: *const ffi::iwarp_iw_param, backlog: u32, out: *mut *mut c_void) -> c_int {
    // SAFETY: see above.
    let dev: Arc<IbDevice> = unsafe { device(dev) }.into();
    // SAFETY: see above.
    match cm::listen(dev, id, unsafe { &*p }, backlog) {
        Ok(l) => {
            // SAFETY: see above.
            unsafe { *out = l.into_foreign() };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// `listener` came from `iw_listen` and is not used after.
unsafe extern "C" fn iw_unlisten(listener: *mut c_void) {
    // SAFETY: the function's contract: shuts it down and frees it.
    drop(unsafe { <KBox<CmListener> as ForeignOwnable>::from_foreign(listener) });
}
