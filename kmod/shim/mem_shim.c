// SPDX-License-Identifier: GPL-2.0
/*
 * Memory shared with user space: long-term pinning of user buffers for memory regions, charged to the caller's
 * RLIMIT_MEMLOCK through mm->pinned_vm as the RDMA core does (CAP_IPC_LOCK is exempt).
 * The mm is held until the pages are unpinned, so the charge is returned to the right mm
 * even when the process has exited (file release after exit).
 */
#include <linux/capability.h>
#include <linux/err.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "shim.h"

#ifdef CONFIG_HIGHMEM
#error "pages are sent and checksummed through their kernel addresses; it needs every page mapped (no HIGHMEM)"
#endif

struct iwarp_pinned {
	struct mm_struct *mm;
	unsigned long npages;
	bool writable;
	struct page *pages[];
};

static void unpin_and_uncharge(struct mm_struct *mm, struct page **pages, unsigned long pinned,
			       unsigned long charged, bool dirty)
{
	if (pinned)
		unpin_user_pages_dirty_lock(pages, pinned, dirty);
	atomic64_sub(charged, &mm->pinned_vm);
}

/*
 * Pins every page of [@addr, @addr + @len) for long-term DMA-like access. Returns the pinned
 * set, or an ERR_PTR: -EINVAL (empty or wrapping range), -ENOMEM (RLIMIT_MEMLOCK or
 * allocation), -EFAULT (not mapped, or not writable when @writable).
 */
struct iwarp_pinned *iwarp_shim_pin_user(u64 addr, u64 len, bool writable)
{
	struct mm_struct *mm = current->mm;
	unsigned long first, last, npages, done = 0, limit;
	unsigned int gup = FOLL_LONGTERM | (writable ? FOLL_WRITE : 0);
	struct iwarp_pinned *p;
	u64 end;
	long rc;

	if (!len || check_add_overflow(addr, len, &end) || !mm)
		return ERR_PTR(-EINVAL);
	first = addr >> PAGE_SHIFT;
	last = (end - 1) >> PAGE_SHIFT;
	npages = last - first + 1;

	p = kvzalloc(struct_size(p, pages, npages), GFP_KERNEL);
	if (!p)
		return ERR_PTR(-ENOMEM);
	limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	if (atomic64_add_return(npages, &mm->pinned_vm) > limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &mm->pinned_vm);
		kvfree(p);
		return ERR_PTR(-ENOMEM);
	}
	while (done < npages) {
		rc = pin_user_pages_fast((first + done) << PAGE_SHIFT, npages - done, gup, p->pages + done);
		if (rc <= 0) {
			unpin_and_uncharge(mm, p->pages, done, npages, false);
			kvfree(p);
			return ERR_PTR(rc < 0 ? rc : -EFAULT);
		}
		done += rc;
	}
	mmgrab(mm);
	p->mm = mm;
	p->npages = npages;
	p->writable = writable;
	return p;
}

/* Unpins (marking written pages dirty), returns the RLIMIT_MEMLOCK charge, frees @p. */
void iwarp_shim_unpin_user(struct iwarp_pinned *p)
{
	unpin_and_uncharge(p->mm, p->pages, p->npages, p->npages, p->writable);
	mmdrop(p->mm);
	kvfree(p);
}

unsigned long iwarp_shim_pinned_npages(const struct iwarp_pinned *p)
{
	return p->npages;
}

/*
 * Copies @len bytes starting @offset bytes into the pinned pages (offset 0 = first byte of the
 * first page) to @dst. The caller keeps the range inside the pinned pages.
 */
void iwarp_shim_pinned_copy_from(const struct iwarp_pinned *p, u64 offset, void *dst, size_t len)
{
	while (len) {
		unsigned long idx = offset >> PAGE_SHIFT;
		size_t in_page = offset & ~PAGE_MASK;
		size_t n = min_t(size_t, len, PAGE_SIZE - in_page);

		memcpy_from_page(dst, p->pages[idx], in_page, n);
		dst += n;
		offset += n;
		len -= n;
	}
}

/* Copies @len bytes from @src to @offset bytes into the pinned pages (the caller bounds it). */
void iwarp_shim_pinned_copy_to(const struct iwarp_pinned *p, u64 offset, const void *src, size_t len)
{
	while (len) {
		unsigned long idx = offset >> PAGE_SHIFT;
		size_t in_page = offset & ~PAGE_MASK;
		size_t n = min_t(size_t, len, PAGE_SIZE - in_page);

		memcpy_to_page(p->pages[idx], in_page, src, n);
		src += n;
		offset += n;
		len -= n;
	}
}

/* The @idx-th pinned page (the caller keeps @idx below the page count). */
struct page *iwarp_shim_pinned_page(const struct iwarp_pinned *p, unsigned long idx)
{
	return p->pages[idx];
}

/* The kernel address of @page (every page is mapped: no HIGHMEM). */
void *iwarp_shim_page_address(struct page *page)
{
	return page_address(page);
}

/* Zeroed kernel memory that user space may map (queue rings); @bytes a multiple of PAGE_SIZE. */
void *iwarp_shim_ring_alloc(size_t bytes)
{
	return vmalloc_user(bytes);
}

void iwarp_shim_ring_free(void *ring)
{
	vfree(ring);
}

/*
 * Maps @ring (@bytes long) into @vma, which must be exactly that long. The vma holds references
 * on the pages, so they outlive iwarp_shim_ring_free() while mapped.
 */
int iwarp_shim_ring_mmap(struct vm_area_struct *vma, void *ring, size_t bytes)
{
	if (vma->vm_end - vma->vm_start != bytes)
		return -EINVAL;
	return remap_vmalloc_range(vma, ring, 0);
}

/* The mmap offset the caller asked for, in pages. */
unsigned long iwarp_shim_vma_pgoff(const struct vm_area_struct *vma)
{
	return vma->vm_pgoff;
}
