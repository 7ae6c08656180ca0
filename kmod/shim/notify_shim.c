// SPDX-License-Identifier: GPL-2.0
/*
 * Completion notification through an eventfd the application passes in: the module signals it,
 * the application waits on it with poll(2)/epoll. The Rust side is src/eventfd.rs.
 */
#include <linux/err.h>
#include <linux/eventfd.h>

#include "notify_shim.h"

/* The eventfd behind the caller's @fd, referenced; or NULL with *@err. */
struct eventfd_ctx *iwarp_shim_eventfd_get(int fd, int *err)
{
	struct eventfd_ctx *ctx = eventfd_ctx_fdget(fd);

	if (IS_ERR(ctx)) {
		*err = PTR_ERR(ctx);
		return NULL;
	}
	*err = 0;
	return ctx;
}

void iwarp_shim_eventfd_signal(struct eventfd_ctx *ctx)
{
	eventfd_signal(ctx);
}

void iwarp_shim_eventfd_put(struct eventfd_ctx *ctx)
{
	eventfd_ctx_put(ctx);
}
