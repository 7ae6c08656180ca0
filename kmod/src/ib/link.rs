// SPDX-License-Identifier: GPL-2.0

//! The rdma link type `iwarp`: which netdevs get a device (Ethernet ones, one device each),
//! the list of our devices, and what a netdev's events do to its device (down and up are
//! port events; unregistering the netdev unregisters the device). The RDMA core owns each
//! device; the list holds a reference to each until the module forgets it, so unloading can
//! wait for any unregistration still running our code (`Links::drop`).

use super::device::IbDevice;
use crate::ffi;
use crate::verbs;
use core::ptr::NonNull;
use kernel::bindings::net_device;
use kernel::error::{from_err_ptr, to_result};
use kernel::ffi::{c_char, c_int};
use kernel::prelude::*;
use kernel::types::ForeignOwnable;

/// A device of ours.
struct Device {
    /// The RDMA core's device (held: see the module doc).
    ib: NonNull<ffi::ib_device>,
    /// Its netdev, as an identity only (never dereferenced here).
    netdev: usize,
    /// The RDMA core has unregistered it (its `dealloc_driver` ran).
    gone: bool,
}

// SAFETY: `ib` is a handle the shim takes from any thread (the RDMA core's devices are not
// tied to one), and `netdev` is a number.
unsafe impl Send for Device {}

kernel::sync::global_lock! {
    // SAFETY: `Links::register` initializes it, once, before the link type exists.
    unsafe(uninit) static DEVICES: Mutex<KVec<Device>> = KVec::new();
}

kernel::sync::global_lock! {
    // SAFETY: `Links::register` initializes it, once, before the link type exists.
    unsafe(uninit) static ADDING: Mutex<()> = ();
}

static CALLBACKS: ffi::iwarp_ib_callbacks = ffi::iwarp_ib_callbacks { newlink: Some(newlink), netdev_event: Some(netdev_event), gone: Some(gone) };

/// The link type and the netdev notifier, registered while this lives; dropping it
/// unregisters every device of ours and waits for each.
pub(crate) struct Links(());

impl Links {
    /// Call once, at module load.
    pub(crate) fn register() -> Result<Links> {
        // SAFETY: module init calls these once, before anything can reach them.
        unsafe {
            DEVICES.init();
            ADDING.init();
        }
        let limits = ffi::iwarp_ib_limits {
            max_mr_size: verbs::MAX_MR_SIZE,
            max_message: verbs::MAX_MESSAGE as u32,
            max_qp: verbs::MAX_QP,
            max_qp_wr: verbs::MAX_QP_WR,
            max_sge: verbs::MAX_SGE as u32,
            max_cq: verbs::MAX_CQ,
            max_cqe: verbs::MAX_CQE,
            max_mr: verbs::MAX_MR,
            max_pd: verbs::MAX_PD,
            max_ird_ord: verbs::MAX_IRD_ORD,
            max_page_list: crate::kernel_memory::MAX_PAGE_LIST,
        };
        // SAFETY: `CALLBACKS` and `VERBS` are statics the shim may keep; `limits` is copied
        // during the call.
        to_result(unsafe { ffi::iwarp_shim_ib_register(&CALLBACKS, &super::verbs::VERBS, &limits) })?;
        Ok(Links(()))
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        // SAFETY: registered in `register`; after this no newlink or netdev event calls us.
        unsafe { ffi::iwarp_shim_ib_unregister() };
        // Unregistering waits for an unregistration already running (a netdev's, or `rdma
        // link delete`'s), which may be inside our `dealloc_driver`: only then may the module's
        // code go.
        loop {
            // Not held while unregistering: that calls `gone`.
            let next = DEVICES.lock().pop();
            let Some(d) = next else { break };
            // SAFETY: the list's reference kept the device; the shim drops it.
            unsafe { ffi::iwarp_shim_ib_device_unregister_and_drop(d.ib.as_ptr()) };
        }
        // A static is never dropped: give its buffer back while the module can.
        *DEVICES.lock() = KVec::new();
        // SAFETY: every device is gone, so no connection work is queued any more.
        unsafe { ffi::iwarp_shim_ib_done() };
    }
}

