// SPDX-License-Identifier: GPL-2.0
/*
 * siw and iwarp.ko never run side by side. Our devices carry siw's driver id, so that
 * rdma-core's siw provider (libsiw) drives them from user space unmodified; but siw.ko finds
 * its devices by that id: its netdev notifier would take ours for its own and write into them,
 * and its module exit unregisters every device with the id. So while a device of ours is
 * registered, loading siw is refused (a module notifier vetoes it), and while siw is loaded,
 * registering one of ours is refused with EBUSY.
 *
 * siw loaded before iwarp.ko is seen by its directory in /sys/module; one loaded after, by the
 * notifier. What remains is a siw load whose notifier call ran before ours was registered and
 * whose sysfs directory is not made yet, a window of microseconds at our insmod.
 */
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/namei.h>
#include <linux/notifier.h>

#include "shim.h"

static DEFINE_MUTEX(guard_lock);
/* Devices of ours that claimed the id and are not freed yet. */
static unsigned int claimed;
/* siw passed its COMING notification and has not gone since. */
static bool siw_coming;

static bool is_siw(const struct module *mod)
{
	return !strcmp(mod->name, "siw");
}

static bool siw_loaded(void)
{
	struct path path;

	if (IS_BUILTIN(CONFIG_RDMA_SIW) || siw_coming)
		return true;
	if (kern_path("/sys/module/siw", LOOKUP_FOLLOW, &path))
		return false;
	path_put(&path);
	return true;
}

static int guard_module_event(struct notifier_block *nb, unsigned long state, void *data)
{
	struct module *mod = data;
	int rv = 0;

	if (!is_siw(mod))
		return NOTIFY_DONE;
	mutex_lock(&guard_lock);
	if (state == MODULE_STATE_COMING) {
		if (claimed) {
			pr_notice("iwarp: siw refused: iwarp.ko's RDMA devices carry siw's driver id (rdma link delete them first)\n");
			rv = -EBUSY;
		} else {
			siw_coming = true;
		}
	} else if (state == MODULE_STATE_GOING) {
		siw_coming = false;
	}
	mutex_unlock(&guard_lock);
	return notifier_from_errno(rv);
}

static struct notifier_block guard_nb = {
	.notifier_call = guard_module_event,
};

int iwarp_siw_guard_start(void)
{
	return register_module_notifier(&guard_nb);
}

/* After the last device of ours is freed. */
void iwarp_siw_guard_stop(void)
{
	unregister_module_notifier(&guard_nb);
}

/* Before registering a device: 0, or -EBUSY while siw is loaded. */
int iwarp_siw_guard_claim(void)
{
	int rv = 0;

	mutex_lock(&guard_lock);
	if (siw_loaded()) {
		pr_notice("iwarp: no device while siw is loaded: both use siw's driver id (rmmod siw first)\n");
		rv = -EBUSY;
	} else {
		claimed++;
	}
	mutex_unlock(&guard_lock);
	return rv;
}

/* When a device that claimed is freed. */
void iwarp_siw_guard_release(void)
{
	mutex_lock(&guard_lock);
	claimed--;
	mutex_unlock(&guard_lock);
}
