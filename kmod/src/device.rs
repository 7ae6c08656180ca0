// SPDX-License-Identifier: GPL-2.0

//! `/dev/iwarp`: one [`Context`] per open file; ioctls validated and answered here.

use crate::abi::{self, QueryDevice};
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration};
use kernel::prelude::*;
use kernel::uaccess::{UserPtr, UserSlice};

const _: () = assert!(core::mem::size_of::<QueryDevice>() == abi::QUERY_DEVICE_SIZE);

/// The device's answer, in a form `UserSliceWriter` can copy.
#[repr(transparent)]
struct QueryAnswer(QueryDevice);

// SAFETY: `QueryDevice` is `repr(C)` with only integer fields and no padding (its size is
// pinned to the sum of its fields by the assertion above and the ABI layout test), so every
// byte of it is initialized.
unsafe impl kernel::transmute::AsBytes for QueryAnswer {}

/// Registers the misc device.
pub(crate) fn register() -> impl PinInit<MiscDeviceRegistration<Context>, Error> {
    MiscDeviceRegistration::register(MiscDeviceOptions { name: c"iwarp" })
}

/// The state of one open file of `/dev/iwarp` (a device context). Empty until the data path
/// adds its objects.
pub(crate) struct Context;

#[vtable]
impl MiscDevice for Context {
    type Ptr = KBox<Self>;

    fn open(_file: &kernel::fs::File, _misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        Ok(KBox::new(Context, GFP_KERNEL)?)
    }

    fn ioctl(_me: &Context, _file: &kernel::fs::File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            abi::IOCTL_QUERY_DEVICE => {
                let mut w = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd)).writer();
                w.write(&QueryAnswer(abi::device_attributes()))?;
                Ok(0)
            }
            _ => Err(ENOTTY),
        }
    }
}
