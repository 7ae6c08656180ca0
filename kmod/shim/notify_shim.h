/* SPDX-License-Identifier: GPL-2.0 */
/* Eventfd notification; the Rust side is src/eventfd.rs. */
#ifndef IWARP_NOTIFY_SHIM_H
#define IWARP_NOTIFY_SHIM_H

struct eventfd_ctx;

struct eventfd_ctx *iwarp_shim_eventfd_get(int fd, int *err);
void iwarp_shim_eventfd_signal(struct eventfd_ctx *ctx);
void iwarp_shim_eventfd_put(struct eventfd_ctx *ctx);

#endif