/// Drops the list's reference to devices the RDMA core is done with, waiting for their
/// unregistration to finish.
fn forget_gone() {
    loop {
        let next = {
            let mut devices = DEVICES.lock();
            devices.iter().position(|d| d.gone).and_then(|i| devices.remove(i).ok())
        };
        let Some(d) = next else { return };
        // SAFETY: the list's reference kept the device until now; the shim drops it.
        unsafe { ffi::iwarp_shim_ib_device_unregister_and_drop(d.ib.as_ptr()) };
    }
}

/// `rdma link add NAME type iwarp netdev DEV`.
///
/// # Safety
///
/// `name` and `netdev` are the RDMA core's, valid for the call.
unsafe extern "C" fn newlink(name: *const c_char, netdev: *mut net_device) -> c_int {
    // SAFETY: the RDMA core passes a netdev it holds for the call.
    if !unsafe { ffi::iwarp_shim_netdev_is_ethernet(netdev) } {
        return EINVAL.to_errno();
    }
    // One at a time, so the check below holds until the device is listed. The list itself
    // is not held while a device is made: failing to make one calls `gone`, which takes it.
    let _adding = ADDING.lock();
    forget_gone();
    {
        let mut devices = DEVICES.lock();
        if devices.iter().any(|d| !d.gone && d.netdev == netdev as usize) {
            return EEXIST.to_errno();
        }
        if devices.reserve(1, GFP_KERNEL).is_err() {
            return ENOMEM.to_errno();
        }
    }
    let rust = match IbDevice::new() {
        Ok(d) => d.into_foreign(),
        Err(e) => return e.to_errno(),
    };
    // SAFETY: as above; the shim makes a device bound to it, which owns `rust` from now on
    // (freeing it through `VERBS.dev_free`, also if this fails).
    let ib = match from_err_ptr(unsafe { ffi::iwarp_shim_ib_device_create(netdev, rust) }) {
        Ok(ib) => ib,
        Err(e) => return e.to_errno(),
    };
    let Some(ib) = NonNull::new(ib) else { return ENOMEM.to_errno() };
    // SAFETY: a device just made, not registered yet: the list's reference.
    unsafe { ffi::iwarp_shim_ib_device_hold(ib.as_ptr()) };
    // Room was reserved above, and only this call adds.
    let _ = DEVICES.lock().push(Device { ib, netdev: netdev as usize, gone: false }, GFP_KERNEL);
    // Registering calls back into us (queries), so the list is not held.
    // SAFETY: `ib` is ours and held; `name` is the RDMA core's string for the call.
    let rc = unsafe { ffi::iwarp_shim_ib_device_register(ib.as_ptr(), name) };
    if rc != 0 {
        DEVICES.lock().retain(|d| d.ib != ib);
        // SAFETY: registering failed, so the device is still ours to free; then the list's
        // reference goes.
        unsafe {
            ffi::iwarp_shim_ib_device_free(ib.as_ptr());
            ffi::iwarp_shim_ib_device_drop(ib.as_ptr());
        }
    }
    rc
}

/// A netdev event: our device on that netdev, if any, follows it.
///
/// # Safety
///
/// Called by the netdev notifier; `netdev` is only compared.
unsafe extern "C" fn netdev_event(netdev: *mut net_device, what: ffi::iwarp_netdev_event) {
    let devices = DEVICES.lock();
    for d in devices.iter().filter(|d| !d.gone && d.netdev == netdev as usize) {
        // SAFETY: listed devices are held; the shim ignores one not registered (yet or any more).
        unsafe {
            match what {
                ffi::iwarp_netdev_event_IWARP_NETDEV_UNREGISTER => {
                    ffi::iwarp_shim_ib_device_unregister_queued(d.ib.as_ptr());
                }
                ffi::iwarp_netdev_event_IWARP_NETDEV_UP => ffi::iwarp_shim_ib_port_event(d.ib.as_ptr(), true),
                _ => ffi::iwarp_shim_ib_port_event(d.ib.as_ptr(), false),
            }
        }
    }
}

/// The RDMA core is done with `ib` (its `dealloc_driver`): no event reaches it from now on.
///
/// # Safety
///
/// Called by the RDMA core; `ib` is only compared.
unsafe extern "C" fn gone(ib: *mut ffi::ib_device) {
    for d in DEVICES.lock().iter_mut().filter(|d| d.ib.as_ptr() == ib) {
        d.gone = true;
    }
}
