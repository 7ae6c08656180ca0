// SPDX-License-Identifier: GPL-2.0
/*
 * Memory shared with user space: long-term pinning of user buffers for memory regions, charged to the caller's
 * RLIMIT_MEMLOCK through mm->pinned_vm as the RDMA core does (CAP_IPC_LOCK is exempt).
 * The mm is held until the pages are unpinned, so the charge is returned to the right mm
 * even when the process has exited (file release after exit).
 *
 * What a caller makes the module allocate is charged to its memory cgroup. Allocations in sizes
 * it chooses (rings, work-request arrays, page arrays of regions) fail with ENOMEM past the
 * cgroup's limit instead of waking the cgroup's OOM killer (as io_uring's rings). The
 * fixed-size objects (the kernel crate's Arc and KBox take only GFP_KERNEL_ACCOUNT, which at
 * the limit does wake it) stay far below IWARP_CHARGED_ROOM octets per call, and every
 * allocation of the first kind, and every call that makes objects, first proves that much room
 * is left in the cgroup: so the cgroup's limit shows as ENOMEM, never as its OOM killer.
 */
#include <linux/capability.h>
#include <linux/err.h>
#include <linux/highmem.h>
#include <linux/llist.h>
#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/workqueue.h>

#include "shim.h"

#define IWARP_GFP_CHARGED (GFP_KERNEL_ACCOUNT | __GFP_RETRY_MAYFAIL | __GFP_NOWARN)
#define IWARP_CHARGED_ROOM (128 * 1024)

/* 0 if the caller's memory cgroup has IWARP_CHARGED_ROOM octets to spare now, else -ENOMEM. */
int iwarp_shim_charged_room(void)
{
	void *p = kvmalloc(IWARP_CHARGED_ROOM, IWARP_GFP_CHARGED);

	if (!p)
		return -ENOMEM;
	kvfree(p);
	return 0;
}

#if BITS_PER_LONG != 64
#error "the ABI's 64-bit user addresses and lengths are used as unsigned long and usize: a 32-bit kernel would truncate them"
#endif

#ifdef CONFIG_HIGHMEM
#error "pages are sent and checksummed through their kernel addresses; it needs every page mapped (no HIGHMEM)"
#endif

struct iwarp_pinned {
	struct mm_struct *mm;
	unsigned long npages;
	bool writable;
	/* On iwarp_unpin_list while its unpinning waits for process context. */
	struct llist_node later;
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

	p = kvzalloc(struct_size(p, pages, npages), IWARP_GFP_CHARGED);
	if (!p)
		return ERR_PTR(-ENOMEM);
	if (iwarp_shim_charged_room()) {
		kvfree(p);
		return ERR_PTR(-ENOMEM);
	}
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

/* Pinned sets whose unpinning was left to iwarp_unpin_work. */
static LLIST_HEAD(iwarp_unpin_list);

static void iwarp_unpin_later_fn(struct work_struct *work)
{
	struct iwarp_pinned *p, *next;

	llist_for_each_entry_safe(p, next, llist_del_all(&iwarp_unpin_list), later)
		iwarp_shim_unpin_user(p);
}

static DECLARE_WORK(iwarp_unpin_work, iwarp_unpin_later_fn);

/*
 * iwarp_shim_unpin_user() from a work item, for a caller that may not sleep (marking written
 * pages dirty takes their lock). Allocates nothing.
 */
void iwarp_shim_unpin_user_later(struct iwarp_pinned *p)
{
	llist_add(&p->later, &iwarp_unpin_list);
	schedule_work(&iwarp_unpin_work);
}

/* Waits until every pinned set left to the work item is unpinned (before the module goes). */
void iwarp_shim_unpin_flush(void)
{
	flush_work(&iwarp_unpin_work);
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

/*
 * The page under kernel address @addr, with a reference on its folio, if TCP may send from it
 * by reference: NULL if @addr is outside the kernel's linear map, or its page is a slab's
 * (MSG_SPLICE_PAGES refuses those, with a warning) or already freed. Kernel consumers of the
 * RDMA core name their memory so.
 */
struct page *iwarp_shim_kernel_page_get(u64 addr)
{
	const void *p = (const void *)(unsigned long)addr;
	struct folio *folio;

	if (!virt_addr_valid(p))
		return NULL;
	folio = page_folio(virt_to_page(p));
	if (folio_test_slab(folio) || !folio_try_get(folio))
		return NULL;
	return virt_to_page(p);
}

/* Drops the reference iwarp_shim_kernel_page_get took. */
void iwarp_shim_kernel_page_put(struct page *page)
{
	put_page(page);
}

/* Zeroed kernel memory that user space may map (queue rings); @bytes a multiple of PAGE_SIZE. */
void *iwarp_shim_ring_alloc(size_t bytes)
{
	void *ring = __vmalloc(bytes, IWARP_GFP_CHARGED | __GFP_ZERO);

	if (ring && iwarp_shim_charged_room()) {
		vfree(ring);
		return NULL;
	}
	return ring;
}

void iwarp_shim_ring_free(void *ring)
{
	vfree(ring);
}

/*
 * Maps @ring (@bytes long) into @vma, which must be exactly that long, page by page as
 * remap_vmalloc_range() does (which takes only vmalloc_user()'s memory, never charged). The
 * vma holds references on the pages, so they outlive iwarp_shim_ring_free() while mapped.
 */
int iwarp_shim_ring_mmap(struct vm_area_struct *vma, void *ring, size_t bytes)
{
	size_t off;
	int rc;

	if (vma->vm_end - vma->vm_start != bytes)
		return -EINVAL;
	for (off = 0; off < bytes; off += PAGE_SIZE) {
		rc = vm_insert_page(vma, vma->vm_start + off, vmalloc_to_page(ring + off));
		if (rc)
			return rc;
	}
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	return 0;
}

/*
 * kvrealloc() for Rust's Charged allocator (src/charged.rs): @size 0 frees @p. A new allocation
 * leaves room in the cgroup as the others do (a grown one cannot be taken back; none grows).
 */
void *iwarp_shim_kvrealloc_charged(const void *p, size_t size, unsigned long align)
{
	void *q = kvrealloc_node_align(p, size, align, IWARP_GFP_CHARGED, NUMA_NO_NODE);

	if (q && !p && size && iwarp_shim_charged_room()) {
		kvfree(q);
		return NULL;
	}
	return q;
}

/* The mmap offset the caller asked for, in pages. */
unsigned long iwarp_shim_vma_pgoff(const struct vm_area_struct *vma)
{
	return vma->vm_pgoff;
}
