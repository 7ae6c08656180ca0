// SPDX-License-Identifier: GPL-2.0

//! `/dev/iwarp`: one [`Context`] per open file; every ioctl argument is copied in, validated,
//! and answered here. Closing the file tears down everything the context holds.

use crate::abi::{self, DeregMr, QueryStats, RegMr};
use crate::mr::MrTable;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::uaccess::{UserPtr, UserSlice};

/// Open contexts.
static CONTEXTS: AtomicU64 = AtomicU64::new(0);

/// Registers the misc device.
pub(crate) fn register() -> impl PinInit<MiscDeviceRegistration<Context>, Error> {
    MiscDeviceRegistration::register(MiscDeviceOptions { name: c"iwarp" })
}

/// The state of one open file of `/dev/iwarp` (a device context).
#[pin_data(PinnedDrop)]
pub(crate) struct Context {
    #[pin]
    mrs: Mutex<MrTable>,
}

#[vtable]
impl MiscDevice for Context {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &kernel::fs::File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let ctx = KBox::try_pin_init(try_pin_init!(Context { mrs <- new_mutex!(MrTable::new()) }), GFP_KERNEL)?;
        CONTEXTS.fetch_add(1, Ordering::Relaxed);
        Ok(ctx)
    }

    fn ioctl(me: Pin<&Context>, _file: &kernel::fs::File, cmd: u32, arg: usize) -> Result<isize> {
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        match cmd {
            abi::IOCTL_QUERY_DEVICE => user.writer().write(&abi::device_attributes())?,
            abi::IOCTL_QUERY_STATS => user.writer().write(&QueryStats {
                pinned_pages: crate::pinned::pinned_pages(),
                memory_regions: crate::mr::regions(),
                contexts: CONTEXTS.load(Ordering::Relaxed),
                reserved: [0; 5],
            })?,
            abi::IOCTL_REG_MR => {
                let (mut r, mut w) = user.reader_writer();
                let mut req: RegMr = r.read()?;
                if req.reserved != 0 || req.lkey != 0 || req.stag != 0 {
                    return Err(EINVAL);
                }
                let stag = me.mrs.lock().register(req.addr, req.length, req.access)?;
                req.lkey = stag;
                req.stag = stag;
                if let Err(e) = w.write(&req) {
                    // The caller cannot learn the STag: do not leave the region behind.
                    let _ = me.mrs.lock().deregister(stag);
                    return Err(e);
                }
            }
            abi::IOCTL_DEREG_MR => {
                let req: DeregMr = user.reader().read()?;
                if req.reserved != 0 {
                    return Err(EINVAL);
                }
                me.mrs.lock().deregister(req.stag)?;
            }
            _ => return Err(ENOTTY),
        }
        Ok(0)
    }
}

#[pinned_drop]
impl PinnedDrop for Context {
    fn drop(self: Pin<&mut Self>) {
        CONTEXTS.fetch_sub(1, Ordering::Relaxed);
    }
}
