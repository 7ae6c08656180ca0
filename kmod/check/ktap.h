/* SPDX-License-Identifier: GPL-2.0 */
/*
 * KTAP lines in the kernel log for the check modules: CHECK() counts a check, prints
 * "ok N - ..." or "not ok N - ...", and counts the failures; ktap_end() prints the plan and
 * gives the module's init result (EIO if any check failed).
 */
#ifndef IWARP_CHECK_KTAP_H
#define IWARP_CHECK_KTAP_H

#include <linux/printk.h>

static int checks, failures;

#define CHECK(cond, fmt, ...)                                                            \
	do {                                                                             \
		bool ok_ = (cond);                                                       \
		checks++;                                                                \
		failures += !ok_;                                                        \
		pr_info("%sok %d - " fmt "\n", ok_ ? "" : "not ", checks, ##__VA_ARGS__); \
	} while (0)

static inline int ktap_end(void)
{
	pr_info("1..%d\n", checks);
	pr_info("# %d of %d checks failed\n", failures, checks);
	return failures ? -EIO : 0;
}

#endif
