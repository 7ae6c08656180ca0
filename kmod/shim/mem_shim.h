/* SPDX-License-Identifier: GPL-2.0 */
/* Pinned user memory (src/pinned.rs) and mappable rings (src/ring.rs). */
#ifndef IWARP_MEM_SHIM_H
#define IWARP_MEM_SHIM_H

#include <linux/types.h>

struct iwarp_pinned;

struct iwarp_pinned *iwarp_shim_pin_user(u64 addr, u64 len, bool writable, int *err);
void iwarp_shim_unpin_user(struct iwarp_pinned *p);
unsigned long iwarp_shim_pinned_npages(const struct iwarp_pinned *p);
void iwarp_shim_pinned_copy_from(const struct iwarp_pinned *p, u64 offset, void *dst, size_t len);

void iwarp_shim_pinned_copy_to(const struct iwarp_pinned *p, u64 offset, const void *src, size_t len);

struct page;
struct page *iwarp_shim_pinned_page(const struct iwarp_pinned *p, unsigned long idx);
void *iwarp_shim_page_address(struct page *page);

struct vm_area_struct;
void *iwarp_shim_ring_alloc(size_t bytes);
void iwarp_shim_ring_free(void *ring);
int iwarp_shim_ring_mmap(struct vm_area_struct *vma, void *ring, size_t bytes);
unsigned long iwarp_shim_vma_pgoff(const struct vm_area_struct *vma);

#endif
