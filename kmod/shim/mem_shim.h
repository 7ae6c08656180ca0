/* SPDX-License-Identifier: GPL-2.0 */
/* Pinning user memory; the Rust side is src/pinned.rs. */
#ifndef IWARP_MEM_SHIM_H
#define IWARP_MEM_SHIM_H

#include <linux/types.h>

struct iwarp_pinned;

struct iwarp_pinned *iwarp_shim_pin_user(u64 addr, u64 len, bool writable, int *err);
void iwarp_shim_unpin_user(struct iwarp_pinned *p);
unsigned long iwarp_shim_pinned_npages(const struct iwarp_pinned *p);
void iwarp_shim_pinned_copy_from(const struct iwarp_pinned *p, u64 offset, void *dst, size_t len);

#endif
