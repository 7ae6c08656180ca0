// SPDX-License-Identifier: GPL-2.0
/*
 * The misc device's file operations: the kernel crate's MiscDeviceRegistration leaves their
 * .owner unset, so an open file of /dev/iwarp did not pin the module and rmmod unloaded it
 * under the file (its release then ran code that was gone). src/device/mod.rs points the
 * registered device at a copy that names this module as owner.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>

#include "shim.h"

static struct file_operations iwarp_fops;

/*
 * Has @misc's files pin this module while open (misc_open takes fops_get() of what @misc
 * points at when a file opens). Call once, right after registering @misc, before user space
 * can know the device is there.
 */
void iwarp_shim_misc_pin_module(struct miscdevice *misc)
{
	iwarp_fops = *misc->fops;
	iwarp_fops.owner = THIS_MODULE;
	WRITE_ONCE(misc->fops, &iwarp_fops);
}
